// Config reload: merge a freshly parsed config into the running one, key by key, as the key
// table (conf/config_keys.cc) says.
#include "proxy/ops/reload.h"

#include "conf/config_keys.h"
#include "conf/config_routes.h"

namespace idemgate {

ReloadPlan PlanReload(const Config& running, const Config& next_in) {
  auto next = std::make_shared<Config>(next_in);
  std::vector<std::string> ignored;
  for (const conf::KeySpec& key : conf::ConfigKeys()) {
    if (key.reload != conf::Reload::kRestart || conf::SameValue(key.field, running, *next)) {
      continue;
    }
    ignored.push_back(key.Qualified());
    conf::CopyValue(key.field, running, next.get());
  }
  // Values derived from restart-only keys follow them.
  for (const conf::DerivedField& derived : conf::DerivedFields()) {
    if (conf::SameValue(derived.field, running, *next)) continue;
    if (!derived.label.empty()) ignored.emplace_back(derived.label);
    conf::CopyValue(derived.field, running, next.get());
  }
  // Named groups are built into every worker at start-up: restart-only, whole.
  if (running.upstream_groups != next->upstream_groups) {
    ignored.emplace_back("upstreams (named upstream groups)");
    next->upstream_groups = running.upstream_groups;
  }
  // Routes: a change of what decides guarding and fingerprints (order, prefix, host, group,
  // a route's methods or fingerprint_headers) keeps the running table whole until a restart;
  // otherwise the new table applies, re-derived from the merged top level.
  if (!conf::SameRoutesShape(running, *next)) {
    ignored.emplace_back("routes (order, prefix, host, upstream, methods or fingerprint_headers)");
    next->routes = running.routes;
  } else {
    conf::RebuildRoutes(next.get());
    if (!conf::RoutesFitC4(*next)) {  // checked against the file's groups, not the running ones
      ignored.emplace_back("routes (a lease would not cover its running group's timeouts)");
      next->routes = running.routes;
    }
  }
  return ReloadPlan{std::move(next), std::move(ignored)};
}

}  // namespace idemgate

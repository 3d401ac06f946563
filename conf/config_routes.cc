// [[routes]] (see config_routes.h): reading, the per-route C4 check, and re-derivation on reload.
#include "conf/config_routes.h"

#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include "conf/config_values.h"

namespace idemgate::conf {
namespace {

// The keys a route may set, by section: the same rows (names, bounds, checks) as the top level.
constexpr std::array<std::string_view, 6> kIdempotencyKeys = {
    "methods", "ttl", "lease", "require_key", "fingerprint_headers", "takeover"};
constexpr std::array<std::string_view, 2> kLimitsKeys = {"max_request_body", "max_response_body"};
constexpr std::array<std::string_view, 2> kSubTables = {"idempotency", "limits"};

std::vector<std::string_view> RouteKeysOf(std::string_view section) {
  if (section == "idempotency") return {kIdempotencyKeys.begin(), kIdempotencyKeys.end()};
  if (section == "limits") return {kLimitsKeys.begin(), kLimitsKeys.end()};
  return {};
}

const KeySpec* FindKey(std::string_view qualified) {
  for (const KeySpec& key : ConfigKeys()) {
    if (key.Qualified() == qualified) return &key;
  }
  return nullptr;
}

void ReadPrefixAndHost(const SectionReader& r, std::string name, Route* route) {
  if (!r.String("prefix", &route->prefix)) {
    r.Fail("prefix", "is required: the path prefix the route matches, like \"/v1/payments\"");
  }
  const std::string& p = route->prefix;
  if (p.empty() || p.front() != '/' || !IsVisibleAscii(p)) {
    r.Fail("prefix",
           "\"" + p + "\" must be a path prefix starting with '/', visible ASCII without spaces");
  }
  // Request paths are normalized before the comparison; the prefix must already be.
  const std::string end = p.substr(p.rfind('/'));
  if (p.find_first_of("%?#") != std::string::npos || p.find("//") != std::string::npos ||
      p.find("/./") != std::string::npos || p.find("/../") != std::string::npos || end == "/." ||
      end == "/..") {
    r.Fail("prefix",
           "\"" + p +
               "\" must be a plain path: no '.' or '..' segments, \"//\", percent-escapes, "
               "'?' or '#' (request paths are compared decoded and resolved)");
  }
  route->match_prefix = ToLowerAscii(p);
  route->label = std::move(name) + " (prefix \"" + route->prefix + "\"";
  if (r.String("host", &route->host)) {
    const std::string& host = route->host;
    if (host.empty() || !IsVisibleAscii(host) || host.find('/') != std::string::npos) {
      r.Fail("host", "\"" + host + "\" must be a host name like \"api.example.com\"");
    }
    if (host.front() != '[' && host.find(':') != std::string::npos) {
      r.Fail("host", "\"" + host + "\": give the host without a port (any port matches)");
    }
    route->host = ToLowerAscii(host);
    // "pay.example." is the same DNS name (requests' hosts lose it too: NormalizeHost).
    if (route->host.size() > 1 && route->host.back() == '.') route->host.pop_back();
    route->label += ", host \"" + route->host + "\"";
  }
  route->label += ")";
}

void ReadGroup(const SectionReader& r, const Config& base, Route* route, Config* effective) {
  r.String("upstream", &route->upstream);
  if (route->upstream == "default") route->upstream.clear();
  const Config::Upstream* group = base.FindUpstream(route->upstream);
  if (group == nullptr) {
    r.Fail("upstream", "no upstream group \"" + route->upstream + "\" (define it as [upstreams." +
                           route->upstream + "], or leave upstream out for [upstream])");
  }
  effective->upstream = *group;
  effective->upstream_group = route->upstream;
}

// 4xx and 5xx only: a 1xx-3xx answer says the request was executed, so it must be stored (R1).
void ReadNoStoreStatuses(const SectionReader& r, Route* route) {
  std::vector<int64_t> statuses;
  if (!r.IntArray("no_store_statuses", &statuses)) return;
  for (int64_t status : statuses) {
    if (status < 400 || status > 599) {
      r.Fail("no_store_statuses",
             std::to_string(status) +
                 " is not a 4xx or 5xx status; an answer below 400 means the request was executed, "
                 "so it is always stored");
    }
    if (std::count(statuses.begin(), statuses.end(), status) > 1) {
      r.Fail("no_store_statuses", std::to_string(status) + " is listed more than once");
    }
    route->no_store_statuses.push_back(static_cast<int>(status));
  }
}

bool FitsC4(const Config& c) {
  const int64_t upstream_ms =
      SaturatingAdd(c.upstream.connect_timeout_ms, c.upstream.response_timeout_ms);
  return c.idempotency.lease_ms > upstream_ms && c.idempotency.ttl_ms > c.idempotency.lease_ms;
}

// C4 for the route: its lease over its group's timeouts, its ttl over its lease.
void CheckRouteLeaseAndTtl(const Context& ctx, const SectionReader& route,
                           const SectionReader& idem, const Route& rt, const Config& c) {
  const auto& up = c.upstream;
  const auto& id = c.idempotency;
  const std::string group = rt.upstream.empty() ? "upstream" : "upstreams." + rt.upstream;
  const int64_t upstream_ms = SaturatingAdd(up.connect_timeout_ms, up.response_timeout_ms);
  const uint32_t line = idem.Has("lease") ? idem.Line("lease") : route.Line("prefix");
  if (id.lease_ms <= upstream_ms) {
    throw ConfigError(FormatError(
        ctx.file, line, idem.Qualified("lease"),
        "(" + FormatDurationMs(id.lease_ms) +
            (idem.Has("lease") ? "" : ", from idempotency.lease") + ") of " + rt.label +
            " must be longer than " + group + ".connect_timeout + " + group +
            ".response_timeout (" + FormatDurationMs(up.connect_timeout_ms) + " + " +
            FormatDurationMs(up.response_timeout_ms) + " = " + FormatDurationMs(upstream_ms) +
            "), or a slow attempt could be taken over while it still runs"));
  }
  if (id.ttl_ms <= id.lease_ms) {
    throw ConfigError(
        FormatError(ctx.file, idem.Has("ttl") ? idem.Line("ttl") : line, idem.Qualified("ttl"),
                    "(" + FormatDurationMs(id.ttl_ms) +
                        (idem.Has("ttl") ? "" : ", from idempotency.ttl") + ") of " + rt.label +
                        " must be longer than its lease (" + FormatDurationMs(id.lease_ms) + ")"));
  }
}

// CheckWait's rule (wait <= max_wait <= lease; docs/behaviour.md "Waiting instead of 409") for the
// route. A route sets its lease, not the waits, so a lease shorter than the top level's max_wait
// (or wait) caps them for that route: no duplicate waits past the lease of the attempt it waits
// for.
void FitWaitsToLease(Config* c) {
  auto& id = c->idempotency;
  id.max_wait_ms = std::min(id.max_wait_ms, id.lease_ms);
  id.wait_ms = std::min(id.wait_ms, id.max_wait_ms);
}

// A route after one whose host and prefix cover it never matches (first match wins).
void CheckReachable(const SectionReader& r, const std::vector<Route>& earlier, const Route& route) {
  for (const Route& before : earlier) {
    if (!before.host.empty() && before.host != route.host) continue;
    if (route.match_prefix.compare(0, before.match_prefix.size(), before.match_prefix) != 0) {
      continue;
    }
    r.Fail("prefix", route.label + " never matches: " + before.label +
                         " comes first and matches every request it would (first match wins; "
                         "put the longer prefix first)");
  }
}

Route ReadRoute(const Context& ctx, const toml::table& table, size_t index, const Config& base,
                const std::vector<Route>& earlier) {
  const std::string name = "routes[" + std::to_string(index) + "]";
  SectionReader r(&table, name, ctx.file,
                  {"prefix", "host", "upstream", "no_store_statuses", "idempotency", "limits"});
  r.RejectUnknownKeys();
  Route route;
  ReadPrefixAndHost(r, name, &route);
  CheckReachable(r, earlier, route);
  Config effective = base;
  ReadGroup(r, base, &route, &effective);
  ReadNoStoreStatuses(r, &route);
  effective.idempotency.no_store_statuses = route.no_store_statuses;
  effective.route_host = route.host;
  std::vector<SectionReader> subs;
  subs.reserve(kSubTables.size());
  for (std::string_view section : kSubTables) {
    SectionReader& sub =
        subs.emplace_back(r.Table(section), r.Qualified(section), ctx.file, RouteKeysOf(section));
    sub.RejectUnknownKeys();
    for (const KeySpec& key : ConfigKeys()) {
      if (key.section != section || !IsRouteKey(key) || !sub.Has(key.name)) continue;
      ReadKey(key, ctx, sub, &effective);
      route.overridden.push_back(key.Qualified());
    }
  }
  CheckRouteLeaseAndTtl(ctx, r, subs[0], route, effective);
  FitWaitsToLease(&effective);
  route.effective = std::make_shared<const Config>(std::move(effective));
  return route;
}

}  // namespace

bool IsRouteKey(const KeySpec& key) {
  const std::vector<std::string_view> names = RouteKeysOf(key.section);
  return std::find(names.begin(), names.end(), key.name) != names.end();
}

void ReadRoutes(const Context& ctx, Config* config) {
  const toml::node* node = ctx.root->get("routes");
  if (node == nullptr) return;
  const toml::array* array = node->as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    throw ConfigError(
        FormatError(ctx.file, node->source().begin.line, "routes",
                    "expected [[routes]] tables, got " + std::string(TypeName(*node))));
  }
  Config base = *config;
  base.routes.clear();
  std::vector<Route> routes;
  for (size_t i = 0; i < array->size(); ++i) {
    routes.push_back(ReadRoute(ctx, *array->get(i)->as_table(), i + 1, base, routes));
  }
  config->routes = std::move(routes);
}

bool RoutesFitC4(const Config& config) {
  return std::all_of(config.routes.begin(), config.routes.end(),
                     [](const Route& route) { return FitsC4(*route.effective); });
}

void RebuildRoutes(Config* config) {
  Config base = *config;
  base.routes.clear();
  for (Route& route : config->routes) {
    Config effective = base;
    if (const Config::Upstream* group = base.FindUpstream(route.upstream)) {
      effective.upstream = *group;
      effective.upstream_group = route.upstream;
    }
    for (const std::string& name : route.overridden) {
      if (const KeySpec* key = FindKey(name)) CopyValue(key->field, *route.effective, &effective);
    }
    effective.idempotency.no_store_statuses = route.no_store_statuses;
    effective.route_host = route.host;
    FitWaitsToLease(&effective);
    route.effective = std::make_shared<const Config>(std::move(effective));
  }
}

namespace {

// The restart-only keys a route sets, in the order it sets them.
std::vector<const KeySpec*> RestartKeys(const Route& route) {
  std::vector<const KeySpec*> keys;
  for (const std::string& name : route.overridden) {
    const KeySpec* key = FindKey(name);
    if (key != nullptr && key->reload == Reload::kRestart) keys.push_back(key);
  }
  return keys;
}

}  // namespace

bool SameRoutesShape(const Config& a, const Config& b) {
  return std::equal(
      a.routes.begin(), a.routes.end(), b.routes.begin(), b.routes.end(),
      [](const Route& ra, const Route& rb) {
        if (ra.prefix != rb.prefix || ra.host != rb.host || ra.upstream != rb.upstream) {
          return false;
        }
        const std::vector<const KeySpec*> keys = RestartKeys(ra);
        return keys == RestartKeys(rb) &&
               std::all_of(keys.begin(), keys.end(), [&](const KeySpec* key) {
                 return SameValue(key->field, *ra.effective, *rb.effective);
               });
      });
}

}  // namespace idemgate::conf

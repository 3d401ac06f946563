// Route selection (see routes.h).
#include "proxy/policy/routes.h"

#include <algorithm>
#include <optional>
#include <string>

#include "proxy/http/http_message.h"
#include "proxy/policy/guard.h"

namespace idemgate {
namespace {

// The host the upstream acts on: an absolute-form target's (RFC 9112 3.2.2: the Host header is
// then ignored; the parser refused a Host that disagrees), else the Host header's.
std::string RequestHost(const Request& request) {
  std::string_view authority = TargetAuthority(request.target);
  if (!authority.empty()) return NormalizeHost(authority);
  const std::string* value = FindHeader(request.headers, "Host");
  return value == nullptr ? std::string() : NormalizeHost(*value);
}

int MatchPath(const Config& config, const std::string& path, const std::string& host) {
  for (size_t i = 0; i < config.routes.size(); ++i) {
    const Route& route = config.routes[i];
    if (!route.host.empty() && host != route.host) continue;
    if (path.compare(0, route.match_prefix.size(), route.match_prefix) == 0) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace

int MatchRoute(const Config& config, const Request& request) {
  if (config.routes.empty()) return -1;
  const std::string host = RequestHost(request);
  // Every reading an upstream might make of the path (RequestPathReadings) must fall under the
  // same route: "/v1/payments/a%2F..%2F..%2Fz" is /v1/payments/... to a router that keeps %2F in
  // a segment and /z to one that decodes it, and running it under either would let the other's
  // policy be skipped.
  int chosen = -1;
  bool first = true;
  for (const std::string& path : RequestPathReadings(request.target)) {
    const int index = MatchPath(config, path, host);
    if (!first && index != chosen) return kAmbiguousRoute;
    chosen = index;
    first = false;
  }
  return chosen;
}

uint64_t MaxRequestBody(const Config& config) {
  uint64_t max = config.limits.max_request_body;
  for (const Route& route : config.routes) {
    max = std::max(max, route.effective->limits.max_request_body);
  }
  return max;
}

std::string BodyLimitDetail(const Config& config) {
  return "The body exceeds the limit of " + std::to_string(config.limits.max_request_body) +
         " bytes.";
}

bool NotStored(const Config& config, int status) {
  const std::vector<int>& statuses = config.idempotency.no_store_statuses;
  return std::find(statuses.begin(), statuses.end(), status) != statuses.end();
}

std::shared_ptr<const Config> SelectRoute(const std::shared_ptr<const Config>& config,
                                          const Request& request) {
  const int index = MatchRoute(*config, request);
  if (index == kAmbiguousRoute) return nullptr;
  return index < 0 ? config : config->routes[static_cast<size_t>(index)].effective;
}

std::string AmbiguousRouteDetail(const Request& request) {
  std::string shown(request.Path().substr(0, 128));
  for (char& c : shown) {
    if (c < 0x21 || c > 0x7E || c == '"' || c == '\\') c = '?';
  }
  return "The path \"" + shown +
         "\" reads as different routes depending on how its escapes, dot segments, '\\' or ';' "
         "are interpreted; send it without encoded separators or dot segments.";
}

}  // namespace idemgate

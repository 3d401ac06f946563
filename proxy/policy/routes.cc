// Route selection (see routes.h).
#include "proxy/policy/routes.h"

#include <algorithm>
#include <optional>
#include <string>

#include "proxy/policy/guard.h"

namespace idemgate {
namespace {

// The Host header's host, lower-cased, without its port ("[::1]:80" -> "[::1]").
std::string RequestHost(const Request& request) {
  const std::string* value = FindHeader(request.headers, "Host");
  if (value == nullptr) return {};
  std::string_view host = TrimOws(*value);
  const size_t bracket = host.rfind(']');
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    host = host.substr(0, colon);
  }
  std::string out(host);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

int MatchRoute(const Config& config, const Request& request) {
  if (config.routes.empty()) return -1;
  std::optional<std::string> host;
  // One reading, the one the upstream most likely acts on (as nginx's location matching, but
  // case-insensitive): "/v1/exports/../payments" is a payments request.
  const std::string path = NormalizeRequestPath(request.target, /*decode_all=*/true);
  for (size_t i = 0; i < config.routes.size(); ++i) {
    const Route& route = config.routes[i];
    if (!route.host.empty()) {
      if (!host) host = RequestHost(request);
      if (*host != route.host) continue;
    }
    if (path.compare(0, route.match_prefix.size(), route.match_prefix) == 0) {
      return static_cast<int>(i);
    }
  }
  return -1;
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
  return index < 0 ? config : config->routes[static_cast<size_t>(index)].effective;
}

}  // namespace idemgate

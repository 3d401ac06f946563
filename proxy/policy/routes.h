// Route selection: which [[routes]] entry (conf/config_routes.h) a request runs under.
#pragma once

#include <memory>
#include <string>

#include "conf/config.h"
#include "proxy/http/http_message.h"

namespace idemgate {

// MatchRoute's answer when the readings of the path select different routes.
inline constexpr int kAmbiguousRoute = -2;

// The first route whose host (when it names one) is the host the request names (an absolute-form
// target's, else Host's; NormalizeHost: no port, case or trailing dot) and whose prefix starts
// the request's path, under every reading of the path (RequestPathReadings): its effective config.
// No route matches: `config` itself. The readings disagree: nullptr (refused as ambiguous, with
// AmbiguousRouteDetail's 400).
std::shared_ptr<const Config> SelectRoute(const std::shared_ptr<const Config>& config,
                                          const Request& request);
std::string AmbiguousRouteDetail(const Request& request);

// The largest max_request_body of the top level and every route: the parser's bound before its
// body decision (ClientConn::DecideBody) applies the chosen route's own limit.
uint64_t MaxRequestBody(const Config& config);

// The 413 detail for a body over the route's max_request_body.
std::string BodyLimitDetail(const Config& config);

// Whether the route's no_store_statuses lists `status`: answered, not stored.
bool NotStored(const Config& config, int status);

// The matching route's index in config.routes, -1 for none, or kAmbiguousRoute.
int MatchRoute(const Config& config, const Request& request);

}  // namespace idemgate

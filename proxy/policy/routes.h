// Route selection: which [[routes]] entry (conf/config_routes.h) a request runs under.
#pragma once

#include <memory>
#include <string>

#include "conf/config.h"
#include "proxy/http/http_message.h"

namespace idemgate {

// The first route whose host (when it names one) is the request's Host without its port and
// whose prefix starts the request's path, both normalized by NormalizeRequestPath (escapes
// decoded, dot segments resolved, slashes merged, lower-cased): its effective config. No route
// matches: `config` itself.
std::shared_ptr<const Config> SelectRoute(const std::shared_ptr<const Config>& config,
                                          const Request& request);

// The largest max_request_body of the top level and every route: the parser's bound before its
// body decision (ClientConn::DecideBody) applies the chosen route's own limit.
uint64_t MaxRequestBody(const Config& config);

// The 413 detail for a body over the route's max_request_body.
std::string BodyLimitDetail(const Config& config);

// Whether the route's no_store_statuses lists `status`: answered, not stored.
bool NotStored(const Config& config, int status);

// The matching route's index in config.routes, or -1.
int MatchRoute(const Config& config, const Request& request);

}  // namespace idemgate

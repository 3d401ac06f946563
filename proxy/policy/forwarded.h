// SPDX-License-Identifier: Apache-2.0
// Whom a request is from when the gateway sits behind proxies it trusts
// (listen.trusted_proxies): the peer's X-Forwarded-For is believed, the rest is not.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "conf/config.h"
#include "proxy/http/http_message.h"

namespace idemgate {

// The client of `request`: `peer` (the TCP peer, or a PROXY header's source) unless it is in
// `trusted`; then the X-Forwarded-For entries (every such header, in order) are walked from the
// right past those in `trusted`, and the first other one is the client. Its entry and those to
// its right (the trusted proxies) are cut from the request's X-Forwarded-For, so the gateway's
// own append (the client) leaves the upstream "…, client", as if the client had connected
// directly. With no such entry (or one that is not an IP address) the peer stays the client.
std::string BelievedClient(std::string_view peer, const std::vector<Cidr>& trusted,
                           Request* request);

}  // namespace idemgate

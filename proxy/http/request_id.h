// SPDX-License-Identifier: Apache-2.0
// X-Request-Id: the client's when it is usable, otherwise a new one; forwarded upstream and
// written to the access log, so one request can be followed from the client to the upstream.
#pragma once

#include <string>
#include <string_view>

#include "proxy/http/http_message.h"

namespace idemgate {

inline constexpr char kRequestIdHeader[] = "X-Request-Id";

// True for 1 to 128 visible ASCII characters (what the gateway passes on as given).
bool IsUsableRequestId(std::string_view id);
// 32 random hex digits.
std::string NewRequestId();
// Leaves exactly one X-Request-Id in `request`: the client's first usable one, else a new one
// (replacing unusable ones). Returns it.
std::string AssignRequestId(Request* request);
// The same, written to `*id`: a connection's relay keeps one string for every request it relays
// (its room is reused, not allocated per request).
void AssignRequestId(Request* request, std::string* id);

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// How an upstream call ended: the one upstream type the request's report (exchange/
// report_types.h) and the metrics carry, without the pool's interfaces.
#pragma once

#include <cstddef>

namespace idemgate {

enum class UpstreamError {
  kNone,
  kUnavailable,  // could not connect (refused, unreachable, connect timeout): nothing was sent
  kFailed,       // reset, EOF or malformed response after the request was sent
  kTooLarge,     // the response body is over limits.max_response_body
  kTimeout,      // no complete response within upstream.response_timeout
};
inline constexpr size_t kUpstreamErrorKinds = static_cast<size_t>(UpstreamError::kTimeout) + 1;

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Why a client connection was closed: what the connections report and the metrics count by.
#pragma once

#include <cstddef>

namespace idemgate {

// Why a client connection was closed (every close carries one).
enum class CloseReason {
  kClientClosed,    // the client closed its side before or between requests
  kSocketError,     // a read or write failed (reset, TLS error)
  kIdleTimeout,     // limits.idle_timeout between requests, or a client that read nothing
  kAfterAnswer,     // Connection: close, HTTP/1.0, or an error that ends the connection
  kShutdown,        // the gateway is draining
  kWriteFailed,     // the answer could not be queued (limits.max_unsent_bytes, no memory)
  kBadProxyHeader,  // listen.proxy_protocol: the connection did not start with a valid header
};
inline constexpr size_t kCloseReasonCount = static_cast<size_t>(CloseReason::kBadProxyHeader) + 1;

inline const char* CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kClientClosed:
      return "client_closed";
    case CloseReason::kSocketError:
      return "socket_error";
    case CloseReason::kIdleTimeout:
      return "idle_timeout";
    case CloseReason::kAfterAnswer:
      return "after_answer";
    case CloseReason::kShutdown:
      return "shutdown";
    case CloseReason::kWriteFailed:
      return "write_failed";
    case CloseReason::kBadProxyHeader:
      return "bad_proxy_header";
  }
  return "unknown";
}

}  // namespace idemgate

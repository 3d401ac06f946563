// SPDX-License-Identifier: Apache-2.0
// The codes of the gateway's own answers (SPEC §8), types only: the wire format (http/) names
// them when it refuses a request, and policy/errors.h maps each to its status and JSON body.
#pragma once

namespace idemgate {

enum class ErrorCode {
  kBadRequest,             // 400 bad_request
  kMissingCredentials,     // 401 missing_credentials
  kIdempotencyKeyMissing,  // 400 idempotency_key_missing
  kIdempotencyKeyInvalid,  // 400 idempotency_key_invalid
  kRequestTimeout,         // 408 request_timeout
  kIdempotencyKeyInUse,    // 409 idempotency_key_in_use
  kRequestTooLarge,        // 413 request_too_large
  kIdempotencyKeyReused,   // 422 idempotency_key_reused
  kHeadersTooLarge,        // 431 headers_too_large
  kUpstreamUnavailable,    // 502 upstream_unavailable
  kUpstreamFailed,         // 502 upstream_failed
  kStoreUnavailable,       // 503 store_unavailable
  kNotForwarded,           // 503 not_forwarded
  kUpstreamTimeout,        // 504 upstream_timeout
};

}  // namespace idemgate

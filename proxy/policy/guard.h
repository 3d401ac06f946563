// SPDX-License-Identifier: Apache-2.0
// Pure functions of the guard: route policy, scope id, key syntax, fingerprint (SPEC §1-§4).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conf/config.h"
#include "proxy/http/http_message.h"
#include "proxy/policy/errors.h"
#include "proxy/policy/request_path.h"
#include "store/record.h"

namespace idemgate {

enum class GuardKind {
  kPassthrough,  // not guarded: proxy straight through, nothing stored
  kGuarded,      // scope, key and fingerprint are set
  kReject,       // answer `error` (with `detail`) and store nothing
};

struct GuardDecision {
  GuardKind kind = GuardKind::kPassthrough;
  ErrorCode error = ErrorCode::kBadRequest;  // kReject
  std::string detail;                        // kReject; empty = default detail
  ScopeId scope{};
  std::string key;  // unquoted (K1)
  Fingerprint fingerprint{};
  // SPEC §13 E3, encryption on: `fingerprint` is HMAC-SHA-256 of this plain F1 digest under a
  // key derived from scope.secret; a record stored before encryption holds the plain one.
  std::optional<Fingerprint> legacy_fingerprint;
  // Encryption on and the HMAC not computed yet: `fingerprint` still holds the plain digest.
  // KeyFingerprint computes it before anything compares with or stores it; a replay from the
  // replay cache compares plain digests in memory and never needs it.
  bool keyed_pending = false;
};

// E3: computes the keyed fingerprint when it is pending (scope.secret keys it); no-op otherwise.
void KeyFingerprint(const Config& config, GuardDecision* d);

// The request's fingerprint in the kind `stored` was written in (E3): the plain one when the
// record holds that, else the keyed one. The keyed one must not be pending.
const Fingerprint& FingerprintAsStored(const GuardDecision& d, const Fingerprint& stored);

// G1-G2, S2-S4, K1-K2, F1-F3, in the SPEC's order. The request is complete (body decoded).
GuardDecision EvaluateGuard(const Config& config, const Request& request);

// G1-G2 from the headers alone: true when the request is not guarded and not rejected either,
// so the gateway only relays it (its body streams; nothing about it is stored).
bool IsPassthroughRequest(const Config& config, const Request& request);

// K1-K2: the key's value after sf-string unquoting, or nullopt-like empty + false when invalid.
bool ParseIdempotencyKey(std::string_view raw, std::string* key);

// S2/S4: HMAC-SHA-256(secret, normalized credential), or SHA-256 when secret is empty.
ScopeId ComputeScopeId(std::string_view header_name, std::string_view credential,
                       std::string_view secret);

// F1: SHA-256 over length-prefixed method, target, body, then each fingerprint header; under
// a host route, then its host (the request ran under that route: another route's backend is
// another operation).
Fingerprint ComputeFingerprint(const Request& request,
                               const std::vector<std::string>& fingerprint_headers,
                               std::string_view route_host = {});

// F4: the first 16 hex digits.
std::string FingerprintPrefix(const Fingerprint& fingerprint);

}  // namespace idemgate

// The settings signature: what decides which record a request maps to and whether a retry
// matches it (the key header, the fingerprint headers, the scope header and the scope secret's
// identity). The store keeps the signature it was written with; a start with other settings is
// refused unless the operator accepts the change (--accept-new-signature), so a change never
// silently turns retries of live records into second executions or 422s.
#pragma once

#include <string>

#include "conf/config.h"
#include "store/store.h"

namespace idemgate {

// "name=value" lines, one per setting. The scope secret appears only as an HMAC under the secret
// of a fixed string ("none" without a secret): it identifies the secret without revealing it.
std::string SettingsSignature(const Config& config);

// The settings whose values differ between two signatures, e.g. "idempotency.header (stored
// \"idempotency-key\", now \"x-request-key\")"; empty when they match.
std::vector<std::string> SignatureDifferences(const std::string& stored, const std::string& now);

// At start-up, before any worker runs: the first start stores the signature; a later one
// compares. On a mismatch, returns false with *error naming the changed settings, unless
// `accept_new` (then the new signature is stored and *note says what was accepted).
bool CheckStoreSignature(Store* store, const Config& config, bool accept_new, std::string* error,
                         std::string* note);

}  // namespace idemgate

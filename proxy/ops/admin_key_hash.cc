// SPDX-License-Identifier: Apache-2.0
// The key_hash lookup of the admin record API.
#include "proxy/ops/admin_key_hash.h"

#include <vector>

#include "common/hex.h"
#include "proxy/policy/errors.h"

namespace idemgate {
namespace {

constexpr size_t kMaxMatches = 16;  // SHA-256 prefixes of 64 bits: more than one is very rare

bool IsKeyHash(std::string_view text) {
  if (text.size() != 16) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

AdminAnswer Error(int code, const char* reason, const char* error, const std::string& detail) {
  return {code, reason,
          std::string("{\"error\":\"") + error + "\",\"detail\":\"" + JsonEscape(detail) + "\"}"};
}

}  // namespace

AdminAnswer KeyHashLookup(Store* store, std::string_view key_hash, RecordJsonFn record_json) {
  if (!IsKeyHash(key_hash)) {
    return Error(400, "Bad Request", "bad_request",
                 "key_hash= must be the 16 lower-case hex digits of an access-log line's "
                 "key_hash.");
  }
  std::vector<KeyHashMatch> matches;
  StoreStatus status = store->FindByKeyHash(key_hash, kMaxMatches, &matches);
  if (!status.ok()) {
    return Error(503, "Service Unavailable", "store_unavailable",
                 "The lookup by key_hash failed: " + status.message);
  }
  if (matches.empty()) {
    return Error(404, "Not Found", "not_found",
                 "No live record has key_hash " + std::string(key_hash) + ".");
  }
  std::string body = "{\"key_hash\":\"" + std::string(key_hash) + "\",\"records\":[";
  for (size_t i = 0; i < matches.size(); ++i) {
    const KeyHashMatch& m = matches[i];
    body += (i == 0 ? "{" : ",{");
    body += "\"scope\":\"" + LowerHex(m.scope.data(), 8) + "\",\"key\":\"" + JsonEscape(m.key) +
            "\",\"record\":" + record_json(m) + "}";
  }
  return {200, "OK", body + "]}"};
}

}  // namespace idemgate

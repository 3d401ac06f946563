// The record id and the fencing headers a guarded request carries upstream (SPEC §12 A1).
#include "proxy/policy/record_id.h"

#include <openssl/evp.h>

namespace idemgate {

std::string RecordIdHex(const ScopeId& scope, std::string_view key) {
  std::string input;
  input.reserve(kRecordIdDomain.size() + scope.size() + key.size());
  input.append(kRecordIdDomain);
  input.append(reinterpret_cast<const char*>(scope.data()), scope.size());
  input.append(key);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(32);
  for (int i = 0; i < 16; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0xF];
  }
  return out;
}

std::string FenceHeaderLines(const ScopeId& scope, std::string_view key, uint32_t attempt) {
  std::string out = "Idempotency-Attempt: " + std::to_string(attempt) + "\r\n";
  out += "Idempotency-Record: " + RecordIdHex(scope, key) + "\r\n";
  return out;
}

}  // namespace idemgate

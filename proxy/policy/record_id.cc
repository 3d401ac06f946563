// SPDX-License-Identifier: Apache-2.0
// The record id and the fencing headers a guarded request carries upstream (SPEC §12 A1).
#include "proxy/policy/record_id.h"

#include <openssl/evp.h>

#include "common/hex.h"
#include "proxy/policy/digest.h"

namespace idemgate {

std::string RecordIdHex(const ScopeId& scope, std::string_view key) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = ThreadDigestCtx();
  EVP_DigestInit_ex(ctx, Sha256(), nullptr);
  EVP_DigestUpdate(ctx, kRecordIdDomain.data(), kRecordIdDomain.size());
  EVP_DigestUpdate(ctx, scope.data(), scope.size());
  EVP_DigestUpdate(ctx, key.data(), key.size());
  EVP_DigestFinal_ex(ctx, md, &len);
  return LowerHex(md, 16);
}

std::string FenceHeaderLines(const ScopeId& scope, std::string_view key, uint32_t attempt) {
  std::string out = "Idempotency-Attempt: ";
  out.reserve(96);
  out += std::to_string(attempt);
  out += "\r\nIdempotency-Record: ";
  out += RecordIdHex(scope, key);
  out += "\r\n";
  return out;
}

}  // namespace idemgate

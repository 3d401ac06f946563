// SPDX-License-Identifier: Apache-2.0
// SHA-256 helpers (see digest.h).
#include "proxy/policy/digest.h"

#include <memory>

#include "common/hex.h"

namespace idemgate {

const EVP_MD* Sha256() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

EVP_MD_CTX* ThreadDigestCtx() {
  thread_local std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                           &EVP_MD_CTX_free);
  return ctx.get();
}

std::string Sha256Digest(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = ThreadDigestCtx();
  EVP_DigestInit_ex(ctx, Sha256(), nullptr);
  EVP_DigestUpdate(ctx, text.data(), text.size());
  EVP_DigestFinal_ex(ctx, md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

std::string KeyHash(const ScopeId& scope, std::string_view key) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = ThreadDigestCtx();
  EVP_DigestInit_ex(ctx, Sha256(), nullptr);
  EVP_DigestUpdate(ctx, scope.data(), scope.size());
  EVP_DigestUpdate(ctx, key.data(), key.size());
  EVP_DigestFinal_ex(ctx, md, &len);
  return LowerHex(md, 8);
}

}  // namespace idemgate

// SHA-256 helpers (see digest.h).
#include "proxy/policy/digest.h"

#include <memory>

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
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 0; i < 8; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

}  // namespace idemgate

// SHA-256 as the policy uses it, in one place: the implementation fetched once per process, one
// digest context per thread, and the key hash that names a record in logs and admin answers
// without showing its key.
#pragma once

#include <openssl/evp.h>

#include <string>
#include <string_view>

#include "store/record.h"

namespace idemgate {

// EVP_sha256() looks the provider's implementation up again on every call (measured at ~4% of a
// replay): this one is fetched once.
const EVP_MD* Sha256();
// One digest context per thread, reset by each EVP_DigestInit_ex: creating and freeing one per
// hash cost more than hashing a request's few hundred bytes.
EVP_MD_CTX* ThreadDigestCtx();
// The 32-byte SHA-256 of `text`.
std::string Sha256Digest(std::string_view text);
// The first 16 hex digits of SHA-256(scope id || key): a record's name in the access log, the
// admin's delete lines and its 404 answers.
std::string KeyHash(const ScopeId& scope, std::string_view key);

}  // namespace idemgate

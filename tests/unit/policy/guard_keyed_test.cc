// SPDX-License-Identifier: Apache-2.0
// SPEC §13 E3: with encryption on the guard keys the fingerprint (HMAC-SHA-256 under a key
// derived from scope.secret) and keeps the plain one beside it for records stored before.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <string>

#include "proxy/policy/guard.h"

namespace idemgate {
namespace {

Request Post(std::string body) {
  Request r;
  r.method = "POST";
  r.target = "/v1/payment_intents";
  r.headers = {{"Authorization", "Bearer merchant-a"}, {"Idempotency-Key", "order-1"}};
  r.body = std::move(body);
  return r;
}

Config Encrypted(std::string secret) {
  Config config;
  config.scope.secret = std::move(secret);
  config.store.encryption.enabled = true;
  return config;
}

// HMAC-SHA-256(HMAC-SHA-256(secret, label), plain), computed here with OpenSSL's one-shot HMAC.
Fingerprint Expected(const std::string& secret, const Fingerprint& plain) {
  unsigned char key[32], out[32];
  unsigned int len = 0;
  const std::string label = "idemgate fingerprint key v1";
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(label.data()), label.size(), key, &len);
  HMAC(EVP_sha256(), key, sizeof(key), plain.data(), plain.size(), out, &len);
  Fingerprint f;
  std::copy(out, out + 32, f.begin());
  return f;
}

GuardDecision Keyed(const Config& config, const Request& r) {
  GuardDecision d = EvaluateGuard(config, r);
  KeyFingerprint(config, &d);
  return d;
}

TEST(GuardKeyed, EncryptionKeysTheFingerprintAndKeepsThePlainOne) {
  const Request r = Post("{\"card\":\"4929381373652047\"}");
  const Fingerprint plain = ComputeFingerprint(r, {});
  const Config clear;
  GuardDecision off = EvaluateGuard(clear, r);
  EXPECT_EQ(off.fingerprint, plain);
  EXPECT_FALSE(off.legacy_fingerprint);

  GuardDecision on = EvaluateGuard(Encrypted("secret-one"), r);
  ASSERT_EQ(on.kind, GuardKind::kGuarded);
  // The HMAC waits until something compares with or stores the fingerprint.
  EXPECT_TRUE(on.keyed_pending);
  EXPECT_EQ(on.fingerprint, plain);
  KeyFingerprint(Encrypted("secret-one"), &on);
  EXPECT_FALSE(on.keyed_pending);
  EXPECT_EQ(on.fingerprint, Expected("secret-one", plain));
  ASSERT_TRUE(on.legacy_fingerprint);
  EXPECT_EQ(*on.legacy_fingerprint, plain);
  EXPECT_EQ(Keyed(Encrypted("secret-one"), r).fingerprint, on.fingerprint);
  // Another secret (the per-thread key is derived again), another body: other fingerprints.
  EXPECT_EQ(Keyed(Encrypted("secret-two"), r).fingerprint, Expected("secret-two", plain));
  EXPECT_NE(Keyed(Encrypted("secret-one"), Post("{}")).fingerprint, on.fingerprint);
  // Without encryption nothing is pending and KeyFingerprint changes nothing.
  KeyFingerprint(clear, &off);
  EXPECT_EQ(off.fingerprint, plain);
  // A stored fingerprint is compared in the kind it was written in.
  EXPECT_EQ(FingerprintAsStored(on, plain), plain);
  EXPECT_EQ(FingerprintAsStored(on, on.fingerprint), on.fingerprint);
  EXPECT_EQ(FingerprintAsStored(on, Fingerprint{}), on.fingerprint);
}

}  // namespace
}  // namespace idemgate

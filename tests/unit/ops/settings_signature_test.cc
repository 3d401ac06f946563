// The settings signature: what it covers, what it ignores, and that it never holds the secret.
#include <gtest/gtest.h>

#include "proxy/ops/store_signature.h"

namespace idemgate {
namespace {

TEST(SettingsSignature, NamesEachChangedSettingAndIgnoresTheRest) {
  Config a;
  a.scope.secret = "the-scope-secret";
  Config b = a;
  b.idempotency.header = "IDEMPOTENCY-KEY";  // header names are case-insensitive
  b.scope.secret_file = "/elsewhere";        // the same bytes under another path
  b.idempotency.ttl_ms *= 2;                 // not a key setting
  b.idempotency.methods = {"POST"};
  EXPECT_TRUE(SignatureDifferences(SettingsSignature(a), SettingsSignature(b)).empty());

  b.idempotency.fingerprint_headers = {"x-b", "x-a"};
  b.scope.secret = "another-secret";
  b.scope.header = "X-Api-Key";
  EXPECT_EQ(SignatureDifferences(SettingsSignature(a), SettingsSignature(b)),
            (std::vector<std::string>{
                "idempotency.fingerprint_headers (stored \"\", now \"x-b,x-a\")",
                "scope.header (stored \"authorization\", now \"x-api-key\")",
                "scope.secret_file (the secret's contents changed)"}));
  // The order of the fingerprint headers is part of the fingerprint.
  Config c = b;
  c.idempotency.fingerprint_headers = {"x-a", "x-b"};
  EXPECT_EQ(SignatureDifferences(SettingsSignature(b), SettingsSignature(c)).size(), 1u);
}

TEST(SettingsSignature, HoldsAnIdentityOfTheSecretNeverTheSecret) {
  Config config;
  EXPECT_NE(SettingsSignature(config).find("scope.secret_file=none\n"), std::string::npos);
  config.scope.secret = "the-scope-secret";
  const std::string signature = SettingsSignature(config);
  EXPECT_EQ(signature.find("the-scope-secret"), std::string::npos) << signature;
  EXPECT_NE(signature.find("scope.secret_file=hmac:"), std::string::npos) << signature;
}

// A stored signature from a version with fewer (or other) settings names the difference.
TEST(SettingsSignature, AMissingLineIsADifference) {
  EXPECT_EQ(SignatureDifferences("a=1\n", "a=1\nb=2\n"),
            (std::vector<std::string>{"b (stored \"(absent)\", now \"2\")"}));
  EXPECT_EQ(SignatureDifferences("a=1\nb=2\n", "a=1\n"),
            (std::vector<std::string>{"b (stored \"2\", now \"(absent)\")"}));
}

}  // namespace
}  // namespace idemgate

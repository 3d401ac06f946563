// SPDX-License-Identifier: Apache-2.0
// Guard: which requests are guarded, check order, key syntax, scope and fingerprint (SPEC §1-§4).
#include "proxy/policy/guard.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <string>
#include <vector>

namespace idemgate {
namespace {

Request Post(Headers headers, std::string body = "{\"amount\":1}") {
  Request r;
  r.method = "POST";
  r.target = "/v1/payment_intents";
  r.headers = std::move(headers);
  r.body = std::move(body);
  return r;
}

Headers Auth(std::string key) {
  return {{"Authorization", "Bearer merchant-a"}, {"Idempotency-Key", std::move(key)}};
}

TEST(Guard, GetWithKeyPassesThrough) {
  Config config;
  Request r = Post(Auth("order-1001"));
  r.method = "GET";
  EXPECT_EQ(EvaluateGuard(config, r).kind, GuardKind::kPassthrough);
}

TEST(Guard, KeylessPostPassesThrough) {
  Config config;
  EXPECT_EQ(EvaluateGuard(config, Post({{"Authorization", "Bearer a"}})).kind,
            GuardKind::kPassthrough);
}

TEST(Guard, RequireKeyPathWithoutKeyIsMissing) {
  Config config;
  config.idempotency.require_key = {"/v1/payment"};
  GuardDecision d = EvaluateGuard(config, Post({{"Authorization", "Bearer a"}}));
  EXPECT_EQ(d.kind, GuardKind::kReject);
  EXPECT_EQ(d.error, ErrorCode::kIdempotencyKeyMissing);
  Request other = Post({{"Authorization", "Bearer a"}});
  other.target = "/v2/refunds?x=/v1/payment";
  EXPECT_EQ(EvaluateGuard(config, other).kind, GuardKind::kPassthrough);
}

TEST(Guard, NormalizeRequestPath) {
  struct Case {
    const char* target;
    const char* unreserved;  // decode_all = false
    const char* all;         // decode_all = true
  };
  for (const Case& c : std::vector<Case>{
           {"/v1/pay?x=/v2", "/v1/pay", "/v1/pay"},
           {"http://api.example/v1/pay", "/v1/pay", "/v1/pay"},
           {"HTTPS://user@api.example:8443//V1/Pay?q", "/v1/pay", "/v1/pay"},
           {"http://api.example", "/", "/"},
           {"http://api.example?x", "/", "/"},
           {"//v1/pay", "/v1/pay", "/v1/pay"},
           {"/V1/PAY/", "/v1/pay/", "/v1/pay/"},
           {"/./v1/x/../pay", "/v1/pay", "/v1/pay"},
           {"/../../v1/pay", "/v1/pay", "/v1/pay"},
           {"/v1/pay/..", "/v1/", "/v1/"},
           {"/v1/%70%41y", "/v1/pay", "/v1/pay"},
           {"/v1%2Fpay", "/v1%2fpay", "/v1/pay"},
           {"/v1/x/%2e%2e/pay", "/v1/pay", "/v1/pay"},
           {"/v1/pay%2F..%2Fother", "/v1/pay%2f..%2fother", "/v1/other"},
           {"/v1/100%", "/v1/100%", "/v1/100%"},
           {"/a/http://b/v1/pay", "/a/http:/b/v1/pay", "/a/http:/b/v1/pay"},
           {"*", "/*", "/*"},
           {"", "/", "/"},
       }) {
    EXPECT_EQ(NormalizeRequestPath(c.target, false), c.unreserved) << c.target;
    EXPECT_EQ(NormalizeRequestPath(c.target, true), c.all) << c.target;
  }
}

// Before the fix, require_key was matched on the target as sent, so the absolute form, a
// doubled slash or another case went through without a key. The target itself is forwarded and
// fingerprinted exactly as sent.
TEST(Guard, RequireKeyMatchesTheNormalizedPath) {
  Config config;
  config.idempotency.require_key = {"/v1/pay"};
  for (const char* target :
       {"/v1/pay", "http://x/v1/pay", "HTTP://X//v1/pay?a=b", "//v1/pay", "/V1/pay", "/v1/PAYments",
        "/v1//pay", "/./v1/pay", "/v2/../v1/pay", "/v1/%70ay", "/v1%2Fpay", "/v1/pay%2F..%2Fx",
        "/v1/pay/../refunds",  // as sent: an upstream may not resolve ".."
        "/v1/pa%2579",         // decoded twice, by a backend that decodes again
        "/v1/x/%252e%252e/pay", "/v1/x/..%5Cpay", "/v1/x\\..\\pay", "/v1/x/..;/pay",
        "/v1/pay;a=b", "/v1/x/..;a/pay"}) {
    Request r = Post({{"Authorization", "Bearer a"}});
    r.target = target;
    GuardDecision d = EvaluateGuard(config, r);
    EXPECT_EQ(d.kind, GuardKind::kReject) << target;
    EXPECT_EQ(d.error, ErrorCode::kIdempotencyKeyMissing) << target;
  }
  for (const char* target : {"/v1/refunds", "/v1/pa", "/x/v1/pay", "/v1/p%61", "/v1/pa%25",
                             "http://x/v2/refunds?p=/v1/pay"}) {
    Request r = Post({{"Authorization", "Bearer a"}});
    r.target = target;
    EXPECT_EQ(EvaluateGuard(config, r).kind, GuardKind::kPassthrough) << target;
  }
  // A prefix written in another case or with a trailing slash is normalized the same way.
  config.idempotency.require_key = {"/V1/Pay/"};
  Request r = Post(Auth("k1"));
  r.target = "http://x//v1/pay/intent";
  GuardDecision d = EvaluateGuard(config, r);
  ASSERT_EQ(d.kind, GuardKind::kGuarded);
  EXPECT_EQ(d.fingerprint, ComputeFingerprint(r, {}));  // the target as sent
  Request other = r;
  other.target = "/v1/pay/intent";
  EXPECT_NE(EvaluateGuard(config, other).fingerprint, d.fingerprint);
}

// A client listing Host, the key header or the credential header in Connection
// would have the gateway strip it from what goes upstream (G3). Refused, guarded or not.
TEST(Guard, ConnectionListingAProtectedHeaderIs400) {
  Config config;
  config.scope.header = "X-Api-Key";
  for (const char* listed : {"host", "Idempotency-Key", "x-api-key"}) {
    for (const char* method : {"POST", "GET"}) {
      Request r = Post({{"X-Api-Key", "k"},
                        {"Idempotency-Key", "order-1"},
                        {"Connection", std::string("keep-alive, ") + listed}});
      r.method = method;
      GuardDecision d = EvaluateGuard(config, r);
      EXPECT_EQ(d.kind, GuardKind::kReject) << listed << " " << method;
      EXPECT_EQ(d.error, ErrorCode::kBadRequest) << listed;
      EXPECT_NE(d.detail.find("Connection"), std::string::npos) << d.detail;
    }
  }
  // Other names in Connection are fine; Authorization is no credential under this config.
  Request r = Post({{"X-Api-Key", "k"},
                    {"Idempotency-Key", "order-1"},
                    {"Connection", "keep-alive, X-Trace, Authorization"}});
  EXPECT_EQ(EvaluateGuard(config, r).kind, GuardKind::kGuarded);
}

TEST(Guard, GuardedRequestCarriesScopeKeyAndFingerprint) {
  Config config;
  Request r = Post(Auth("\"order-1001\""));
  GuardDecision d = EvaluateGuard(config, r);
  ASSERT_EQ(d.kind, GuardKind::kGuarded);
  EXPECT_EQ(d.key, "order-1001");
  EXPECT_EQ(d.scope, ComputeScopeId("Authorization", "Bearer merchant-a", ""));
  EXPECT_EQ(d.fingerprint, ComputeFingerprint(r, {}));
}

TEST(Guard, CredentialIsCheckedBeforeTheKey) {
  Config config;
  GuardDecision d = EvaluateGuard(config, Post({{"Idempotency-Key", "bad key with spaces"}}));
  EXPECT_EQ(d.kind, GuardKind::kReject);
  EXPECT_EQ(d.error, ErrorCode::kMissingCredentials);
  config.idempotency.require_key = {"/"};
  EXPECT_EQ(EvaluateGuard(config, Post({})).error, ErrorCode::kMissingCredentials);
}

TEST(Guard, EmptyCredentialCountsAsMissing) {
  Config config;
  for (const char* value : {"", "Bearer", "bearer  "}) {
    GuardDecision d =
        EvaluateGuard(config, Post({{"Authorization", value}, {"Idempotency-Key", "k"}}));
    EXPECT_EQ(d.error, ErrorCode::kMissingCredentials) << "[" << value << "]";
  }
}

TEST(Guard, DuplicateCredentialIsBadRequest) {
  Config config;
  GuardDecision d = EvaluateGuard(config, Post({{"Authorization", "Bearer a"},
                                                {"authorization", "Bearer b"},
                                                {"Idempotency-Key", "k"}}));
  EXPECT_EQ(d.kind, GuardKind::kReject);
  EXPECT_EQ(d.error, ErrorCode::kBadRequest);
}

TEST(Guard, KeyGivenTwiceIsInvalid) {
  Config config;
  Headers h = Auth("k1");
  h.push_back({"idempotency-key", "k1"});
  EXPECT_EQ(EvaluateGuard(config, Post(h)).error, ErrorCode::kIdempotencyKeyInvalid);
}

TEST(Guard, KeySyntaxTable) {
  struct Case {
    std::string raw;
    bool ok;
    std::string key;
  };
  const Case cases[] = {
      {"order-1001", true, "order-1001"},
      {"\"order-1001\"", true, "order-1001"},
      {"\"a\\\"b\\\\c\"", true, "a\"b\\c"},
      {"  spaced-ows  ", true, "spaced-ows"},
      {std::string(255, 'k'), true, std::string(255, 'k')},
      {"", false, ""},
      {"\"\"", false, ""},
      {std::string(256, 'k'), false, ""},
      {"ab\x01" "c", false, ""},
      {"ab\x7f", false, ""},
      {"caf\xc3\xa9", false, ""},
      {"two words", false, ""},
      {"\"two words\"", false, ""},  // unquoted result must be visible ASCII too
      {"\"abc", false, ""},
      {"\"", false, ""},
      {"\"a\"b\"", false, ""},
      {"\"a\\nb\"", false, ""},  // only \" and \\ are escapes
      {"\"abc\\\"", false, ""},
  };
  for (const Case& c : cases) {
    std::string key;
    EXPECT_EQ(ParseIdempotencyKey(c.raw, &key), c.ok) << "[" << c.raw << "]";
    if (c.ok) {
      EXPECT_EQ(key, c.key) << "[" << c.raw << "]";
    }
    Config config;
    GuardDecision d = EvaluateGuard(config, Post(Auth(c.raw)));
    EXPECT_EQ(d.kind, c.ok ? GuardKind::kGuarded : GuardKind::kReject) << "[" << c.raw << "]";
    if (!c.ok) {
      EXPECT_EQ(d.error, ErrorCode::kIdempotencyKeyInvalid) << "[" << c.raw << "]";
    }
  }
}

TEST(Guard, ScopeSchemeCaseInsensitiveCredentialExact) {
  EXPECT_EQ(ComputeScopeId("Authorization", "Bearer x", ""),
            ComputeScopeId("Authorization", "bearer x", ""));
  EXPECT_EQ(ComputeScopeId("Authorization", "Bearer x", ""),
            ComputeScopeId("authorization", "BEARER   x ", ""));
  EXPECT_NE(ComputeScopeId("Authorization", "Bearer x", ""),
            ComputeScopeId("Authorization", "Bearer X", ""));
  EXPECT_NE(ComputeScopeId("Authorization", "Bearer x", ""),
            ComputeScopeId("Authorization", "Basic x", ""));
}

TEST(Guard, SecretChangesTheScope) {
  EXPECT_NE(ComputeScopeId("Authorization", "Bearer x", ""),
            ComputeScopeId("Authorization", "Bearer x", "s3cret"));
  EXPECT_NE(ComputeScopeId("Authorization", "Bearer x", "s3cret"),
            ComputeScopeId("Authorization", "Bearer x", "other"));
}

// The per-thread memo of scopes (guard.cc) must give what hashing gives, whatever came before:
// every credential, header and secret in turn, more of them than the memo holds, twice over.
TEST(Guard, ScopeIsTheSameWithOrWithoutTheMemo) {
  auto direct = [](const std::string& header, const std::string& cred, const std::string& secret) {
    std::string input = header == "Authorization" ? "authorization" : "x-api-key";
    input.push_back('\0');
    input += cred;
    unsigned char sha[32];
    unsigned int len = 0;
    size_t mac_len = 0;
    const auto* in = reinterpret_cast<const unsigned char*>(input.data());
    if (secret.empty()) {
      EXPECT_EQ(EVP_Digest(in, input.size(), sha, &len, EVP_sha256(), nullptr), 1);
    } else {
      EXPECT_NE(EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(),
                          secret.size(), in, input.size(), sha, sizeof(sha), &mac_len),
                nullptr);
    }
    return std::string(reinterpret_cast<char*>(sha), 32);
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 20; ++i) {
      for (const std::string secret : {"", "s1", "s2"}) {
        for (const std::string header : {"Authorization", "X-Api-Key"}) {
          const std::string n = std::to_string(i % 11);
          const bool auth = header == "Authorization";
          ScopeId got = ComputeScopeId(header, auth ? "Bearer k" + n : "k" + n, secret);
          const std::string want = direct(header, auth ? "bearer k" + n : "k" + n, secret);
          EXPECT_EQ(std::string(reinterpret_cast<char*>(got.data()), 32), want)
              << header << " k" << n << " secret=" << secret;
        }
      }
    }
  }
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 15];
  }
  return out;
}

TEST(Guard, ScopeKnownVectors) {
  // Input: lower-case header name, NUL, "bearer" + " " + credential.
  const std::string input("authorization\0bearer x", 22);
  unsigned char sha[32];
  unsigned int len = 0;
  ASSERT_EQ(EVP_Digest(input.data(), input.size(), sha, &len, EVP_sha256(), nullptr), 1);
  ScopeId plain = ComputeScopeId("Authorization", "Bearer x", "");
  EXPECT_EQ(Hex(plain.data(), 32), Hex(sha, 32));

  unsigned char mac[32];
  size_t mac_len = 0;
  ASSERT_NE(EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, "k", 1,
                      reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac,
                      sizeof(mac), &mac_len),
            nullptr);
  ScopeId keyed = ComputeScopeId("Authorization", "Bearer x", "k");
  EXPECT_EQ(Hex(keyed.data(), 32), Hex(mac, 32));
}

TEST(Guard, CustomScopeHeaderUsesTheWholeValue) {
  Config config;
  config.scope.header = "X-Api-Key";
  Headers h = {{"X-Api-Key", "Bearer x"}, {"Idempotency-Key", "k"}};
  GuardDecision d = EvaluateGuard(config, Post(h));
  ASSERT_EQ(d.kind, GuardKind::kGuarded);
  EXPECT_EQ(d.scope, ComputeScopeId("X-Api-Key", "Bearer x", ""));
  EXPECT_NE(d.scope, ComputeScopeId("X-Api-Key", "bearer x", ""));  // whole value, exact
  EXPECT_NE(d.scope, ComputeScopeId("Authorization", "Bearer x", ""));  // domain separation
  // Authorization alone does not satisfy a custom scope header.
  EXPECT_EQ(EvaluateGuard(config, Post(Auth("k"))).error, ErrorCode::kMissingCredentials);
}

TEST(Guard, FingerprintChangesWithEachPart) {
  Request base = Post({{"X-Account", "acct_1"}});
  Fingerprint fp = ComputeFingerprint(base, {"x-account"});
  Request method = base;
  method.method = "PATCH";
  Request target = base;
  target.target = "/v1/payment_intents?x=1";
  Request body = base;
  body.body = "{\"amount\":2}";
  Request header = base;
  header.headers[0].value = "acct_2";
  Request other_header = base;
  other_header.headers.push_back({"X-Other", "1"});
  EXPECT_NE(ComputeFingerprint(method, {"x-account"}), fp);
  EXPECT_NE(ComputeFingerprint(target, {"x-account"}), fp);
  EXPECT_NE(ComputeFingerprint(body, {"x-account"}), fp);
  EXPECT_NE(ComputeFingerprint(header, {"x-account"}), fp);
  EXPECT_EQ(ComputeFingerprint(other_header, {"x-account"}), fp);  // F3: unlisted headers ignored
  EXPECT_NE(ComputeFingerprint(base, {}), fp);
  // Shifting bytes between parts does not collide.
  Request a = base, b = base;
  a.target = "/ab";
  a.body = "c";
  b.target = "/a";
  b.body = "bc";
  EXPECT_NE(ComputeFingerprint(a, {}), ComputeFingerprint(b, {}));
}

void PutPart(std::string* out, std::string_view part) {
  uint64_t n = part.size();
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>((n >> shift) & 0xFF));
  out->append(part);
}

TEST(Guard, FingerprintKnownVector) {
  Request r = Post({{"X-Account", "a1"}, {"x-account", "a2"}}, "{\"amount\":\"100000000\"}");
  std::string encoded;
  PutPart(&encoded, "POST");
  PutPart(&encoded, "/v1/payment_intents");
  PutPart(&encoded, "{\"amount\":\"100000000\"}");
  PutPart(&encoded, "x-account");  // twice: the marker, the count, then each value
  encoded.append(8, '\xff');
  encoded.append(7, '\0');
  encoded.push_back('\2');
  PutPart(&encoded, "a1");
  PutPart(&encoded, "a2");
  PutPart(&encoded, "x-absent");  // absent: the empty value
  PutPart(&encoded, "");
  unsigned char sha[32];
  unsigned int len = 0;
  ASSERT_EQ(EVP_Digest(encoded.data(), encoded.size(), sha, &len, EVP_sha256(), nullptr), 1);
  Fingerprint fp = ComputeFingerprint(r, {"x-account", "x-absent"});
  EXPECT_EQ(Hex(fp.data(), 32), Hex(sha, 32));
  EXPECT_EQ(FingerprintPrefix(fp), Hex(sha, 8));
  EXPECT_EQ(FingerprintPrefix(fp).size(), 16u);
}

// Golden values computed by the gateway before fingerprint_headers counted occurrences (commit
// f78abf9): a record stored then must keep matching its exact retry. Without
// fingerprint_headers, and with a listed header sent once (or absent), nothing changed.
TEST(Guard, FingerprintGoldenValuesUnchanged) {
  Request r = Post({{"Authorization", "Bearer a"}, {"X-Account", "acct_1"}}, "{\"amount\":1000}");
  r.target = "/v1/payment_intents?customer=cus_1";
  Fingerprint plain = ComputeFingerprint(r, {});
  EXPECT_EQ(Hex(plain.data(), 32),
            "5d1060425f1fc23873af9bf602c34130cf0f8feb85752d505433bdb51b7cae7c");
  Fingerprint listed = ComputeFingerprint(r, {"X-Account", "x-absent"});
  EXPECT_EQ(Hex(listed.data(), 32),
            "33d32456d8e1fca203dc6e6248e4e80f06e94461d4121efa2635c68e44bf9466");
}

// Each occurrence of a fingerprint header counts, and absent differs from empty.
TEST(Guard, FingerprintHeaderOccurrencesAreDistinct) {
  const std::vector<std::string> listed = {"x-account"};
  auto fp = [&](Headers h) { return ComputeFingerprint(Post(std::move(h)), listed); };
  Fingerprint two_lines = fp({{"X-Account", "a"}, {"X-Account", "b"}});
  EXPECT_NE(two_lines, fp({{"X-Account", "a, b"}}));
  EXPECT_NE(two_lines, fp({{"X-Account", "b"}, {"X-Account", "a"}}));  // order counts
  EXPECT_NE(two_lines, fp({{"X-Account", "a"}}));
  EXPECT_EQ(two_lines, fp({{"x-account", "a"}, {"X-Other", "z"}, {"X-ACCOUNT", "b"}}));
  Fingerprint absent = fp({});
  Fingerprint empty = fp({{"X-Account", ""}});
  EXPECT_NE(absent, empty);
  EXPECT_NE(empty, fp({{"X-Account", ""}, {"X-Account", ""}}));
  EXPECT_NE(absent, fp({{"X-Account", ""}, {"X-Account", ""}}));
  // A value that spells the marker's bytes cannot stand for two occurrences.
  std::string forged(8, '\xff');
  forged.append(7, '\0');
  forged.push_back('\2');
  std::string one = std::string(7, '\0') + "\1";
  EXPECT_NE(two_lines, fp({{"X-Account", forged + one + "a" + one + "b"}}));
}

TEST(Guard, FingerprintHeadersComeFromConfig) {
  Config config;
  config.idempotency.fingerprint_headers = {"x-account"};
  Request r = Post(Auth("k"));
  r.headers.push_back({"X-Account", "acct_9"});
  GuardDecision d = EvaluateGuard(config, r);
  ASSERT_EQ(d.kind, GuardKind::kGuarded);
  EXPECT_EQ(d.fingerprint, ComputeFingerprint(r, {"x-account"}));
  EXPECT_NE(d.fingerprint, ComputeFingerprint(r, {}));
}

}  // namespace
}  // namespace idemgate

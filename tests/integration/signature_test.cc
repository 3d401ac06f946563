// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the store keeps the key settings it was written with
// (key header, fingerprint headers, scope header, scope secret identity); a start with other
// settings is refused with a message naming them, unless --accept-new-signature.
#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

class SignatureTest : public GatewayTest {
 protected:
  void Stop() {
    ASSERT_TRUE(gateway_.Kill(SIGTERM));
    ASSERT_TRUE(gateway_.Wait());
  }

  // Starts with the current config and expects a refusal; returns its output.
  std::string StartRefused(const std::vector<std::string>& extra = {}) {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
    std::vector<std::string> args = {"--config", path};
    args.insert(args.end(), extra.begin(), extra.end());
    GatewayProcess process;
    EXPECT_TRUE(process.Start(IDEMGATE_BIN, args)) << process.error();
    std::optional<ExitStatus> status = process.Wait();
    EXPECT_TRUE(status && status->exited() && status->code() == 1)
        << (status ? status->ToString() : "still running") << "\n"
        << process.log();
    return process.log();
  }

  void StartAccepting() {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
    ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path, "--accept-new-signature"}));
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
  }
};

TEST_F(SignatureTest, OtherFingerprintHeadersAreRefusedUnlessAccepted) {
  StartGateway();
  const std::string body = R"({"amount":"5"})";
  ASSERT_EQ(Post("s-1", body).status, 201);
  Stop();

  Set("idempotency", "fingerprint_headers", "[\"X-Account\"]");
  std::string refused = StartRefused();
  EXPECT_NE(refused.find("idempotency.fingerprint_headers (stored \"\", now \"x-account\")"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("--accept-new-signature"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("listening on"), std::string::npos) << refused;

  StartAccepting();
  EXPECT_TRUE(gateway_.WaitForOutput("accepted new key settings")) << gateway_.log();
  ASSERT_EQ(Post("s-2", body).status, 201);
  Stop();
  StartGateway();  // the new settings are the store's now: no flag needed
  EXPECT_EQ(Post("s-2", body).Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);
}

TEST_F(SignatureTest, KeyHeaderScopeHeaderAndSecretAreChecked) {
  const std::string secret_path = dir_.WriteFile("scope.secret", "first-secret-bytes");
  Set("scope", "secret_file", "\"" + secret_path + "\"");
  StartGateway();
  ASSERT_EQ(Post("s-3", "{}").status, 201);
  Stop();

  Set("idempotency", "header", "\"X-Request-Key\"");
  std::string header = StartRefused();
  EXPECT_NE(header.find("idempotency.header (stored \"idempotency-key\", now \"x-request-key\")"),
            std::string::npos)
      << header;
  Set("idempotency", "header", "\"idempotency-KEY\"");  // header names are case-insensitive
  StartGateway();
  Stop();

  Set("scope", "header", "\"X-Api-Key\"");
  EXPECT_NE(StartRefused().find("scope.header"), std::string::npos);
  Set("scope", "header", "\"Authorization\"");

  dir_.WriteFile("scope.secret", "second-secret-bytes");  // same path, new contents
  std::string secret = StartRefused();
  EXPECT_NE(secret.find("scope.secret_file (the secret's contents changed)"), std::string::npos)
      << secret;
  EXPECT_EQ(secret.find("secret-bytes"), std::string::npos) << "the secret leaked: " << secret;

  dir_.WriteFile("scope.secret", "first-secret-bytes");
  StartGateway();  // the original settings start without the flag
  EXPECT_EQ(Post("s-3", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

}  // namespace
}  // namespace idemgate::test

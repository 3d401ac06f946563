// SPDX-License-Identifier: Apache-2.0
// Through the real binary: SIGHUP reads an https upstream's CA file (upstream.ca_file) again.
// Gateway A (plain) -> gateway B (TLS listener, a certificate of CA one) -> FakeUpstream: with
// CA two in A's file every call is 502; the file rewritten with CA one and a SIGHUP, calls go
// through without a restart; a file that is not a CA bundle refuses the reload (logged,
// idemgate_config_last_reload_successful 0) and the running CA serves on.
#include <filesystem>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

class TlsUpstreamReloadTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_FALSE(FindProgram("openssl").empty());
    std::string error;
    auto one = MakeTestCa(dir_, "ca-one", &error);
    auto two = MakeTestCa(dir_, "ca-two", &error);
    ASSERT_TRUE(one && two) << error;
    one_ = *one;
    two_ = *two;
    auto server = MakeTestServerCert(dir_, "origin", one_, "localhost", "DNS:localhost", &error);
    ASSERT_TRUE(server) << error;
    const std::string config =
        "[listen]\naddress = \"127.0.0.1:0\"\ntls_cert = \"" + server->cert + "\"\ntls_key = \"" +
        server->key +
        "\"\n[upstream]\nurl = \"http://127.0.0.1:" + std::to_string(upstream_.port()) +
        "\"\n[store]\npath = \"" + origin_dir_.Path("data") +
        "\"\n[server]\nworkers = 1\n[log]\naccess = \"off\"\n[admin]\naddress = \"\"\n";
    ASSERT_TRUE(origin_.Start(IDEMGATE_BIN, {"--config", origin_dir_.WriteFile("o.toml", config)}));
    const uint16_t port = origin_.WaitForPort();
    ASSERT_NE(port, 0) << origin_.log();
    CaFile(two_.cert);
    Set("upstream", "url", "\"https://localhost:" + std::to_string(port) + "\"");
    Set("upstream", "ca_file", "\"upstream-ca.pem\"");
    Set("upstream", "connect_timeout", "\"2s\"");
  }
  void CaFile(const std::string& from) {
    std::filesystem::copy_file(from, dir_.Path("upstream-ca.pem.new"),
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(dir_.Path("upstream-ca.pem.new"), dir_.Path("upstream-ca.pem"));
  }
  HttpResponse Get() {
    TestClient client(port_);
    return client.Request("GET", "/v1/things", kMerchant);
  }
  // SIGHUP, then waits for one more log line containing `needle` than there was before.
  void Hangup(const std::string& needle) {
    const int before = Count(gateway_.log(), needle);
    ASSERT_TRUE(gateway_.Kill(SIGHUP));
    for (int i = 0; i < 1000 && Count(gateway_.log(), needle) == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(Count(gateway_.log(), needle), before) << gateway_.log();
  }
  static int Count(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      ++n;
    }
    return n;
  }

  CertFiles one_, two_;
  TempDir origin_dir_;
  GatewayProcess origin_;
};

TEST_F(TlsUpstreamReloadTest, ANewCaFileIsUsedAfterSighupAndABrokenOneIsRefused) {
  StartWithAdmin();
  HttpResponse before = Get();
  EXPECT_EQ(before.status, 502) << before.raw;
  EXPECT_EQ(upstream_.requests(), 0);

  CaFile(one_.cert);
  Hangup("upstream.ca_file reloaded");
  HttpResponse after = Get();
  EXPECT_EQ(after.status, 201) << after.raw << "\n" << gateway_.log();
  EXPECT_EQ(upstream_.requests(), 1);

  std::string garbage = dir_.WriteFile("garbage.pem", "not a certificate\n");
  CaFile(garbage);
  Hangup("reload failed, keeping the running config and certificates: upstream.ca_file");
  EXPECT_EQ(Metric("idemgate_config_last_reload_successful"), 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Get().status, 201);
  EXPECT_EQ(upstream_.requests(), 4);

  // Fixed again: the reload succeeds, and an unchanged file is not reported as reloaded.
  CaFile(one_.cert);
  Hangup("config reloaded from");
  EXPECT_EQ(Metric("idemgate_config_last_reload_successful"), 1);
  EXPECT_EQ(Count(gateway_.log(), "upstream.ca_file reloaded"), 1) << gateway_.log();
}

}  // namespace
}  // namespace idemgate::test

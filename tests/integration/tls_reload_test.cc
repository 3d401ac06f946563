// SPDX-License-Identifier: Apache-2.0
// Through the real binary: SIGHUP reads the listener's certificate and key again. A renewed pair
// is verified and then served to new handshakes (openssl s_client sees the new serial); a pair
// whose key does not match is refused, the running one kept, the reason logged and
// idemgate_config_last_reload_successful 0. The expiry of each certificate is a metric.
#include <filesystem>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class TlsReloadTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_FALSE(FindProgram("openssl").empty());
    std::string error;
    auto ca = MakeTestCa(dir_, "ca", &error);
    ASSERT_TRUE(ca) << error;
    auto one = MakeTestServerCert(dir_, "one", *ca, "localhost", "DNS:localhost", &error);
    auto two = MakeTestServerCert(dir_, "two", *ca, "localhost", "DNS:localhost", &error);
    ASSERT_TRUE(one && two) << error;
    ca_ = *ca;
    one_ = *one;
    two_ = *two;
    Install(one_.cert, one_.key);
    Set("listen", "tls_cert", "\"server.pem\"");
    Set("listen", "tls_key", "\"server.key\"");
  }

  // Copies a certificate and a key over the files the config names.
  void Install(const std::string& cert, const std::string& key) {
    namespace fs = std::filesystem;
    fs::copy_file(cert, dir_.Path("server.pem.new"), fs::copy_options::overwrite_existing);
    fs::copy_file(key, dir_.Path("server.key.new"), fs::copy_options::overwrite_existing);
    fs::rename(dir_.Path("server.pem.new"), dir_.Path("server.pem"));
    fs::rename(dir_.Path("server.key.new"), dir_.Path("server.key"));
  }

  // "serial=..." of a certificate file, as openssl prints it.
  std::string FileSerial(const std::string& pem) {
    ProgramResult r = RunProgram(FindProgram("openssl"), {"x509", "-noout", "-serial", "-in", pem});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }

  // The serial of the certificate the listener presents to a new handshake.
  std::string ServedSerial() {
    std::string cmd = "openssl s_client -connect 127.0.0.1:" + std::to_string(port_) +
                      " -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -serial";
    ProgramResult r = RunProgram("/bin/sh", {"-c", cmd});
    return r.output;
  }

  // SIGHUP, then waits for the `nth` log line containing `needle`.
  void Hangup(const std::string& needle, int nth) {
    ASSERT_TRUE(gateway_.Kill(SIGHUP));
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (CountOf(gateway_.log(), needle) < nth) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << gateway_.log();
      std::this_thread::sleep_for(10ms);
    }
  }

  static int CountOf(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      ++n;
    }
    return n;
  }

  CertFiles ca_, one_, two_;
};

TEST_F(TlsReloadTest, RenewedPairIsServedAndAMismatchedOneIsRefused) {
  StartWithAdmin();
  const std::string serial_one = FileSerial(one_.cert);
  const std::string serial_two = FileSerial(two_.cert);
  ASSERT_NE(serial_one, serial_two);
  ASSERT_EQ(ServedSerial(), serial_one);
  std::string hex_one = serial_one.substr(serial_one.find('=') + 1);
  hex_one.erase(hex_one.find_last_not_of("\n") + 1);
  EXPECT_NE(Scrape().find("idemgate_tls_certificate_expiry_timestamp_seconds{use=\"listener\""),
            std::string::npos);
  EXPECT_NE(Scrape().find("serial=\"" + hex_one + "\""), std::string::npos) << Scrape();

  // Renewed: the new pair serves new handshakes, and the log says what changed.
  Install(two_.cert, two_.key);
  Hangup("config reloaded from ", 1);
  EXPECT_EQ(ServedSerial(), serial_two);
  EXPECT_NE(gateway_.log().find("listen.tls_cert certificate replaced (serial "), std::string::npos)
      << gateway_.log();
  EXPECT_EQ(Metric("idemgate_config_last_reload_successful"), 1);
  EXPECT_EQ(Scrape().find("serial=\"" + hex_one + "\""), std::string::npos) << Scrape();

  // A certificate with another pair's key: refused, the running pair kept.
  Install(one_.cert, two_.key);
  Hangup("reload failed, keeping the running config and certificate", 1);
  EXPECT_NE(gateway_.log().find("does not match"), std::string::npos) << gateway_.log();
  EXPECT_EQ(ServedSerial(), serial_two);
  EXPECT_EQ(Metric("idemgate_config_last_reload_successful"), 0);

  // Put right again: the next reload succeeds.
  Install(one_.cert, one_.key);
  Hangup("config reloaded from ", 2);
  EXPECT_EQ(ServedSerial(), serial_one);
  EXPECT_EQ(Metric("idemgate_config_last_reload_successful"), 1);
}

// A reload that changes nothing says so; one that changes live keys names them.
TEST_F(TlsReloadTest, ReloadLineNamesWhatChanged) {
  StartGateway();
  Hangup("config reloaded from ", 1);
  EXPECT_NE(gateway_.log().find(": nothing changed"), std::string::npos) << gateway_.log();
  Set("idempotency", "ttl", "\"2h\"");
  Set("limits", "max_request_body", "\"64KiB\"");
  dir_.WriteFile("idemgate.toml", ConfigText());
  Hangup("config reloaded from ", 2);
  EXPECT_NE(gateway_.log().find(": changed idempotency.ttl, limits.max_request_body"),
            std::string::npos)
      << gateway_.log();
}

}  // namespace
}  // namespace idemgate::test

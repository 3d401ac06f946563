// SPDX-License-Identifier: Apache-2.0
// Through the real binary: several listener certificates chosen by SNI ([[listen.certificates]],
// listen.tls_cert first and the default), as openssl s_client -servername sees them; each pair
// read again on SIGHUP (a renewed one served, a broken one refusing the reload with every pair
// kept); an expiry series for each; a broken entry refused by --check-config.
#include <filesystem>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class TlsSniTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_FALSE(FindProgram("openssl").empty());
    std::string error;
    auto ca = MakeTestCa(dir_, "ca", &error);
    ASSERT_TRUE(ca) << error;
    ca_ = *ca;
    for (const auto& [name, san] :
         {std::pair{"api", "DNS:api.test"}, std::pair{"admin", "DNS:admin.test"},
          std::pair{"wild", "DNS:*.wild.test"}, std::pair{"admin2", "DNS:admin.test"}}) {
      auto files = MakeTestServerCert(dir_, name, ca_, name, san, &error);
      ASSERT_TRUE(files) << error;
      certs_[name] = *files;
    }
    Copy(certs_["admin"], "admin-live");
    Set("listen", "tls_cert", "\"" + certs_["api"].cert + "\"");
    Set("listen", "tls_key", "\"" + certs_["api"].key + "\"");
  }
  void Copy(const CertFiles& from, const std::string& to) {
    namespace fs = std::filesystem;
    fs::copy_file(from.cert, dir_.Path(to + ".pem.new"), fs::copy_options::overwrite_existing);
    fs::copy_file(from.key, dir_.Path(to + ".key.new"), fs::copy_options::overwrite_existing);
    fs::rename(dir_.Path(to + ".pem.new"), dir_.Path(to + ".pem"));
    fs::rename(dir_.Path(to + ".key.new"), dir_.Path(to + ".key"));
  }
  std::string Extra() const {
    return "[[listen.certificates]]\ncert = \"admin-live.pem\"\nkey = \"admin-live.key\"\n"
           "[[listen.certificates]]\ncert = \"" +
           certs_.at("wild").cert + "\"\nkey = \"" + certs_.at("wild").key + "\"\n";
  }
  void Start() {
    const std::string path = dir_.WriteFile("idemgate.toml", ConfigText() + Extra());
    ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path})) << gateway_.error();
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
    if (sections_["admin"]["address"] != "\"\"") {
      admin_port_ = gateway_.WaitForPort("admin listening on ");
    }
  }
  // The subject CN and serial of what a handshake with SNI `name` ("" = none) is served.
  std::string Served(const std::string& name) {
    const std::string sni = name.empty() ? "-noservername" : "-servername " + name;
    const std::string cmd = "openssl s_client -connect 127.0.0.1:" + std::to_string(port_) + " " +
                            sni + " </dev/null 2>/dev/null | openssl x509 -noout -subject -serial";
    return RunProgram("/bin/sh", {"-c", cmd}).output;
  }
  std::string FileId(const CertFiles& files) {
    return RunProgram(FindProgram("openssl"),
                      {"x509", "-noout", "-subject", "-serial", "-in", files.cert})
        .output;
  }
  void Hangup(const std::string& needle) {
    ASSERT_TRUE(gateway_.Kill(SIGHUP));
    ASSERT_TRUE(gateway_.WaitForOutput(needle)) << gateway_.log();
  }

  CertFiles ca_;
  std::map<std::string, CertFiles> certs_;
};

TEST_F(TlsSniTest, EachNameGetsItsCertificateAndTheFirstIsTheDefault) {
  Set("admin", "address", "\"127.0.0.1:0\"");
  Start();
  EXPECT_EQ(Served("api.test"), FileId(certs_["api"]));
  EXPECT_EQ(Served("admin.test"), FileId(certs_["admin"]));
  EXPECT_EQ(Served("x.wild.test"), FileId(certs_["wild"]));
  EXPECT_EQ(Served("other.test"), FileId(certs_["api"]));  // no certificate names it
  EXPECT_EQ(Served(""), FileId(certs_["api"]));            // no SNI
  // Requests are served on each.
  CurlResult r = RunCurl(
      dir_,
      {"--cacert", ca_.cert, "--resolve", "admin.test:" + std::to_string(port_) + ":127.0.0.1",
       "https://admin.test:" + std::to_string(port_) + "/v1/x", "-H", "Authorization: Bearer m"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.status, 201) << r.body;
  // One expiry series per certificate, labelled with its file.
  const std::string text = Scrape();
  for (const std::string& file :
       {certs_["api"].cert, dir_.Path("admin-live.pem"), certs_["wild"].cert}) {
    EXPECT_NE(
        text.find("idemgate_tls_certificate_expiry_timestamp_seconds{use=\"listener\",file=\"" +
                  file + "\""),
        std::string::npos)
        << file << "\n"
        << text;
  }
}

TEST_F(TlsSniTest, SighupReloadsEachPairAndABrokenOneKeepsThemAll) {
  Start();
  ASSERT_EQ(Served("admin.test"), FileId(certs_["admin"]));
  Copy(certs_["admin2"], "admin-live");
  Hangup("admin-live.pem: serial ");
  EXPECT_EQ(Served("admin.test"), FileId(certs_["admin2"]));
  EXPECT_EQ(Served("api.test"), FileId(certs_["api"]));
  // A key that does not match its certificate: the reload is refused, every pair serves on.
  std::filesystem::copy_file(certs_["api"].key, dir_.Path("admin-live.key"),
                             std::filesystem::copy_options::overwrite_existing);
  Hangup("reload failed, keeping the running config and certificate");
  EXPECT_NE(gateway_.log().find("does not match"), std::string::npos) << gateway_.log();
  EXPECT_EQ(Served("admin.test"), FileId(certs_["admin2"]));
  EXPECT_EQ(Served("x.wild.test"), FileId(certs_["wild"]));
}

TEST_F(TlsSniTest, CheckConfigRefusesABrokenEntry) {
  std::filesystem::copy_file(certs_["api"].key, dir_.Path("admin-live.key"),
                             std::filesystem::copy_options::overwrite_existing);
  const std::string path = dir_.WriteFile("idemgate.toml", ConfigText() + Extra() +
                                                               "[[listen.certificates]]\n"
                                                               "cert = \"missing.pem\"\n");
  RunResult r = RunGateway({"--check-config", "--config", path});
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("listen.certificates[3]"), std::string::npos) << r.output;
  // Fixed but with a key that does not match: the host checks name the entry.
  const std::string path2 = dir_.WriteFile("idemgate2.toml", ConfigText() + Extra());
  RunResult r2 = RunGateway({"--check-config", "--config", path2});
  EXPECT_NE(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("listen.certificates[1]"), std::string::npos) << r2.output;
  EXPECT_NE(r2.output.find("does not match"), std::string::npos) << r2.output;
}

}  // namespace
}  // namespace idemgate::test

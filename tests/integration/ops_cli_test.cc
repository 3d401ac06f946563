// SPDX-License-Identifier: Apache-2.0
// Through the real binary: --version names the build, --check-config catches what would fail at
// start on this host (proxy/preflight.cc), and a store that does not open says why.
#include <regex>
#include <sstream>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

TEST(OpsCli, VersionNamesCommitAndLibraries) {
  RunResult r = RunGateway({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(^idemgate \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,}|unknown)\)\n)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n  libevent 2\.\d+\.\d+)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n  OpenSSL 3\.\d+\.\d+)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n  RocksDB \d+\.\d+\.\d+\n)")))
      << r.output;
}

// A config that passes the parser; each test breaks one thing about the host.
class PreflightTest : public GatewayTest {
 protected:
  RunResult Check() {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
    return RunGateway({"--check-config", "--config", path});
  }
  RunResult Start() {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
    return RunGateway({"--config", path});
  }
  static void ExpectNames(const RunResult& r, const std::string& key, const std::string& what) {
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("idemgate.toml"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("'" + key + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(what), std::string::npos) << r.output;
  }
};

TEST_F(PreflightTest, GoodConfigPasses) {
  RunResult r = Check();
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("configuration OK"), std::string::npos) << r.output;
}

TEST_F(PreflightTest, UnresolvableUpstreamHost) {
  Set("upstream", "url", "\"http://no-such-host.invalid:9000\"");
  ExpectNames(Check(), "upstream.url", "'no-such-host.invalid' does not resolve");
  ExpectNames(Start(), "upstream.url", "'no-such-host.invalid' does not resolve");
}

TEST_F(PreflightTest, StoreDirectoryCannotBeCreated) {
  dir_.WriteFile("a-file", "x");
  Set("store", "path", "\"" + dir_.Path("a-file/data") + "\"");
  ExpectNames(Check(), "store.path", "is not a directory");
  ExpectNames(Start(), "store.path", "is not a directory");  // the same words at start
}

TEST_F(PreflightTest, AccessLogDirectoryMissing) {
  Set("log", "access", "\"" + dir_.Path("no-such-dir/access.log") + "\"");
  ExpectNames(Check(), "log.access", "does not exist");
}

TEST_F(PreflightTest, TlsKeyDoesNotMatchCertificate) {
  std::string error;
  auto ca = MakeTestCa(dir_, "ca", &error);
  ASSERT_TRUE(ca) << error;
  auto one = MakeTestServerCert(dir_, "one", *ca, "localhost", "DNS:localhost", &error);
  auto two = MakeTestServerCert(dir_, "two", *ca, "localhost", "DNS:localhost", &error);
  ASSERT_TRUE(one && two) << error;
  Set("listen", "tls_cert", "\"" + one->cert + "\"");
  Set("listen", "tls_key", "\"" + two->key + "\"");
  ExpectNames(Check(), "listen.tls_key", "does not match");
}

TEST_F(PreflightTest, StoreHeldByAnotherProcessIsNamed) {
  StartGateway();  // holds the store's lock
  RunResult second = Start();
  EXPECT_NE(second.code, 0);
  EXPECT_NE(second.output.find("key 'store.path'"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("another process has this store open"), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find(dir_.Path("data")), std::string::npos) << second.output;
  EXPECT_EQ(Post("held-1", "{}").status, 201);  // the first one still serves
}

// Every line the gateway writes to stderr is one event: "<RFC 3339> <LEVEL> <subsystem>: ...".
// (stdout carries only the "listening on" lines, the check-config verdict and the access log.)
TEST_F(PreflightTest, EveryStderrLineHasTimestampLevelAndSubsystem) {
  StartGateway();
  dir_.WriteFile("idemgate.toml", "[listen\n");  // a broken reload: an error line
  gateway_.Kill(SIGHUP);
  ASSERT_TRUE(gateway_.WaitForOutput("reload failed")) << gateway_.log();
  gateway_.Kill(SIGTERM);
  ASSERT_TRUE(gateway_.Wait());
  static const std::regex kLine(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARN|ERROR) [a-z_]+: .+)");
  std::istringstream lines(gateway_.log());
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("listening on ", 0) == 0 || line.rfind("admin listening on ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, kLine)) << line;
    ++checked;
  }
  EXPECT_GE(checked, 4);  // start-up, reload failed, shutting down, stopped
  EXPECT_NE(gateway_.log().find(" ERROR reload: reload failed"), std::string::npos)
      << gateway_.log();
}

}  // namespace
}  // namespace idemgate::test

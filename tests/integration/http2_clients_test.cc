// SPDX-License-Identifier: Apache-2.0
// HTTP/2 from real clients that are not ours (SPEC §14): Go's standard library (net/http over
// TLS, ALPN h2; tests/clients/h2_client.go, built here with `go build`, nothing fetched) and
// Node's `http2` module (tests/clients/h2_client.js). Each runs the seed transcript (201, the
// replayed 201, 422 for the key with another body) and fifty concurrent streams on one
// connection with one key, which the upstream executes once.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/tls_tools.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

constexpr char kUpstreamBody[] = R"({"id":"pi_1","state":"created"})";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The Go client, built once into the build directory (beside the gateway's binary) and again
// only when its source is newer; "" when Go is not installed or the build failed (`why`).
std::string GoClient(std::string* why) {
  const std::string go = FindProgram("go");
  if (go.empty()) {
    *why = "go (Debian golang-go) is not installed";
    return "";
  }
  namespace fs = std::filesystem;
  const fs::path src = fs::path(SOURCE_DIR) / "tests/clients/h2_client.go";
  const fs::path dir = fs::path(IDEMGATE_BIN).parent_path();
  const fs::path bin = dir / "h2_go_client";
  std::error_code ec;
  if (fs::exists(bin, ec) && fs::last_write_time(bin, ec) >= fs::last_write_time(src, ec)) {
    return bin.string();
  }
  TempDir home;
  // Built under a name of its own, then renamed: tests running beside this one may build too.
  const fs::path tmp = dir / ("h2_go_client.tmp." + std::to_string(getpid()));
  ProgramResult r = RunProgram(
      "/usr/bin/env",
      {"GOCACHE=" + (dir / "go-cache").string(), "HOME=" + home.path(), "GOTOOLCHAIN=local",
       "GOPROXY=off", "GO111MODULE=off", "GOFLAGS=", go, "build", "-o", tmp.string(), src.string()},
      180s);
  if (r.exit_code != 0) {
    *why = "go build failed: " + r.output;
    return "";
  }
  fs::rename(tmp, bin, ec);
  if (ec) *why = "cannot rename the Go client: " + ec.message();
  return ec ? "" : bin.string();
}

class Http2ClientsTest : public GatewayTest {
 protected:
  // A TLS listener with a certificate from a test CA (whose PEM is ca_).
  void StartTls() {
    std::string error;
    auto ca = MakeTestCa(dir_, "ca", &error);
    ASSERT_TRUE(ca) << error;
    auto cert =
        MakeTestServerCert(dir_, "server", *ca, "localhost", "DNS:localhost,IP:127.0.0.1", &error);
    ASSERT_TRUE(cert) << error;
    ca_ = ca->cert;
    Set("listen", "tls_cert", "\"" + cert->cert + "\"");
    Set("listen", "tls_key", "\"" + cert->key + "\"");
    StartGateway();
  }
  std::string Url() const {
    return "https://127.0.0.1:" + std::to_string(port_) + "/v1/payment_intents";
  }
  int Posts() const {
    int n = 0;
    for (const auto& r : upstream_.received()) n += r.method == "POST";
    return n;
  }
  // Fifty answers, each "201 ..." (the first, or a replay) or "409 ..." (in flight).
  void ExpectFiftyExecutedOnce(const std::vector<std::string>& lines) {
    int created = 0, in_use = 0;
    for (const std::string& line : lines) {
      created += line.rfind("201 ", 0) == 0;
      in_use += line.rfind("409 ", 0) == 0;
    }
    EXPECT_EQ(created + in_use, 50);
    EXPECT_GE(created, 1);
    EXPECT_EQ(Posts(), 1);
  }
  std::string ca_;
};

// Go: "<status> <proto> <idempotent-replayed> <body>" per answer.
TEST_F(Http2ClientsTest, GoSeedTranscript) {
  std::string why;
  const std::string client = GoClient(&why);
  if (client.empty()) GTEST_SKIP() << why;
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}}));
  StartTls();
  ProgramResult r =
      RunProgram(client, {"-url", Url(), "-ca", ca_, "-mode", "seed", "-key", "go-1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = Lines(r.output);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines[0], std::string("201 HTTP/2.0 - ") + kUpstreamBody);
  EXPECT_EQ(lines[1], std::string("201 HTTP/2.0 true ") + kUpstreamBody);
  EXPECT_EQ(lines[2].rfind("422 HTTP/2.0 - ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find("idempotency_key_reused"), std::string::npos) << lines[2];
  EXPECT_EQ(Posts(), 1);
}

TEST_F(Http2ClientsTest, GoFiftyStreamsOnOneConnectionExecuteOnce) {
  std::string why;
  const std::string client = GoClient(&why);
  if (client.empty()) GTEST_SKIP() << why;
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}})
          .WithDelay(300));
  StartTls();
  ProgramResult r =
      RunProgram(client, {"-url", Url(), "-ca", ca_, "-mode", "fifty", "-key", "go-fifty"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines = Lines(r.output);
  ASSERT_EQ(lines.size(), 51u) << r.output;
  EXPECT_EQ(lines.back(), "conns=1");  // every request a stream of the one connection
  lines.pop_back();
  for (const std::string& line : lines) EXPECT_NE(line.find(" HTTP/2.0 "), std::string::npos);
  ExpectFiftyExecutedOnce(lines);
}

// Node: one http2 session; "<status> <idempotent-replayed> <body>" per answer.
TEST_F(Http2ClientsTest, NodeSeedTranscript) {
  const std::string node = FindProgram("node");
  if (node.empty()) GTEST_SKIP() << "node (Debian nodejs) is not installed";
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}}));
  StartTls();
  ProgramResult r = RunProgram(
      node, {std::string(SOURCE_DIR) + "/tests/clients/h2_client.js", Url(), ca_, "seed", "n-1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = Lines(r.output);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines[0], std::string("201 - ") + kUpstreamBody);
  EXPECT_EQ(lines[1], std::string("201 true ") + kUpstreamBody);
  EXPECT_EQ(lines[2].rfind("422 - ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find("idempotency_key_reused"), std::string::npos) << lines[2];
  EXPECT_EQ(Posts(), 1);
}

TEST_F(Http2ClientsTest, NodeFiftyStreamsOnOneSessionExecuteOnce) {
  const std::string node = FindProgram("node");
  if (node.empty()) GTEST_SKIP() << "node (Debian nodejs) is not installed";
  upstream_.SetBehavior(
      UpstreamBehavior::Respond(201, kUpstreamBody, {{"Content-Type", "application/json"}})
          .WithDelay(300));
  StartTls();
  ProgramResult r = RunProgram(node, {std::string(SOURCE_DIR) + "/tests/clients/h2_client.js",
                                      Url(), ca_, "fifty", "n-fifty"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = Lines(r.output);
  ASSERT_EQ(lines.size(), 50u) << r.output;
  ExpectFiftyExecutedOnce(lines);
}

}  // namespace
}  // namespace idemgate::test

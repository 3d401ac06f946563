// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the JSON access log in file mode, its privacy, and reopen on SIGHUP.
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

// One flat JSON object of strings and numbers, as the access log writes it. Empty map when the
// line is not such an object.
std::map<std::string, std::string> ParseFlatJson(const std::string& line) {
  std::map<std::string, std::string> out;
  static const std::regex kMember(
      R"re(^\s*"([a-z_]+)"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?|true|false)\s*([,}]))re");
  if (line.size() < 2 || line.front() != '{' || line.back() != '}') return {};
  std::string rest = line.substr(1);
  std::smatch m;
  while (std::regex_search(rest, m, kMember)) {
    std::string value = m[2];
    if (!value.empty() && value.front() == '"') value = value.substr(1, value.size() - 2);
    out[m[1]] = value;
    bool last = m[3] == "}";  // read before `rest` (which `m` points into) changes
    rest = m.suffix();
    if (last) return rest.empty() ? out : std::map<std::string, std::string>{};
  }
  return {};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class AccessLogTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  }

  // Polls `name` until it has at least `n` lines (the writer thread is asynchronous).
  std::vector<std::string> WaitForLines(const std::string& name, size_t n) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    std::vector<std::string> lines;
    while (std::chrono::steady_clock::now() < deadline) {
      lines = Lines(dir_.ReadFile(name));
      if (lines.size() >= n) break;
      std::this_thread::sleep_for(10ms);
    }
    return lines;
  }
};

TEST_F(AccessLogTest, OneJsonLinePerExchangeWithoutSecrets) {
  StartGateway();
  const HeaderList cred = {{"Authorization", "Bearer cred-SENTINEL-7f3a"}};
  ASSERT_EQ(Post("key-SENTINEL-91bc", "{}", "/v1/payment_intents", cred).status, 201);
  ASSERT_EQ(Post("key-SENTINEL-91bc", "{}", "/v1/payment_intents", cred).status, 201);
  ASSERT_EQ(Post("key-SENTINEL-91bc", "{}", "/v1/payment_intents", {}).status, 401);
  {
    TestClient client(port_);
    ASSERT_EQ(client.Request("GET", "/v1/things?token=QUERY-SENTINEL-c0de", cred).status, 201);
  }
  std::vector<std::string> lines = WaitForLines("access.log", 4);
  ASSERT_EQ(lines.size(), 4u) << dir_.ReadFile("access.log");
  std::string all = dir_.ReadFile("access.log");
  for (const char* secret : {"cred-SENTINEL", "key-SENTINEL", "QUERY-SENTINEL", "token="}) {
    EXPECT_EQ(all.find(secret), std::string::npos) << secret << " leaked:\n" << all;
  }

  std::vector<std::map<std::string, std::string>> e;
  for (const std::string& line : lines) {
    e.push_back(ParseFlatJson(line));
    ASSERT_FALSE(e.back().empty()) << "not a flat JSON object: " << line;
    EXPECT_TRUE(
        std::regex_match(e.back()["time"], std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
        << line;
    EXPECT_TRUE(std::regex_match(e.back()["latency_ms"], std::regex(R"(\d+\.\d{3})"))) << line;
    EXPECT_EQ(e.back()["client_ip"], "127.0.0.1");
  }
  EXPECT_EQ(e[0]["method"], "POST");
  EXPECT_EQ(e[0]["path"], "/v1/payment_intents");
  EXPECT_EQ(e[0]["status"], "201");
  EXPECT_EQ(e[0]["outcome"], "fresh");
  EXPECT_EQ(e[0]["attempt"], "1");
  EXPECT_EQ(e[0].count("error"), 0u);
  EXPECT_TRUE(e[0].count("upstream_ms"));
  EXPECT_EQ(e[0]["bytes_out"],
            std::to_string(std::string(R"({"id":"pi_1","state":"created"})").size()));
  EXPECT_TRUE(std::regex_match(e[0]["key_hash"], std::regex("[0-9a-f]{16}"))) << lines[0];

  EXPECT_EQ(e[1]["outcome"], "replay");
  EXPECT_EQ(e[1]["key_hash"], e[0]["key_hash"]);  // same scope and key
  EXPECT_EQ(e[1].count("attempt"), 0u);
  EXPECT_EQ(e[1].count("upstream_ms"), 0u);

  EXPECT_EQ(e[2]["status"], "401");
  EXPECT_EQ(e[2]["outcome"], "rejected");
  EXPECT_EQ(e[2]["error"], "missing_credentials");
  EXPECT_EQ(e[2].count("key_hash"), 0u);

  EXPECT_EQ(e[3]["method"], "GET");
  EXPECT_EQ(e[3]["path"], "/v1/things");  // no query string
  EXPECT_EQ(e[3]["outcome"], "passthrough");
  EXPECT_EQ(e[3].count("key_hash"), 0u);
}

TEST_F(AccessLogTest, KeyHashDependsOnScopeAndKey) {
  StartGateway();
  ASSERT_EQ(Post("kh-1", "{}").status, 201);
  ASSERT_EQ(Post("kh-2", "{}").status, 201);
  ASSERT_EQ(Post("kh-1", "{}", "/v1/payment_intents", {{"Authorization", "Bearer other"}}).status,
            201);
  std::vector<std::string> lines = WaitForLines("access.log", 3);
  ASSERT_EQ(lines.size(), 3u);
  std::string a = ParseFlatJson(lines[0])["key_hash"], b = ParseFlatJson(lines[1])["key_hash"],
              c = ParseFlatJson(lines[2])["key_hash"];
  EXPECT_EQ(a.size(), 16u);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

TEST_F(AccessLogTest, SighupReopensAtTheOriginalPath) {
  StartGateway();
  ASSERT_EQ(Post("rot-1", "{}").status, 201);
  ASSERT_EQ(WaitForLines("access.log", 1).size(), 1u);
  ASSERT_EQ(std::rename(dir_.Path("access.log").c_str(), dir_.Path("access.log.1").c_str()), 0);
  ASSERT_TRUE(gateway_.Kill(SIGHUP));
  ASSERT_TRUE(gateway_.WaitForOutput("access log reopened")) << gateway_.log();

  ASSERT_EQ(Post("rot-2", "{}").status, 201);
  std::vector<std::string> fresh = WaitForLines("access.log", 1);
  ASSERT_EQ(fresh.size(), 1u) << gateway_.log();
  std::vector<std::string> old = Lines(dir_.ReadFile("access.log.1"));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_NE(ParseFlatJson(fresh[0])["key_hash"], ParseFlatJson(old[0])["key_hash"]);
  EXPECT_TRUE(gateway_.running());  // SIGHUP did not end the process
}

TEST_F(AccessLogTest, FlushedOnShutdown) {
  StartGateway();
  for (int i = 0; i < 20; ++i) ASSERT_EQ(Post("flush-" + std::to_string(i), "{}").status, 201);
  ASSERT_TRUE(gateway_.Kill(SIGTERM));
  auto status = gateway_.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited() && status->code() == 0) << status->ToString();
  EXPECT_EQ(Lines(dir_.ReadFile("access.log")).size(), 20u);
}

TEST_F(AccessLogTest, StdoutMode) {
  Set("log", "access", "\"stdout\"");
  StartGateway();
  ASSERT_EQ(Post("stdout-1", "{}").status, 201);
  EXPECT_TRUE(gateway_.WaitForOutput("\"outcome\":\"fresh\"")) << gateway_.log();
}

}  // namespace
}  // namespace idemgate::test

// SPDX-License-Identifier: Apache-2.0
// Integration fixture: the real gateway binary in front of a FakeUpstream or the demo API, with
// RocksDB in a temp dir, on port 0. Helpers to write its config and send requests.
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/demo_api.h"
#include "tests/support/fake_upstream.h"
#include "tests/support/gateway_process.h"
#include "tests/support/http_client.h"
#include "tests/support/temp_dir.h"

namespace idemgate::test {

inline const HeaderList kMerchant = {{"Authorization", "Bearer merchant-demo"}};

// The F1 fingerprint prefix, computed here independently of the gateway's code.
inline std::string ExpectedFingerprintPrefix(std::string_view method, std::string_view target,
                                             std::string_view body) {
  std::string input;
  for (std::string_view part : {method, target, body}) {
    uint64_t n = part.size();
    for (int i = 7; i >= 0; --i) input.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    input.append(part);
  }
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

// The code of a gateway error body {"error":"<code>","detail":"..."}; "" for any other body.
inline std::string ErrorCodeOf(const HttpResponse& r) {
  std::smatch m;
  static const std::regex kError(R"re(^\{"error":"([a-z_]+)","detail":".+"\}$)re");
  return std::regex_search(r.body, m, kError) ? m[1].str() : "";
}

// An answer's bytes without its X-Request-Id line: every answer carries its own request's id.
inline std::string WithoutRequestId(std::string raw) {
  size_t at = raw.find("\r\nX-Request-Id: ");
  if (at != std::string::npos) raw.erase(at, raw.find("\r\n", at + 2) - at);
  return raw;
}

// The raw bytes of a replay are the first answer's plus Idempotent-Replayed and Age (R2, R6),
// and its own request id: compare WithoutReplayedHeader(replay.raw) with WithoutRequestId(first.raw).
inline std::string WithoutReplayedHeader(std::string raw) {
  const std::string line = "Idempotent-Replayed: true\r\n";
  size_t at = raw.find(line);
  if (at != std::string::npos) raw.erase(at, line.size());
  at = raw.find("\r\nAge: ");
  if (at != std::string::npos) raw.erase(at, raw.find("\r\n", at + 2) - at);
  return WithoutRequestId(std::move(raw));
}

// The value of one /metrics series ("name{labels}" exactly as rendered); -1 when absent.
inline double MetricValue(const std::string& text, const std::string& series) {
  std::string needle = "\n" + series + " ";
  size_t at = ("\n" + text).find(needle);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + needle.size() - 1, nullptr);
}

// A /proc/<pid>/status field (VmRSS, VmHWM) in bytes; 0 when unreadable.
inline int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// utime + stime of a process, in milliseconds (/proc/PID/stat fields 14 and 15).
inline int64_t CpuMs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "(comm) "
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;
  int64_t utime = 0, stime = 0;
  fields >> utime >> stime;
  return (utime + stime) * 1000 / sysconf(_SC_CLK_TCK);
}

// Runs the gateway binary with `args` to its exit (--version, --check-config, a refused start).
struct RunResult {
  int code = -1;  // -1: did not exit normally
  std::string output;
};
inline RunResult RunGateway(const std::vector<std::string>& args) {
  GatewayProcess process;
  EXPECT_TRUE(process.Start(IDEMGATE_BIN, args)) << process.error();
  std::optional<ExitStatus> status = process.Wait();
  RunResult result;
  if (status && status->exited()) result.code = status->code();
  result.output = process.log();
  return result;
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(upstream_.Start());
    upstream_.SetBehavior(UpstreamBehavior::Respond(
        201, R"({"id":"pi_1","state":"created"})", {{"Content-Type", "application/json"}}));
    Set("listen", "address", "\"127.0.0.1:0\"");
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(upstream_.port()) + "\"");
    Set("store", "path", "\"" + dir_.Path("data") + "\"");
    Set("server", "workers", "2");
    Set("log", "access", "\"off\"");
    Set("admin", "address", "\"\"");
  }

  // Sets a config key to a TOML literal, e.g. Set("idempotency", "lease", "\"2s\"").
  void Set(const std::string& section, const std::string& key, const std::string& literal) {
    sections_[section][key] = literal;
  }

  std::string ConfigText() const {
    std::string text;
    for (const auto& [section, keys] : sections_) {
      text += "[" + section + "]\n";
      for (const auto& [key, literal] : keys) text += key + " = " + literal + "\n";
    }
    return text;
  }

  // Writes the config and starts the gateway; the port is in port_.
  void StartGateway() {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
    ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path})) << gateway_.error();
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
  }

  // Starts the gateway with its admin listener on port 0 too; that port is in admin_port_.
  void StartWithAdmin() {
    Set("admin", "address", "\"127.0.0.1:0\"");
    StartGateway();
    admin_port_ = gateway_.WaitForPort("admin listening on ");
    ASSERT_NE(admin_port_, 0) << gateway_.log();
  }

  // The admin listener's /metrics text.
  std::string Scrape() {
    TestClient client(admin_port_);
    HttpResponse r = client.Request("GET", "/metrics");
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body;
  }

  // The value of one series in a fresh scrape; -1 when absent.
  double Metric(const std::string& series) { return MetricValue(Scrape(), series); }

  // The access log (the file `name` in dir_) once `ready` holds for its text; what it holds after
  // 5 s otherwise. A line is written after its answer, so a test polls for it.
  std::string AccessLogWhen(const std::function<bool(const std::string&)>& ready,
                            std::string_view name = "access.log") const {
    std::string log = dir_.ReadFile(name);
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         !ready(log) && std::chrono::steady_clock::now() < deadline; log = dir_.ReadFile(name)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return log;
  }

  void RestartGateway() {
    gateway_.Kill(SIGKILL);
    gateway_.Wait();
    StartGateway();
  }

  HttpResponse Post(std::string_view key, std::string_view body,
                    std::string_view target = "/v1/payment_intents",
                    HeaderList headers = kMerchant) {
    if (!key.empty()) headers.emplace_back("Idempotency-Key", std::string(key));
    TestClient client(port_);
    return client.Request("POST", target, headers, body);
  }

  TempDir dir_;
  FakeUpstream upstream_;
  GatewayProcess gateway_;
  uint16_t port_ = 0;
  uint16_t admin_port_ = 0;
  std::map<std::string, std::map<std::string, std::string>> sections_;
};

}  // namespace idemgate::test

// SPDX-License-Identifier: Apache-2.0
// Several gateway processes on one real PostgreSQL (tests/support/pg_cluster) in front of one
// FakeUpstream: the fixture for SPEC §11's tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/pg_cluster.h"

namespace idemgate::test {

// The replay's bytes without what only a replay carries (Idempotent-Replayed, Age).
inline std::string FirstAnswerBytes(std::string raw) {
  raw = WithoutReplayedHeader(std::move(raw));
  size_t at = raw.find("\r\nAge: ");
  if (at != std::string::npos) raw.erase(at, raw.find("\r\n", at + 2) - at);
  return raw;
}

class PgGatewaysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(pg_.StartPrimary(&error)) << error;
    ASSERT_TRUE(upstream_.Start());
    upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_1","state":"created"})",
                                                    {{"Content-Type", "application/json"}}));
    Set("listen", "address", "\"127.0.0.1:0\"");
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(upstream_.port()) + "\"");
    Set("store", "backend", "\"postgres\"");
    Set("store.postgres", "connections", "4");
    Set("server", "workers", "2");
    Set("log", "access", "\"off\"");
    Set("admin", "address", "\"\"");
  }

  void Set(const std::string& section, const std::string& key, const std::string& literal) {
    sections_[section][key] = literal;
  }

  // Starts gateway number `i` (0, 1, ...) on `dsn` (default: the primary alone), with `env`
  // added to its environment.
  void StartGateway(size_t i, std::string dsn = "", const std::vector<std::string>& env = {}) {
    if (dsn.empty()) dsn = pg_.Dsn(0);
    Set("store", "path", "\"" + dir_.Path("data" + std::to_string(i)) + "\"");
    Set("store.postgres", "dsn", "\"" + dsn + "\"");
    std::string text;
    for (const auto& [section, keys] : sections_) {
      text += "[" + section + "]\n";
      for (const auto& [key, literal] : keys) text += key + " = " + literal + "\n";
    }
    std::string path = dir_.WriteFile("gw" + std::to_string(i) + ".toml", text);
    while (gateways_.size() <= i) gateways_.push_back(std::make_unique<GatewayProcess>());
    while (ports_.size() <= i) ports_.push_back(0);
    ASSERT_TRUE(gateways_[i]->Start(IDEMGATE_BIN, {"--config", path}, env))
        << gateways_[i]->error();
    ports_[i] = gateways_[i]->WaitForPort();
    ASSERT_NE(ports_[i], 0) << gateways_[i]->log();
  }

  HttpResponse Post(size_t i, std::string_view key, std::string_view body,
                    TestClient::Ms timeout = TestClient::kDefaultTimeout) {
    HeaderList headers = kMerchant;
    headers.emplace_back("Idempotency-Key", std::string(key));
    TestClient client(ports_.at(i));
    return client.Request("POST", "/v1/payment_intents", headers, body, timeout);
  }

  // `n` same-key requests, request j through gateway j % gateways, released together.
  std::vector<HttpResponse> PostConcurrently(int n, std::string_view key, std::string_view body) {
    std::vector<HttpResponse> out(n);
    std::mutex mu;
    std::condition_variable cv;
    int connected = 0;
    std::vector<std::thread> threads;
    for (int j = 0; j < n; ++j) {
      threads.emplace_back([&, j] {
        TestClient client(ports_[j % ports_.size()]);
        {
          std::unique_lock lock(mu);
          if (++connected == n) cv.notify_all();
          cv.wait(lock, [&] { return connected == n; });
        }
        HeaderList headers = kMerchant;
        headers.emplace_back("Idempotency-Key", std::string(key));
        out[j] =
            client.Request("POST", "/v1/payment_intents", headers, body, std::chrono::seconds(20));
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  TempDir dir_;
  PgCluster pg_;
  FakeUpstream upstream_;
  std::vector<std::unique_ptr<GatewayProcess>> gateways_;
  std::vector<uint16_t> ports_;
  std::map<std::string, std::map<std::string, std::string>> sections_;
};

}  // namespace idemgate::test

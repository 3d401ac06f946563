// SPDX-License-Identifier: Apache-2.0
// Two gateway processes on a Patroni-managed PostgreSQL cluster (tests/support/patroni_cluster)
// in front of one FakeUpstream: gateway 0 finds the primary by a libpq multi-host DSN
// (target_session_attrs=read-write), gateway 1 through HAProxy checking Patroni's REST API.
// Client threads send new keys through both until stopped; every first 201 is kept, with the
// time its request was sent, to check replays and to measure how long a failover took.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/haproxy_front.h"
#include "tests/support/patroni_cluster.h"

namespace idemgate::test {

using namespace std::chrono_literals;
using SteadyTime = std::chrono::steady_clock::time_point;

struct PatroniAck {
  std::string key;
  std::string raw;  // the first answer's bytes
  size_t gateway = 0;
  SteadyTime sent;
  SteadyTime done;
};

// What the replay of every acknowledged key found.
struct PatroniVerdict {
  size_t acked = 0;
  size_t lost = 0;  // acknowledged, but not replayed with the same bytes
  std::string first_loss;
  size_t executed_twice = 0;  // keys the upstream executed more than once
};

class PatroniGatewaysTest : public ::testing::Test {
 protected:
  void SetUp() override { StartAll(PatroniOptions{}); }

  void StartAll(PatroniOptions options) {
    cluster_ = std::make_unique<PatroniCluster>(options);
    std::string error;
    ASSERT_TRUE(cluster_->Start(&error)) << error;
    ASSERT_TRUE(haproxy_.Start(*cluster_, &error)) << error;
    ASSERT_TRUE(upstream_.Start());
    upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_1","state":"created"})",
                                                    {{"Content-Type", "application/json"}}));
    StartGateway(0, cluster_->MultiHostDsn());
    StartGateway(1, haproxy_.Dsn());
  }

  void TearDown() override {
    StopLoad();
    gateways_.clear();
  }

  void StartGateway(size_t i, const std::string& dsn) {
    std::string text =
        "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\nurl = \"http://127.0.0.1:" +
        std::to_string(upstream_.port()) + "\"\n[store]\nbackend = \"postgres\"\n" + "path = \"" +
        dir_.Path("data" + std::to_string(i)) + "\"\n" + "[store.postgres]\ndsn = \"" + dsn +
        "\"\nconnections = 4\n" +
        "[server]\nworkers = 2\n[log]\naccess = \"off\"\n[admin]\naddress = \"\"\n";
    std::string path = dir_.WriteFile("gw" + std::to_string(i) + ".toml", text);
    while (gateways_.size() <= i) gateways_.push_back(std::make_unique<GatewayProcess>());
    while (ports_.size() <= i) ports_.push_back(0);
    ASSERT_TRUE(gateways_[i]->Start(IDEMGATE_BIN, {"--config", path})) << gateways_[i]->error();
    ports_[i] = gateways_[i]->WaitForPort();
    ASSERT_NE(ports_[i], 0) << gateways_[i]->log();
  }

  HttpResponse Post(size_t gateway, const std::string& key, TestClient::Ms timeout = 20s) {
    HeaderList headers = kMerchant;
    headers.emplace_back("Idempotency-Key", key);
    TestClient client(ports_.at(gateway));
    return client.Request("POST", "/v1/payment_intents", headers, R"({"amount":"1"})", timeout);
  }

  // `threads` clients, client t through gateway t % 2, a new key per request.
  void StartLoad(int threads) {
    stop_ = false;
    for (int t = 0; t < threads; ++t) {
      load_.emplace_back([this, t] {
        for (int i = 0; !stop_; ++i) {
          std::string key = "pa-" + std::to_string(t) + "-" + std::to_string(i);
          size_t gw = t % ports_.size();
          SteadyTime sent = std::chrono::steady_clock::now();
          HttpResponse r = Post(gw, key);
          double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
          std::lock_guard lock(mu_);
          ++statuses_[r.status];
          slowest_s_ = std::max(slowest_s_, took);
          if (r.status == 201 && !r.Header("Idempotent-Replayed")) {
            acked_.push_back({key, r.raw, gw, sent, std::chrono::steady_clock::now()});
          } else if (r.status != 201) {
            std::this_thread::sleep_for(20ms);  // a client's back-off
          }
        }
      });
    }
  }
  void StopLoad() {
    stop_ = true;
    for (auto& t : load_) t.join();
    load_.clear();
  }
  size_t AckedCount() {
    std::lock_guard lock(mu_);
    return acked_.size();
  }
  // Polls the clients' progress until `n` answers were acknowledged through `gateway` (-1: any)
  // from requests sent after `since`.
  bool WaitForAcks(size_t n, int gateway = -1, SteadyTime since = {},
                   std::chrono::seconds timeout = 90s) {
    for (auto deadline = std::chrono::steady_clock::now() + timeout;
         std::chrono::steady_clock::now() < deadline;) {
      if (AcksSince(gateway, since) >= n) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  size_t AcksSince(int gateway, SteadyTime since) {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const PatroniAck& a : acked_) {
      n += (gateway < 0 || a.gateway == static_cast<size_t>(gateway)) && a.sent >= since;
    }
    return n;
  }
  // Seconds from `t0` to the first acknowledged request sent through `gateway` after it; -1.
  double FirstAckAfter(size_t gateway, SteadyTime t0) {
    std::lock_guard lock(mu_);
    double best = -1;
    for (const PatroniAck& a : acked_) {
      double s = std::chrono::duration<double>(a.sent - t0).count();
      if (a.gateway == gateway && s >= 0 && (best < 0 || s < best)) best = s;
    }
    return best;
  }
  // The longest time without an acknowledgement through `gateway` after `since`: what a user
  // sees as the outage.
  double LongestGap(size_t gateway, SteadyTime since) {
    std::lock_guard lock(mu_);
    std::vector<SteadyTime> done{since};
    for (const PatroniAck& a : acked_) {
      if (a.gateway == gateway && a.done >= since) done.push_back(a.done);
    }
    std::sort(done.begin(), done.end());
    double gap = 0;
    for (size_t i = 1; i < done.size(); ++i) {
      gap = std::max(gap, std::chrono::duration<double>(done[i] - done[i - 1]).count());
    }
    return gap;
  }
  std::string Statuses() {
    std::lock_guard lock(mu_);
    std::string out;
    for (auto [status, n] : statuses_)
      out += std::to_string(status) + ":" + std::to_string(n) + " ";
    return out + "(slowest " + std::to_string(slowest_s_) + " s)";
  }

  // Replays every acknowledged key through the other gateway; counts upstream executions.
  PatroniVerdict Verify() {
    StopLoad();
    PatroniVerdict v;
    v.acked = acked_.size();
    for (const PatroniAck& a : acked_) {
      HttpResponse again = Post((a.gateway + 1) % ports_.size(), a.key);
      bool same =
          again.status == 201 && again.Header("Idempotent-Replayed") == "true" &&
          WithoutRequestId(WithoutAge(WithoutReplayedHeader(again.raw))) == WithoutRequestId(a.raw);
      if (!same && v.lost++ == 0) v.first_loss = a.key + ": " + again.raw;
    }
    std::set<std::string> executed;
    for (const RecordedRequest& req : upstream_.received()) {
      if (!executed.insert(req.Header("Idempotency-Key").value_or("")).second) ++v.executed_twice;
    }
    return v;
  }
  static std::string WithoutAge(std::string raw) {
    size_t at = raw.find("\r\nAge: ");
    if (at != std::string::npos) raw.erase(at, raw.find("\r\n", at + 2) - at);
    return raw;
  }

  TempDir dir_;
  std::unique_ptr<PatroniCluster> cluster_;
  HaproxyFront haproxy_;
  FakeUpstream upstream_;
  std::vector<std::unique_ptr<GatewayProcess>> gateways_;
  std::vector<uint16_t> ports_;
  std::mutex mu_;
  std::vector<PatroniAck> acked_;
  std::map<int, size_t> statuses_;
  double slowest_s_ = 0;
  std::vector<std::thread> load_;
  std::atomic<bool> stop_{false};
};

}  // namespace idemgate::test

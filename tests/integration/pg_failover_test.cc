// SPDX-License-Identifier: Apache-2.0
// SPEC §11 M3/M4: load through two gateways, kill -9 the primary, promote the standby. With a
// synchronous standby every answer any client got is replayed identically afterwards (0 lost);
// the control run (asynchronous, the standby's WAL receiver frozen and killed with the primary)
// must report lost records, proving the check can fail.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <set>

#include "tests/integration/pg_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

struct Acked {
  std::string key;
  std::string raw;  // the first answer's bytes
};

struct FailoverReport {
  size_t acked = 0;
  size_t acked_after_failover = 0;
  size_t lost = 0;
  std::string first_loss;
  size_t executed_twice = 0;  // keys the upstream saw more than once
};

class PgFailoverTest : public PgGatewaysTest {
 protected:
  // Client threads POST new keys through both gateways until stopped; first answers are kept.
  void StartLoad(int threads) {
    for (int t = 0; t < threads; ++t) {
      load_.emplace_back([this, t] {
        for (int i = 0; !stop_; ++i) {
          std::string key = "fo-" + std::to_string(t) + "-" + std::to_string(i);
          HttpResponse r = Post(t % ports_.size(), key, R"({"amount":"1"})", 20s);
          if (r.status == 201 && !r.Header("Idempotent-Replayed")) {
            std::lock_guard lock(mu_);
            acked_.push_back({key, r.raw});
          }
        }
      });
    }
  }
  size_t AckedCount() {
    std::lock_guard lock(mu_);
    return acked_.size();
  }
  // Waits (polling the clients' progress) until `n` answers were acknowledged.
  bool WaitForAcks(size_t n, std::chrono::seconds timeout = 30s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (AckedCount() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  void StopLoad() {
    stop_ = true;
    for (auto& t : load_) t.join();
    load_.clear();
  }

  bool StandbyBackAfterReset(int standby, pid_t killed) {
    auto deadline = std::chrono::steady_clock::now() + 60s;
    std::string out, error;
    while (kill(killed, 0) == 0 || !pg_.Exec(standby, "SELECT 1", &out, &error)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }

  FailoverReport Run(bool synchronous, bool freeze_receiver) {
    FailoverReport report;
    std::string error;
    int standby = pg_.AddStandby(synchronous, &error);
    EXPECT_EQ(standby, 1) << error;
    if (standby != 1) return report;
    StartGateway(0, pg_.MultiHostDsn());
    StartGateway(1, pg_.MultiHostDsn());
    StartLoad(6);
    EXPECT_TRUE(WaitForAcks(100));
    pid_t receiver = pg_.WalReceiverPid(standby);
    if (freeze_receiver) {
      EXPECT_GT(receiver, 0);
      kill(receiver, SIGSTOP);  // the standby stops receiving; the primary goes on acking
      EXPECT_TRUE(WaitForAcks(AckedCount() + 300));
    }
    EXPECT_TRUE(pg_.Kill9(0));
    // What the frozen receiver had not read dies with it.
    if (freeze_receiver) {
      kill(receiver, SIGKILL);
      // A killed child makes the standby's postmaster reset all its processes; a promote sent
      // during the reset is dropped (pg_ctl then waits 60 s in vain): wait until the postmaster
      // has reaped the receiver and the standby accepts connections again.
      EXPECT_TRUE(StandbyBackAfterReset(standby, receiver));
    }
    size_t at_kill = AckedCount();
    EXPECT_TRUE(pg_.Promote(standby, &error)) << error;
    EXPECT_TRUE(WaitForAcks(at_kill + 100))
        << "the gateways did not recover after promotion: " << gateways_[0]->log();
    StopLoad();
    report.acked = acked_.size();
    report.acked_after_failover = acked_.size() - at_kill;
    for (size_t j = 0; j < acked_.size(); ++j) {
      HttpResponse again = Post(j % ports_.size(), acked_[j].key, R"({"amount":"1"})", 20s);
      bool same = again.status == 201 && again.Header("Idempotent-Replayed") == "true" &&
                  FirstAnswerBytes(again.raw) == WithoutRequestId(acked_[j].raw);
      if (!same && report.lost++ == 0) report.first_loss = acked_[j].key + ": " + again.raw;
    }
    std::set<std::string> executed;
    for (const RecordedRequest& req : upstream_.received()) {
      if (!executed.insert(req.Header("Idempotency-Key").value_or("")).second) {
        ++report.executed_twice;
      }
    }
    return report;
  }

  std::mutex mu_;
  std::vector<Acked> acked_;
  std::vector<std::thread> load_;
  std::atomic<bool> stop_{false};
};

TEST_F(PgFailoverTest, SynchronousStandbyPromotedLosesNothing) {
  FailoverReport r = Run(/*synchronous=*/true, /*freeze_receiver=*/false);
  EXPECT_GE(r.acked, 200u);
  EXPECT_GE(r.acked_after_failover, 100u);
  EXPECT_EQ(r.lost, 0u) << r.first_loss;
  EXPECT_EQ(r.executed_twice, 0u);  // no lease expired: no takeover was due
  std::cerr << "failover: " << r.acked << " acknowledged, " << r.lost << " lost\n";
  // The log names the server connected to, and the move to the promoted standby.
  const std::string log = gateways_[0]->log();
  EXPECT_NE(log.find("INFO store: connected to PostgreSQL at "), std::string::npos) << log;
  EXPECT_NE(log.find(" (was "), std::string::npos) << log;
  EXPECT_NE(log.find(": a failover?)"), std::string::npos) << log;
}

TEST_F(PgFailoverTest, ControlAsynchronousStandbyWithFrozenReceiverLosesRecords) {
  FailoverReport r = Run(/*synchronous=*/false, /*freeze_receiver=*/true);
  EXPECT_GE(r.acked, 400u);
  EXPECT_GT(r.lost, 0u) << "the check could not see lost records";
  std::cerr << "control: " << r.acked << " acknowledged, " << r.lost << " lost\n";
}

}  // namespace
}  // namespace idemgate::test

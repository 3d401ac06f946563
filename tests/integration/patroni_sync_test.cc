// SPDX-License-Identifier: Apache-2.0
// Patroni's synchronous_mode_strict under load: both standbys killed (-9, PostgreSQL and
// Patroni), the leader is left without a synchronous standby and must not acknowledge alone. No
// guarded request gets a 201 while they are down: a new one is answered 503 once its claim
// stayed unconfirmed for store.confirm_timeout (10 s), so clients are told instead of hanging;
// once Patroni has them back, both gateways take writes again, everything acknowledged before
// is replayed and no key executes twice.
#include <gtest/gtest.h>

#include "tests/integration/patroni_fixture.h"

namespace idemgate::test {
namespace {

TEST_F(PatroniGatewaysTest, StandbysLostStrictModeAcknowledgesNothingUntilBack) {
  StartLoad(6);
  ASSERT_TRUE(WaitForAcks(100)) << Statuses();
  int leader = cluster_->Leader(), sync = cluster_->SyncStandby();
  ASSERT_GE(leader, 0);
  ASSERT_GE(sync, 0);
  int other = 3 - leader - sync;
  ASSERT_TRUE(cluster_->KillNode(sync));
  ASSERT_TRUE(cluster_->KillNode(other));
  SteadyTime t_lost = std::chrono::steady_clock::now();
  // A new request through each gateway once they are gone: its claim cannot commit, so it is
  // answered 503 when store.confirm_timeout (10 s) has passed, instead of waiting with them.
  std::this_thread::sleep_for(1s);
  HttpResponse probes[2];
  {
    std::jthread dsn([&] { probes[0] = Post(0, "probe-dsn", 30s); });
    std::jthread haproxy([&] { probes[1] = Post(1, "probe-haproxy", 30s); });
  }
  std::this_thread::sleep_until(t_lost + 15s);  // longer than a ttl: Patroni has seen them gone
  size_t acked_while_down = AcksSince(-1, t_lost);
  std::string statuses_down = Statuses();
  std::string error;
  SteadyTime t_back = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->StartNode(sync, &error)) << error;
  ASSERT_TRUE(cluster_->StartNode(other, &error)) << error;
  EXPECT_TRUE(cluster_->WaitHealthy(120s, &error)) << error;
  EXPECT_EQ(cluster_->Leader(), leader) << "strict mode: the leader stays";
  EXPECT_TRUE(WaitForAcks(50, 0, t_back)) << Statuses() << gateways_[0]->log();
  EXPECT_TRUE(WaitForAcks(50, 1, t_back)) << Statuses() << gateways_[1]->log();
  double back_dsn = FirstAckAfter(0, t_back), back_haproxy = FirstAckAfter(1, t_back);
  PatroniVerdict v = Verify();
  EXPECT_EQ(acked_while_down, 0u) << "acknowledged with no synchronous standby";
  for (const HttpResponse& probe : probes) {
    EXPECT_EQ(probe.status, 503) << probe.raw;
    EXPECT_NE(probe.body.find("has not confirmed the claim"), std::string::npos) << probe.body;
  }
  EXPECT_EQ(v.lost, 0u) << v.first_loss;
  EXPECT_EQ(v.executed_twice, 0u);
  std::cerr << "patroni standbys lost: " << acked_while_down << " acknowledged while down ("
            << statuses_down << "); first 201 after the restart " << back_dsn << " s (DSN), "
            << back_haproxy << " s (HAProxy); " << v.acked << " acknowledged, " << v.lost
            << " lost\n";
}

}  // namespace
}  // namespace idemgate::test

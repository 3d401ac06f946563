// SPDX-License-Identifier: Apache-2.0
// SPEC §11 on Patroni: load through two gateways (one on a libpq multi-host DSN, one through
// HAProxy), then the leader's PostgreSQL and its Patroni killed (-9). Patroni promotes the
// synchronous standby by itself; both gateways follow without a restart; every answer a client
// got is replayed identically and no key executes twice. Prints the failover times (kill ->
// first 201 through each gateway).
#include <gtest/gtest.h>

#include "tests/integration/patroni_fixture.h"

namespace idemgate::test {
namespace {

TEST_F(PatroniGatewaysTest, LeaderKilledPatroniFailsOverAndGatewaysFollow) {
  StartLoad(6);
  ASSERT_TRUE(WaitForAcks(100)) << Statuses();
  int old_leader = cluster_->Leader();
  int sync = cluster_->SyncStandby();
  ASSERT_GE(old_leader, 0);
  ASSERT_GE(sync, 0);
  ASSERT_TRUE(cluster_->KillNode(old_leader));
  SteadyTime t_kill = std::chrono::steady_clock::now();  // every later request meets the dead node
  int leader = cluster_->WaitForLeader(60s, old_leader);
  ASSERT_GE(leader, 0) << "Patroni did not fail over; logs in " << cluster_->root();
  EXPECT_EQ(leader, sync) << "Patroni promoted a node that was not the synchronous standby";
  double promoted =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_kill).count();
  // Both gateways take writes again, neither restarted.
  EXPECT_TRUE(WaitForAcks(50, 0, t_kill)) << Statuses() << gateways_[0]->log();
  EXPECT_TRUE(WaitForAcks(50, 1, t_kill)) << Statuses() << gateways_[1]->log();
  double via_dsn = FirstAckAfter(0, t_kill), via_haproxy = FirstAckAfter(1, t_kill);
  double gap_dsn = LongestGap(0, t_kill), gap_haproxy = LongestGap(1, t_kill);
  PatroniVerdict v = Verify();
  EXPECT_GE(v.acked, 200u);
  EXPECT_EQ(v.lost, 0u) << v.first_loss;
  EXPECT_EQ(v.executed_twice, 0u);
  EXPECT_FALSE(gateways_[0]->Wait(0ms).has_value()) << "gateway 0 exited";
  EXPECT_FALSE(gateways_[1]->Wait(0ms).has_value()) << "gateway 1 exited";
  std::cerr << "patroni failover: new leader after " << promoted
            << " s; first 201 after the kill: " << via_dsn << " s (multi-host DSN), " << via_haproxy
            << " s (HAProxy); longest time without a 201: " << gap_dsn << " / " << gap_haproxy
            << " s; " << v.acked << " acknowledged, " << v.lost << " lost, " << v.executed_twice
            << " executed twice; answers " << Statuses() << "\n";
}

}  // namespace
}  // namespace idemgate::test

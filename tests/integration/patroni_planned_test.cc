// SPDX-License-Identifier: Apache-2.0
// Planned events on a Patroni cluster under load through both gateways (multi-host DSN and
// HAProxy): `patronictl switchover` to the synchronous standby, and etcd (Patroni's DCS) killed
// and restarted. Either way nothing acknowledged is lost, no key executes twice, and both
// gateways take writes again without a restart.
#include <gtest/gtest.h>

#include "tests/integration/patroni_fixture.h"

namespace idemgate::test {
namespace {

TEST_F(PatroniGatewaysTest, SwitchoverUnderLoadLosesNothing) {
  StartLoad(6);
  ASSERT_TRUE(WaitForAcks(100)) << Statuses();
  int old_leader = cluster_->Leader(), sync = cluster_->SyncStandby();
  ASSERT_GE(old_leader, 0);
  ASSERT_GE(sync, 0);
  SteadyTime t0 = std::chrono::steady_clock::now();
  std::string error;
  ASSERT_TRUE(cluster_->Switchover(sync, &error)) << error;
  ASSERT_EQ(cluster_->WaitForLeader(60s, old_leader), sync);
  EXPECT_TRUE(WaitForAcks(50, 0, t0)) << Statuses() << gateways_[0]->log();
  EXPECT_TRUE(WaitForAcks(50, 1, t0)) << Statuses() << gateways_[1]->log();
  // The old leader rejoins as a replica (Patroni's pg_rewind), the cluster whole again.
  EXPECT_TRUE(cluster_->WaitHealthy(90s, &error)) << error;
  double via_dsn = LongestGap(0, t0), via_haproxy = LongestGap(1, t0);
  PatroniVerdict v = Verify();
  EXPECT_EQ(v.lost, 0u) << v.first_loss;
  EXPECT_EQ(v.executed_twice, 0u);
  std::cerr << "patroni switchover: longest time without a 201: " << via_dsn
            << " s (multi-host DSN), " << via_haproxy << " s (HAProxy); " << v.acked
            << " acknowledged, " << v.lost << " lost; answers " << Statuses() << "\n";
}

TEST_F(PatroniGatewaysTest, EtcdRestartedUnderLoadLosesNothing) {
  StartLoad(6);
  ASSERT_TRUE(WaitForAcks(100)) << Statuses();
  SteadyTime t0 = std::chrono::steady_clock::now();
  std::string error;
  ASSERT_TRUE(cluster_->RestartEtcd(&error)) << error;
  EXPECT_TRUE(cluster_->WaitHealthy(90s, &error)) << error;
  EXPECT_TRUE(WaitForAcks(50, 0, t0)) << Statuses() << gateways_[0]->log();
  EXPECT_TRUE(WaitForAcks(50, 1, t0)) << Statuses() << gateways_[1]->log();
  PatroniVerdict v = Verify();
  EXPECT_EQ(v.lost, 0u) << v.first_loss;
  EXPECT_EQ(v.executed_twice, 0u);
  std::cerr << "patroni etcd restart: longest time without a 201: " << LongestGap(0, t0)
            << " s (multi-host DSN), " << LongestGap(1, t0) << " s (HAProxy); " << v.acked
            << " acknowledged, " << v.lost << " lost; answers " << Statuses() << "\n";
}

}  // namespace
}  // namespace idemgate::test

// SPDX-License-Identifier: Apache-2.0
// UpstreamPool on a real libevent loop against FakeUpstream: the call's deadline (a guarded
// attempt's lease) caps the connect and response timers, and without one they run in full.
#include "proxy/upstream/upstream.h"

#include <gtest/gtest.h>

#include <chrono>

#include "tests/support/ev_util.h"
#include "tests/support/fake_upstream.h"

namespace idemgate {
namespace {

using namespace std::chrono_literals;

// The Host sent for a request that came without one: the port only when not the scheme's.
TEST(UpstreamHost, NamesThePortOnlyWhenNotTheDefaultAndBracketsIpv6) {
  Config::Upstream up;
  up.addr = {"127.0.0.1", 80};
  EXPECT_EQ(UpstreamHost(up), "127.0.0.1");
  up.addr = {"127.0.0.1", 65535};
  EXPECT_EQ(UpstreamHost(up), "127.0.0.1:65535");
  up.addr = {"::1", 8443};
  EXPECT_EQ(UpstreamHost(up), "[::1]:8443");
  up.tls = true;
  up.addr = {"payments.internal.example", 443};
  EXPECT_EQ(UpstreamHost(up), "payments.internal.example");
  up.addr = {"payments.internal.example", 80};
  EXPECT_EQ(UpstreamHost(up), "payments.internal.example:80");
}
using Clock = std::chrono::steady_clock;

class UpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(upstream_.Start());
    pool_ = std::make_unique<UpstreamPool>(base_.get(), HostPort{"127.0.0.1", upstream_.port()});
    ASSERT_TRUE(pool_->ok()) << pool_->error();
  }
  void TearDown() override { pool_.reset(); }

  // Sends one POST with `limits` and runs the loop until it is answered.
  UpstreamResult Call(const UpstreamLimits& limits) {
    UpstreamResult out;
    bool done = false;
    pool_->Send("POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
                false, limits, [&](UpstreamResult r) {
                  out = std::move(r);
                  done = true;
                  event_base_loopbreak(base_.get());
                });
    while (!done) event_base_loop(base_.get(), EVLOOP_ONCE);
    return out;
  }

  test::EventBasePtr base_{event_base_new()};
  test::FakeUpstream upstream_;
  std::unique_ptr<UpstreamPool> pool_;
};

TEST_F(UpstreamTest, DeadlineCutsTheResponseWaitShort) {
  upstream_.EnqueueBehavior(test::UpstreamBehavior::Respond(201, "late").WithDelay(1500));
  UpstreamLimits limits;
  limits.response_timeout_ms = 5'000;
  limits.deadline = Clock::now() + 300ms;
  UpstreamResult r = Call(limits);
  EXPECT_EQ(r.error, UpstreamError::kTimeout) << r.detail;  // sent, then no answer in time
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(UpstreamTest, WithoutDeadlineTheResponseTimeoutRunsInFull) {
  upstream_.EnqueueBehavior(test::UpstreamBehavior::Respond(201, "late").WithDelay(500));
  UpstreamLimits limits;
  limits.response_timeout_ms = 5'000;
  UpstreamResult r = Call(limits);
  ASSERT_EQ(r.error, UpstreamError::kNone) << r.detail;
  EXPECT_EQ(r.response.status, 201);
  EXPECT_EQ(r.response.body, "late");
}

TEST_F(UpstreamTest, PassedDeadlineEndsTheCallAtOnce) {
  // An answer already in the socket when the timer fires is still read (a pause may have
  // delayed the loop), so this one comes late: the call must end without waiting for it.
  upstream_.EnqueueBehavior(test::UpstreamBehavior::Respond(201, "late").WithDelay(1500));
  UpstreamLimits limits;
  limits.deadline = Clock::now() - 1ms;
  UpstreamResult r = Call(limits);
  // Either phase may be cut (connecting: nothing sent; sent: an indeterminate timeout).
  EXPECT_TRUE(r.error == UpstreamError::kUnavailable || r.error == UpstreamError::kTimeout)
      << r.detail;
}

}  // namespace
}  // namespace idemgate

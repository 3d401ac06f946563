// SPDX-License-Identifier: Apache-2.0
// The lazy one-shot Timer on a real libevent loop: it never fires before its latest deadline, an
// earlier deadline is kept, a cancelled timer stays silent, and it can be armed again from its
// own callback. No assertion bounds how late it fires beyond "eventually".
#include <gtest/gtest.h>

#include <chrono>

#include "proxy/net/event_util.h"

namespace idemgate {
namespace {

using Clock = std::chrono::steady_clock;

struct Owner {
  Timer timer;
  int fired = 0;
  Clock::time_point at{};
  int rearm_ms = -1;  // >= 0: the callback arms the timer again, once
  void OnFire() {
    ++fired;
    at = Clock::now();
    if (rearm_ms >= 0) {
      timer.Arm(rearm_ms);
      rearm_ms = -1;
    }
  }
};

class TimerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.reset(event_base_new());
    owner_.timer.Init<Owner, &Owner::OnFire>(base_.get(), &owner_);
  }
  // Runs the loop until `done` holds or `limit` passes.
  template <typename Done>
  void RunUntil(Done done, std::chrono::milliseconds limit) {
    const Clock::time_point end = Clock::now() + limit;
    while (!done() && Clock::now() < end) {
      event_base_loop(base_.get(), EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
  }
  // Runs the loop until the timer has fired `times` times, or 5 s pass.
  void RunUntilFired(int times = 1) {
    RunUntil([&] { return owner_.fired >= times; }, std::chrono::seconds(5));
  }
  void RunFor(std::chrono::milliseconds span) {
    RunUntil([] { return false; }, span);
  }
  EventBasePtr base_;
  Owner owner_;
};

TEST_F(TimerTest, FiresOnceAfterItsDeadline) {
  const Clock::time_point start = Clock::now();
  owner_.timer.Arm(20);
  EXPECT_TRUE(owner_.timer.armed());
  RunUntilFired();
  ASSERT_EQ(owner_.fired, 1);
  EXPECT_GE(owner_.at - start, std::chrono::milliseconds(20));
  EXPECT_FALSE(owner_.timer.armed());
  RunFor(std::chrono::milliseconds(40));
  EXPECT_EQ(owner_.fired, 1);
}

TEST_F(TimerTest, ALaterArmIsWaitedForAfterTheFirstDeadlinePasses) {
  owner_.timer.Arm(10);
  const Clock::time_point rearmed = Clock::now();
  owner_.timer.Arm(150);  // the libevent timer still fires at 10 ms, finds 140 ms to go
  RunUntilFired();
  ASSERT_EQ(owner_.fired, 1);
  EXPECT_GE(owner_.at - rearmed, std::chrono::milliseconds(150));
}

TEST_F(TimerTest, AnEarlierArmIsKept) {
  owner_.timer.Arm(60'000);
  const Clock::time_point rearmed = Clock::now();
  owner_.timer.Arm(10);
  RunUntilFired();
  ASSERT_EQ(owner_.fired, 1) << "a deadline earlier than the scheduled one was not kept";
  EXPECT_GE(owner_.at - rearmed, std::chrono::milliseconds(10));
}

TEST_F(TimerTest, ACancelledTimerStaysSilentAndCanBeArmedAgain) {
  owner_.timer.Arm(10);
  owner_.timer.Cancel();
  EXPECT_FALSE(owner_.timer.armed());
  RunFor(std::chrono::milliseconds(60));
  EXPECT_EQ(owner_.fired, 0);
  owner_.timer.Arm(10);
  RunUntilFired();
  EXPECT_EQ(owner_.fired, 1);
}

TEST_F(TimerTest, ArmedFromItsOwnCallbackItFiresAgain) {
  owner_.rearm_ms = 10;
  owner_.timer.Arm(5);
  RunUntilFired(2);
  EXPECT_EQ(owner_.fired, 2);
  EXPECT_FALSE(owner_.timer.armed());
}

TEST_F(TimerTest, ResetDropsAPendingTimer) {
  owner_.timer.Arm(10);
  owner_.timer.Reset();
  EXPECT_FALSE(owner_.timer.initialized());
  RunFor(std::chrono::milliseconds(60));
  EXPECT_EQ(owner_.fired, 0);
}

}  // namespace
}  // namespace idemgate

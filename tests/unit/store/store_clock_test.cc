// FakeClock moves only when told to; a wall-clock step leaves the monotonic clock alone.
#include <gtest/gtest.h>

#include "store/clock.h"

namespace idemgate {
TEST(FakeClock, MovesOnlyWhenAdvanced) {
  FakeClock clock(1000);
  TimeMs mono = clock.MonotonicMs();
  EXPECT_EQ(clock.NowMs(), 1000);
  clock.Advance(250);
  EXPECT_EQ(clock.NowMs(), 1250);
  EXPECT_EQ(clock.MonotonicMs(), mono + 250);
  clock.Set(5);
  EXPECT_EQ(clock.NowMs(), 5);
  clock.Step(10'000);
  EXPECT_EQ(clock.NowMs(), 10'005);
  EXPECT_EQ(clock.MonotonicMs(), mono + 250);
}
TEST(SystemClock, IsAfter2020) { EXPECT_GT(SystemClock().NowMs(), 1'577'836'800'000LL); }
TEST(SystemClock, MonotonicNeverGoesBack) {
  SystemClock clock;
  TimeMs a = clock.MonotonicMs();
  EXPECT_LE(a, clock.MonotonicMs());
}
}  // namespace idemgate

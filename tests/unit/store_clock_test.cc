// FakeClock moves only when told to.
#include "store/clock.h"

#include <gtest/gtest.h>

namespace idemgate {
TEST(FakeClock, MovesOnlyWhenAdvanced) {
  FakeClock clock(1000);
  EXPECT_EQ(clock.NowMs(), 1000);
  clock.Advance(250);
  EXPECT_EQ(clock.NowMs(), 1250);
  clock.Set(5);
  EXPECT_EQ(clock.NowMs(), 5);
}
TEST(SystemClock, IsAfter2020) { EXPECT_GT(SystemClock().NowMs(), 1'577'836'800'000LL); }
}  // namespace idemgate

// common/log: the line format (RFC 3339 timestamp, level, subsystem, one line) and the
// per-call-site rate limit.
#include "common/log.h"

#include <gtest/gtest.h>

#include <regex>

namespace idemgate {
namespace {

using std::chrono::milliseconds;

TEST(Log, LineHasTimestampLevelAndSubsystem) {
  // 2026-11-30T16:33:46.123Z
  auto when = std::chrono::system_clock::time_point(milliseconds(1'796'056'426'123LL));
  EXPECT_EQ(FormatLogLine(when, LogLevel::kError, "store", "disk full\n"),
            "2026-11-30T16:33:46.123Z ERROR store: disk full\n");
  EXPECT_EQ(FormatLogLine(when, LogLevel::kWarn, "main", "x"),
            "2026-11-30T16:33:46.123Z WARN main: x\n");
}

TEST(Log, MessageLineBreaksStayOnOneLine) {
  std::string line = FormatLogLine(std::chrono::system_clock::now(), LogLevel::kInfo, "reload",
                                   "first\nsecond\r\nthird");
  EXPECT_TRUE(std::regex_match(
      line, std::regex(
                R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO reload: first\\nsecond\\nthird\n)")))
      << line;
}

TEST(LogLimiter, AllowsABurstPerIntervalThenCountsTheRest) {
  LogLimiter limiter(3, milliseconds(1000));
  auto t0 = std::chrono::steady_clock::time_point(milliseconds(5'000));
  uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&suppressed, t0 + milliseconds(i)));
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(limiter.Allow(&suppressed, t0 + milliseconds(500)));
  // The next interval: allowed again, and told how many were held back.
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + milliseconds(1000)));
  EXPECT_EQ(suppressed, 10u);
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + milliseconds(1001)));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace
}  // namespace idemgate

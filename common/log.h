// SPDX-License-Identifier: Apache-2.0
// The gateway's own log: one line per event on stderr,
//   2026-11-30T16:33:46.123Z ERROR store: <message>
// an RFC 3339 UTC timestamp (milliseconds), a level and a subsystem tag ("main", "store",
// "exchange", "admin", "access_log", "worker", "reload", ...). A message's line breaks become
// "; " (other control bytes a space): one line, no escapes. Thread-safe: one write(2) per line.
// Lines that can repeat at the rate of requests go through IDEMGATE_LOG_LIMITED: at most
// kLogBurst lines per second from one call site, then one "suppressed K similar lines" line.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace idemgate {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Writes one line. `subsystem` is a short lower-case tag.
void Log(LogLevel level, std::string_view subsystem, std::string_view message);
// printf-style.
void LogF(LogLevel level, const char* subsystem, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

// The line Log writes, for tests: "<timestamp> <LEVEL> <subsystem>: <message>\n".
std::string FormatLogLine(std::chrono::system_clock::time_point when, LogLevel level,
                          std::string_view subsystem, std::string_view message);

inline constexpr int kLogBurst = 5;  // lines per second per call site

// A per-call-site budget of `burst` lines per `interval`. Thread-safe.
class LogLimiter {
 public:
  explicit LogLimiter(int burst = kLogBurst,
                      std::chrono::milliseconds interval = std::chrono::seconds(1))
      : burst_(burst), interval_(interval) {}
  // True when a line may be written now; then *suppressed is how many lines were held back
  // since the last one written (to report first).
  bool Allow(uint64_t* suppressed,
             std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  const int burst_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_start_{};  // guarded by mu_
  int in_window_ = 0;                                     // guarded by mu_
  uint64_t suppressed_ = 0;                               // guarded by mu_
};

// Writes through `limiter`: a held-back line is only counted; the next one written after it is
// preceded by "suppressed K similar lines".
void LogLimited(LogLimiter& limiter, LogLevel level, const char* subsystem, const char* format, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace idemgate

// A rate-limited line, with one limiter per call site.
#define IDEMGATE_LOG_LIMITED(level, subsystem, ...)                               \
  do {                                                                            \
    static ::idemgate::LogLimiter idemgate_log_limiter_;                          \
    ::idemgate::LogLimited(idemgate_log_limiter_, level, subsystem, __VA_ARGS__); \
  } while (0)

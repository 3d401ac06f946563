// Error lines that can repeat at the rate of a hot loop (accept() failing at the descriptor
// limit) go through a RateLimitedLog: at most one line per interval for each kind, and the next
// line says how many were suppressed meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace idemgate {

class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::chrono::milliseconds interval = std::chrono::seconds(1))
      : interval_(interval) {}

  // Writes <line> (common/log.h, WARN worker) unless a line of this kind was written less than an
  // interval ago (then it is only counted). Thread-safe. True when it was written.
  bool Write(const std::string& line);
  uint64_t suppressed() const;  // lines counted but not written since the last written one

 private:
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};  // guarded by mu_
  bool written_ = false;                          // guarded by mu_
  uint64_t suppressed_ = 0;                       // guarded by mu_
};

}  // namespace idemgate

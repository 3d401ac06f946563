// RateLimitedLog (see log_limit.h).
#include "proxy/log_limit.h"

#include <cstdio>

#include "common/log.h"

namespace idemgate {

bool RateLimitedLog::Write(const std::string& line) {
  uint64_t suppressed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (written_ && now - last_ < interval_) {
      ++suppressed_;
      return false;
    }
    written_ = true;
    last_ = now;
    suppressed = suppressed_;
    suppressed_ = 0;
  }
  if (suppressed > 0) {
    LogF(LogLevel::kWarn, "worker", "%s (%llu similar lines suppressed)", line.c_str(),
         static_cast<unsigned long long>(suppressed));
  } else {
    Log(LogLevel::kWarn, "worker", line);
  }
  return true;
}

uint64_t RateLimitedLog::suppressed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suppressed_;
}

}  // namespace idemgate

// Time source for the store and the gateway: injected so tests never sleep to make time pass.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace idemgate {

// Milliseconds since the Unix epoch.
using TimeMs = int64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimeMs NowMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimeMs NowMs() const override {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  }
};

// A clock that moves only when a test moves it. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeMs start = 1'700'000'000'000) : now_(start) {}
  TimeMs NowMs() const override { return now_.load(); }
  void Advance(TimeMs ms) { now_.fetch_add(ms); }
  void Set(TimeMs ms) { now_.store(ms); }

 private:
  std::atomic<TimeMs> now_;
};

}  // namespace idemgate

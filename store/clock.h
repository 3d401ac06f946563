// SPDX-License-Identifier: Apache-2.0
// Time sources for the store and the gateway: injected so tests never sleep to make time pass.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace idemgate {

// Milliseconds since the Unix epoch (wall clock), or since an arbitrary origin (monotonic).
using TimeMs = int64_t;

// The system's clocks read directly, for code that keeps no injected Clock (a metric's time, a
// log line's elapsed time). SystemClock reads the same two.
inline TimeMs WallNowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}
inline TimeMs MonotonicNowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

class Clock {
 public:
  virtual ~Clock() = default;
  // The wall clock: what stored times (leases, expiry) are written in. It may step.
  virtual TimeMs NowMs() const = 0;
  // A clock that never steps (CLOCK_MONOTONIC): what this process's own deadlines are kept in.
  virtual TimeMs MonotonicMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimeMs NowMs() const override { return WallNowMs(); }
  TimeMs MonotonicMs() const override { return MonotonicNowMs(); }
};

// A clock that moves only when a test moves it. Thread-safe. Advance moves both clocks; Set and
// Step move the wall clock alone (a wall-clock step, as NTP or an operator makes one).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeMs start = 1'700'000'000'000) : now_(start) {}
  TimeMs NowMs() const override { return now_.load(); }
  TimeMs MonotonicMs() const override { return mono_.load(); }
  void Advance(TimeMs ms) {
    now_.fetch_add(ms);
    mono_.fetch_add(ms);
  }
  void Set(TimeMs ms) { now_.store(ms); }
  void Step(TimeMs ms) { now_.fetch_add(ms); }

 private:
  std::atomic<TimeMs> now_;
  std::atomic<TimeMs> mono_{1'000'000};
};

}  // namespace idemgate

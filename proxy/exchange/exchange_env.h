// What an Exchange needs from its surroundings, as a narrow interface: its loop (post, timers,
// monotonic time), the store, the wall clock, the upstream, and where its answer and its report
// go. The Worker implements it for real; tests/unit/exchange_test.cc fakes every part in-process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/exchange/response_sink.h"
#include "proxy/upstream/upstream.h"
#include "store/clock.h"
#include "store/store.h"

namespace idemgate {

class Exchange;
class ReplayCache;
class WaitRegistry;
struct AccessEntry;
struct ExchangeSample;
enum class StoreOp;

// A one-shot timer on the exchange's loop. Destroying it disarms it.
class LoopTimer {
 public:
  virtual ~LoopTimer() = default;
  virtual void Arm(int64_t ms) = 0;
  virtual void Cancel() = 0;
};

class ExchangeEnv {
 public:
  virtual ~ExchangeEnv() = default;

  // Thread-safe: runs `fn` on the exchange's loop (store results come back this way).
  virtual void Post(std::function<void()> fn) = 0;
  virtual std::unique_ptr<LoopTimer> NewTimer(std::function<void()> fn) = 0;
  // Monotonic microseconds (durations and deadlines; never stepped).
  virtual int64_t MonoUs() const = 0;
  // The wall clock the store decides leases with (the fast path reads records with it).
  virtual const Clock& clock() const = 0;
  virtual Store& store() = 0;
  // Completed records' responses, shared by every replay (may be null: no cache).
  virtual ReplayCache* replay_cache() = 0;
  // The process's waiting duplicates (SPEC §10), shared by every loop.
  virtual WaitRegistry& waits() = 0;
  // The gateway is shutting down: no new waits (a duplicate gets its 409 at once).
  virtual bool draining() const = 0;

  // Sends a serialized request upstream; `done` runs later on the loop, exactly once.
  virtual void SendUpstream(std::string request, bool head_request, const UpstreamLimits& limits,
                            UpstreamCallback done) = 0;

  // Metrics for one store operation, and for the finished exchange with its access-log entry
  // (null when WantsAccessEntry() is false; it only lives for the call).
  virtual void RecordStoreOp(StoreOp op, int64_t micros) = 0;
  virtual bool WantsAccessEntry() const = 0;
  virtual void RecordExchange(const ExchangeSample& sample, const AccessEntry* entry) = 0;

  // The exchange has answered and nothing of it is outstanding: free it (after this turn).
  virtual void Finished(Exchange* exchange) = 0;
};

}  // namespace idemgate

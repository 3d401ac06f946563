// The Store interface: async, atomic claim / complete / release of idempotency records.
// Nothing above this header knows which implementation runs (RocksDB, or PostgreSQL shared by
// several instances); store_factory.h opens the configured one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "store/record.h"

namespace idemgate {

enum class StoreCode {
  kOk = 0,
  kStaleClaim,  // Complete/Release by an attempt that was taken over (or whose record is gone)
  kIoError,     // the disk failed, or the database refuses writes; retryable
  kNoSpace,     // disk full; retryable once space is freed
  kCorruption,  // a stored value or the database is corrupt
  kShutdown,    // the store is closing
};

struct StoreStatus {
  StoreCode code = StoreCode::kOk;
  std::string message;  // for logs
  bool ok() const { return code == StoreCode::kOk; }
};

enum class ClaimOutcome {
  kFresh,     // no live record: written in flight as attempt 1
  kTakeover,  // in flight with an expired lease: attempt + 1, new lease
  kReplay,    // completed with the same fingerprint: `record` holds the response
  kInFlight,  // in flight with a live lease: `retry_after_s` is the time left, >= 1
  kMismatch,  // a different fingerprint, any state: `record.fingerprint` is the stored one
};

// What a winning claim (fresh or takeover) owns; Complete and Release are compare-and-set on it.
struct ClaimToken {
  std::string record_key;  // MakeRecordKey(scope, key)
  uint32_t attempt = 0;
  uint64_t owner = 0;  // random per attempt
  // How long the lease had left when the store answered: a duration, because the store's clock
  // (a database's) is not the caller's. A retry may take this attempt over once it has passed.
  TimeMs lease_left_ms = 0;
};

struct ClaimRequest {
  ScopeId scope{};
  std::string key;  // the idempotency key, already unquoted
  Fingerprint fingerprint{};
  TimeMs lease_ms = 30'000;
  TimeMs ttl_ms = 24 * 3'600'000LL;
};

struct ClaimResult {
  StoreStatus status;  // when !status.ok(), nothing else is meaningful and nothing was written
  ClaimOutcome outcome = ClaimOutcome::kFresh;
  ClaimToken token;           // kFresh, kTakeover
  Record record;              // kReplay, kMismatch (and kInFlight, for information)
  int64_t retry_after_s = 0;  // kInFlight
  // kTakeover on PostgreSQL (SPEC §12 A3): > 0 when a backend's committed fence marked that
  // attempt executed. The new owner stores a 502 in its place and forwards nothing.
  uint32_t fenced_attempt = 0;
};

enum class LookupOutcome {
  kMiss,       // no live record
  kFound,      // `record` holds a live record (any state)
  kError,      // the read failed; the caller should fall back to Claim
  kNotCached,  // kNoWait, and the answer is not at hand: fall back to Claim
};

// What a Lookup's caller may wait for.
enum class LookupMode {
  kNoWait,    // an event loop: answer only from what is at hand (memory), never block
  kMayBlock,  // an admin or test thread: may read the disk or ask the database and wait
};

struct LookupResult {
  LookupOutcome outcome = LookupOutcome::kMiss;
  Record record;
  // kFound: the store's clock when it answered; compare the record's times (lease, expiry) with
  // this, never with the caller's clock (a database's clock differs from the gateway's).
  TimeMs now_ms = 0;
};

// Callbacks run on the store's own thread. They must be quick and must not block; the gateway
// posts the result to the event loop that asked. They may call the store again.
using ClaimCallback = std::function<void(ClaimResult)>;
using StatusCallback = std::function<void(StoreStatus)>;
using LookupCallback = std::function<void(LookupResult)>;

class Store {
 public:
  virtual ~Store() = default;

  // Atomic read-check-write: of any number of concurrent claims for one (scope, key), exactly
  // one gets kFresh or kTakeover. The result is reported only once durable (store.sync). The
  // stored record is judged as of the claim's arrival, and an attempt this store's process runs
  // keeps its key until its monotonic deadline even if the wall clock steps past its lease. A
  // claim reported as failed leaves nothing behind (reconciled before it is reported).
  virtual void Claim(ClaimRequest request, ClaimCallback done) = 0;

  // Compare-and-set on (state in flight, attempt, owner): stores the response as completed.
  // A claim that was taken over gets kStaleClaim and nothing is written. Idempotent: the same
  // Complete again (same owner, attempt and response; its earlier write reported a failure but
  // landed) is ok.
  virtual void Complete(ClaimToken token, StoredResponse response, StatusCallback done) = 0;

  // SPEC R3a: a first attempt's record is deleted; a takeover's returns to in flight with an
  // expired lease, keeping its attempt count. Same compare-and-set as Complete.
  virtual void Release(ClaimToken token, StatusCallback done) = 0;

  // A read that never waits for the writer (the fast replay path). Expired records are kMiss.
  // kNoWait (the event loops): what is not at hand comes back as kNotCached, for Claim to read
  // on the store's thread. kMayBlock may wait for the disk or the database; never call it from
  // a store callback.
  virtual LookupResult Lookup(const ScopeId& scope, std::string_view key,
                              LookupMode mode = LookupMode::kMayBlock) = 0;

  // A read on the store's own thread, answered through `done` (a waiting duplicate polling a
  // shared store, SPEC §10 W4: a read, not a claim, so a poll writes nothing). The default
  // reads in place: only for stores whose reads never wait (the in-process fakes).
  virtual void LookupAsync(const ScopeId& scope, std::string key, LookupCallback done) {
    done(Lookup(scope, key, LookupMode::kMayBlock));
  }

  // Deletes the record whatever its state (admin unblock). Reported once durable.
  virtual void Delete(const ScopeId& scope, std::string key, StatusCallback done) = 0;

  // Start-up only, before any worker loop runs (these block the caller until durable): small
  // named values kept with the records (the settings signature), never expired, never seen as a
  // record. `name`: at most kMaxMetaName bytes of [a-z0-9_-]. A missing name gives nullopt.
  static constexpr size_t kMaxMetaName = 16;
  virtual StoreStatus GetMeta(std::string_view name, std::optional<std::string>* value) = 0;
  virtual StoreStatus PutMeta(std::string_view name, std::string_view value) = 0;

  // Approximate number of records stored (for metrics).
  virtual uint64_t ApproximateRecords() = 0;

  // An online backup: a consistent copy of every record as the new directory `dir`, written
  // while the store serves (blocks the caller, never the writer; see store_backup.h). Only the
  // embedded store makes them; a database server has its own tools.
  virtual StoreStatus Checkpoint(const std::string& dir) {
    (void)dir;
    return {StoreCode::kIoError,
            "this store backend makes no checkpoints: back up a PostgreSQL store with pg_dump "
            "or continuous archiving (PITR)"};
  }

  // True when other processes change these records too (a shared database): a record this
  // process read may be deleted elsewhere, so nothing of it may be cached here.
  virtual bool Shared() const { return false; }

  // Stops the writer after everything queued is written. Further calls get kShutdown.
  virtual void Close() = 0;
};

}  // namespace idemgate

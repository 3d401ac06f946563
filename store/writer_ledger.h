// SPDX-License-Identifier: Apache-2.0
// Bookkeeping of RocksStore's writer thread, kept apart from RocksDB so it can be reasoned about
// (and tested) alone: the attempts this process runs, and how to undo a batch whose write failed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "store/claim_rules.h"
#include "store/clock.h"
#include "store/record.h"

namespace idemgate {

// The attempts this process is running, by record key, with their monotonic lease end. A wall
// clock that steps forward makes a stored lease look expired; while the attempt that owns it
// runs here, its own (monotonic) deadline is the truth. After a restart this is empty and the
// stored wall-clock lease is all there is.
class LocalAttempts {
 public:
  // A claim won (and its write is durable): `owner`'s attempt runs until `mono_end`.
  void Start(const std::string& key, uint64_t owner, uint32_t attempt, TimeMs mono_end);
  // The attempt owning `key` ended (completed, released, or its record deleted).
  void End(const std::string& key);
  // How long the local attempt owning `existing` still runs at `mono_now`; 0 when `existing` is
  // not in flight under an attempt of this process, or its deadline has passed.
  TimeMs LeftMs(const std::string& key, const std::optional<Record>& existing, TimeMs mono_now);
  // Forgets attempts whose deadline passed (ones that never ended: e.g. a failed Complete).
  void Prune(TimeMs mono_now);
  size_t size() const { return attempts_.size(); }

  // What a batch decides takes effect once the batch is durable: Stage* while deciding, then
  // Commit (the write succeeded; also prunes now and then) or Drop (it failed). A staged key is
  // not copied: it must stay valid until Commit or Drop (the writer's ops live until then).
  void StageStart(std::string_view key, uint64_t owner, uint32_t attempt, TimeMs mono_end);
  void StageEnd(std::string_view key);
  void Commit(TimeMs mono_now);
  void Drop() { staged_.clear(); }

 private:
  struct Attempt {
    uint64_t owner = 0;
    uint32_t attempt = 0;
    TimeMs mono_end = 0;
  };
  struct Change {
    std::string_view key;
    bool start = false;  // else: the attempt ended
    Attempt attempt;
  };
  struct KeyHash {  // lets a staged key (a view) find its attempt without a copy
    using is_transparent = void;
    size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
  };
  std::unordered_map<std::string, Attempt, KeyHash, std::equal_to<>> attempts_;
  std::vector<Change> staged_;
  size_t prune_at_ = 1024;  // prune passed attempts once there are more than this many
};

// One write that puts a key back the way a failed batch reported it.
struct ReconcileWrite {
  std::string key;
  WriteAction action = WriteAction::kDelete;  // kPut or kDelete
  Record record;                              // kPut
};

// What a batch did to each key, so that if its write fails (its ops all reported as failed,
// yet its WAL bytes may have landed and be replayed) the store can make the keys agree with the
// reports: a claim reported as failed never happened (the key is free, or back to the record it
// would have taken over); a failed Release or admin Delete is carried out anyway (its caller gave
// up on the record); a failed Complete is left as it is (the owner retries it, and Complete is
// idempotent).
//
// Noting is the common path (every op of every batch) and reconciling the rare one, so Note only
// appends what Reconcile needs, and Reconcile folds the notes by key.
class BatchUndo {
 public:
  enum class Kind { kClaim, kComplete, kReleaseOrDelete };
  void Clear() { notes_.clear(); }
  // An op of `kind` decided to write `action` (`record` for kPut) over `existing` at `now`.
  // `key` is not copied: it must stay valid until Reconcile (the writer's ops live until then).
  void Note(Kind kind, std::string_view key, const std::optional<Record>& existing,
            WriteAction action, const Record& record, TimeMs now);
  // The writes that reconcile the batch if its write failed.
  std::vector<ReconcileWrite> Reconcile() const;

 private:
  struct Noted {
    Kind kind;
    std::string_view key;
    WriteAction action;
    std::optional<Record> before;  // a claim's `existing`, when it is a live in-flight record
    Record record;                 // a Release's or Delete's kPut only
  };
  struct KeyState {
    std::optional<Record> before;        // the live in-flight record the batch found, if any
    bool claimed = false;                // a claim won this key in the batch
    bool completed = false;              // the last non-claim write was a Complete
    std::optional<ReconcileWrite> last;  // the last Release/Delete write
  };
  std::vector<Noted> notes_;
};

}  // namespace idemgate

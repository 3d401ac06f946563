// SPDX-License-Identifier: Apache-2.0
// RocksStore: the embedded Store over RocksDB; one writer thread decides and group-commits.
#include "store/rocks_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/thread_name.h"
#include "store/claim_rules.h"
#include "store/meta_file.h"
#include "store/rocks_options.h"
#include "store/rocks_store_internal.h"
#include "store/store_backup.h"
#include "store/ttl_filter.h"
#include "store/wal_prewrite.h"
#include "store/writer_ledger.h"

namespace idemgate {
namespace {

// One queued operation and, once decided, its result.
struct Op {
  enum class Kind { kClaim, kComplete, kRelease, kDelete };
  Kind kind = Kind::kClaim;
  std::string key;  // the record key
  ClaimRequest claim;
  ClaimToken token;
  StoredResponse response;
  ClaimCallback claim_done;
  StatusCallback status_done;
  ClaimResult claim_result;  // kClaim
  StoreStatus status;        // the others
  // When the op reached the store (stamped as it is queued): what it is decided against, so a
  // writer stalled on the disk decides every op as of its arrival, in arrival order.
  TimeMs arrived_ms = 0;       // wall clock
  TimeMs arrived_mono_ms = 0;  // monotonic clock
};

}  // namespace

class RocksStore final : public Store {
 public:
  RocksStore(const RocksStoreOptions& options, std::unique_ptr<TtlCompactionFilter> filter,
             std::unique_ptr<rocksdb::Env> env, rocksdb::Options db_options,
             std::unique_ptr<rocksdb::DB> db)
      : clock_(options.clock),
        path_(options.path),
        env_(std::move(env)),
        db_options_(std::move(db_options)),
        max_batch_(options.max_batch == 0 ? 1 : options.max_batch),
        on_batch_(options.on_batch),
        filter_(std::move(filter)),
        db_(std::move(db)) {
    write_options_.sync = options.sync;
    write_options_.disableWAL = false;
    writer_ = std::thread([this] { WriterLoop(); });
    NameThread(writer_, "idg-store");
  }
  ~RocksStore() override { Close(); }

  void Claim(ClaimRequest request, ClaimCallback done) override;
  void Complete(ClaimToken token, StoredResponse response, StatusCallback done) override;
  void Release(ClaimToken token, StatusCallback done) override;
  LookupResult Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) override;
  void Delete(const ScopeId& scope, std::string key, StatusCallback done) override;
  uint64_t ApproximateRecords() override;
  StoreStatus GetMeta(std::string_view name, std::optional<std::string>* value) override;
  StoreStatus PutMeta(std::string_view name, std::string_view value) override;
  StoreStatus Checkpoint(const std::string& dir) override {
    std::shared_lock lock(db_mu_);  // a recovery does not swap the database under it
    if (!db_) return {StoreCode::kShutdown, "the store is closed"};
    return WriteRocksCheckpoint(db_.get(), path_, dir);
  }
  StoreStatus FindByKeyHash(std::string_view key_hash, size_t limit,
                            std::vector<KeyHashMatch>* out) override {
    std::shared_lock lock(db_mu_);  // a recovery does not swap the database under the scan
    if (!db_) return {StoreCode::kShutdown, "the store is closed"};
    return ScanRocksKeyHash(db_.get(), clock_->NowMs(), key_hash, limit, out);
  }
  void Close() override;

  rocksdb::DB* db() { return db_.get(); }
  rocksdb::Status CompactAll();

 private:
  void Enqueue(Op&& op);
  void WriterLoop();
  void TakeBatch(std::vector<Op>* batch);
  void RunBatch(std::vector<Op>& batch);
  void Decide(Op& op, TimeMs now, TimeMs now_mono);
  void NoteLocal(const Op& op, WriteAction action, TimeMs now, TimeMs now_mono);
  void FailBatch(std::vector<Op>& batch, const StoreStatus& err);
  StoreStatus ReadRecord(const std::string& key, std::optional<Record>* record);
  StoreStatus Apply(const std::string& key, WriteAction action, const Record& record);
  uint64_t NewOwner();
  void Recover();
  bool Reconcile();
  static void Report(Op& op);

  const Clock* clock_;
  const std::string path_;
  const std::unique_ptr<rocksdb::Env> env_;  // the WAL prewrite's, or null; outlives db_
  const rocksdb::Options db_options_;
  const size_t max_batch_;
  const std::function<void(size_t, int64_t)> on_batch_;  // after each group commit
  std::unique_ptr<TtlCompactionFilter> filter_;  // outlives db_ (declared first)
  std::unique_ptr<rocksdb::DB> db_;
  std::shared_mutex db_mu_;  // shared: readers of db_; exclusive: Close destroying it

  std::mutex mu_;  // guards queue_, closed_, stopping_
  std::condition_variable cv_;
  std::vector<Op> queue_;
  bool closed_ = false;
  bool stopping_ = false;
  std::thread writer_;

  // Writer thread only.
  rocksdb::WriteBatch batch_;
  // What this batch wrote so far, by record key (a view of the op's key, valid while the batch
  // runs; cleared before the next): the encoded record, or nullopt for a delete. A later op of
  // the same batch decides against this, not against the DB. (A WriteBatchWithIndex did this with
  // a skiplist of its own per batch, ~1.9k instructions per op.)
  std::unordered_map<std::string_view, std::optional<std::string>> written_;
  rocksdb::WriteOptions write_options_;
  rocksdb::ReadOptions read_options_;
  std::mt19937_64 rng_{std::random_device{}()};
  bool need_resume_ = false;
  LocalAttempts local_;                    // attempts this process runs (monotonic leases)
  BatchUndo undo_;                         // this batch's, for when its write fails
  std::vector<ReconcileWrite> reconcile_;  // a failed batch's, written before any other op
  std::atomic<uint64_t> records_estimate_{0};
};

void RocksStore::Claim(ClaimRequest request, ClaimCallback done) {
  Op op;
  op.kind = Op::Kind::kClaim;
  op.key = MakeRecordKey(request.scope, request.key);
  op.claim = std::move(request);
  op.claim_done = std::move(done);
  Enqueue(std::move(op));
}

void RocksStore::Complete(ClaimToken token, StoredResponse response, StatusCallback done) {
  Op op;
  op.kind = Op::Kind::kComplete;
  op.key = token.record_key;
  op.token = std::move(token);
  op.response = std::move(response);
  op.status_done = std::move(done);
  Enqueue(std::move(op));
}

void RocksStore::Release(ClaimToken token, StatusCallback done) {
  Op op;
  op.kind = Op::Kind::kRelease;
  op.key = token.record_key;
  op.token = std::move(token);
  op.status_done = std::move(done);
  Enqueue(std::move(op));
}

void RocksStore::Delete(const ScopeId& scope, std::string key, StatusCallback done) {
  Op op;
  op.kind = Op::Kind::kDelete;
  op.key = MakeRecordKey(scope, key);
  op.status_done = std::move(done);
  Enqueue(std::move(op));
}

LookupResult RocksStore::Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) {
  LookupResult out;
  std::string value;
  {
    // Never wait: while the writer swaps the DB after a fault (Recover), the event loop calling
    // this must not block; kError sends the caller to Claim, which reports the store's state.
    std::shared_lock lock(db_mu_, std::try_to_lock);
    if (!lock.owns_lock() || !db_) {
      out.outcome = LookupOutcome::kError;
      return out;
    }
    rocksdb::ReadOptions read;
    // kNoWait: memtables and block cache only
    if (mode == LookupMode::kNoWait) read.read_tier = rocksdb::kBlockCacheTier;
    rocksdb::Status s = db_->Get(read, MakeRecordKey(scope, key), &value);
    if (s.IsNotFound()) return out;
    if (s.IsIncomplete()) {
      out.outcome = LookupOutcome::kNotCached;
      return out;
    }
    if (!s.ok()) {
      out.outcome = LookupOutcome::kError;
      return out;
    }
  }
  std::optional<Record> record = DecodeRecord(value);
  out.now_ms = clock_->NowMs();
  if (!record.has_value()) {
    out.outcome = LookupOutcome::kError;
  } else if (!record->ExpiredAt(out.now_ms)) {
    out.outcome = LookupOutcome::kFound;
    out.record = std::move(*record);
  }
  return out;
}

uint64_t RocksStore::ApproximateRecords() {
  std::shared_lock lock(db_mu_, std::try_to_lock);  // never wait for a recovery
  uint64_t n = 0;
  if (lock.owns_lock() && db_ && db_->GetIntProperty("rocksdb.estimate-num-keys", &n)) {
    records_estimate_ = n;
  }
  return records_estimate_;
}

// Start-up only (see store.h): files beside the database (meta_file.h).
StoreStatus RocksStore::GetMeta(std::string_view name, std::optional<std::string>* value) {
  return ReadMetaFile(path_, name, value);
}

StoreStatus RocksStore::PutMeta(std::string_view name, std::string_view value) {
  return WriteMetaFile(path_, name, value);
}

void RocksStore::Close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    stopping_ = true;
  }
  cv_.notify_one();
  // Called from a callback (the writer thread itself): the destructor finishes the job.
  if (std::this_thread::get_id() == writer_.get_id()) return;
  if (writer_.joinable()) writer_.join();
  if (!reconcile_.empty()) {  // the writer is gone: reading its state is safe
    LogF(LogLevel::kWarn, "store",
         "closing with %zu key(s) of a failed write not reconciled; a claim reported as failed "
         "may block its key until its lease ends",
         reconcile_.size());
  }
  std::unique_lock lock(db_mu_);
  if (db_) {
    db_->Close();
    db_.reset();
  }
}

rocksdb::Status RocksStore::CompactAll() {
  std::shared_lock lock(db_mu_);
  if (!db_) return rocksdb::Status::ShutdownInProgress();
  rocksdb::CompactRangeOptions o;
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  return db_->CompactRange(o, nullptr, nullptr);
}

void RocksStore::Enqueue(Op&& op) {
  {
    std::unique_lock lock(mu_);
    if (!closed_) {
      op.arrived_ms = clock_->NowMs();  // under mu_: arrival order is queue order
      op.arrived_mono_ms = clock_->MonotonicMs();
      // The writer sleeps only on an empty queue: the op that makes it non-empty wakes it, and
      // the ops queued behind it (until the writer takes the queue) spare a futex syscall each.
      bool was_empty = queue_.empty();
      queue_.push_back(std::move(op));
      lock.unlock();
      if (was_empty) cv_.notify_one();
      return;
    }
  }
  StoreStatus shutdown{StoreCode::kShutdown, "store is closed"};
  op.claim_result.status = shutdown;
  op.status = shutdown;
  Report(op);
}

void RocksStore::WriterLoop() {
  std::vector<Op> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping, and everything queued is done
      TakeBatch(&batch);
    }
    RunBatch(batch);
    batch.clear();
  }
}

void RocksStore::TakeBatch(std::vector<Op>* batch) {
  if (queue_.size() <= max_batch_) {
    batch->swap(queue_);  // queue_ inherits the old batch's capacity
    return;
  }
  auto end = queue_.begin() + static_cast<std::ptrdiff_t>(max_batch_);
  batch->assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(end));
  queue_.erase(queue_.begin(), end);
}

// Decides every op against the DB plus the batch, writes once, then reports every result.
void RocksStore::RunBatch(std::vector<Op>& batch) {
  if (need_resume_) Recover();
  if (!db_ || need_resume_) {
    return FailBatch(batch, {StoreCode::kIoError, db_ ? "recovering from a failed write"
                                                      : "database is not open (reopen failed)"});
  }
  batch_.Clear();
  written_.clear();
  undo_.Clear();  // (local_ has nothing staged: each batch ends in Commit or Drop)
  const TimeMs now = clock_->NowMs();
  const TimeMs now_mono = clock_->MonotonicMs();
  for (Op& op : batch) Decide(op, now, now_mono);
  if (batch_.Count() > 0) {
    auto start = std::chrono::steady_clock::now();
    rocksdb::Status s = db_->Write(write_options_, &batch_);
    if (on_batch_) {
      on_batch_(batch.size(), std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count());
    }
    if (!s.ok()) {
      // The WAL bytes may have landed even though the write failed (a failed fdatasync): before
      // anyone hears "failed", make the keys agree with that report (see BatchUndo).
      need_resume_ = true;
      reconcile_ = undo_.Reconcile();
      local_.Drop();  // no claim of this batch runs
      Recover();
      return FailBatch(batch, MapStatus(s));
    }
  }
  local_.Commit(now_mono);
  for (Op& op : batch) Report(op);
}

void RocksStore::FailBatch(std::vector<Op>& batch, const StoreStatus& err) {
  for (Op& op : batch) {
    op.claim_result = ClaimResult{};
    op.claim_result.status = err;
    op.status = err;
    Report(op);
  }
}

void RocksStore::Decide(Op& op, TimeMs now, TimeMs now_mono) {
  std::optional<Record> existing;
  StoreStatus read = ReadRecord(op.key, &existing);
  if (!read.ok() && op.kind != Op::Kind::kDelete) {
    op.claim_result.status = read;
    op.status = read;
    return;
  }
  WriteAction action = WriteAction::kNone;
  Record record;
  BatchUndo::Kind undo_kind = BatchUndo::Kind::kReleaseOrDelete;
  switch (op.kind) {
    case Op::Kind::kClaim: {
      ClaimTime time{op.arrived_ms, now, local_.LeftMs(op.key, existing, op.arrived_mono_ms)};
      ClaimDecision d = DecideClaim(existing, op.claim, op.key, time, NewOwner());
      op.claim_result = std::move(d.result);
      action = d.action;
      record = std::move(d.record);
      undo_kind = BatchUndo::Kind::kClaim;
      break;
    }
    case Op::Kind::kComplete: {
      CasDecision d = DecideComplete(existing, op.token, std::move(op.response), now);
      op.status = std::move(d.status);
      action = d.action;
      record = std::move(d.record);
      undo_kind = BatchUndo::Kind::kComplete;
      break;
    }
    case Op::Kind::kRelease: {  // expired as of its arrival: any claim queued after may take over
      CasDecision d = DecideRelease(existing, op.token, op.arrived_ms);
      op.status = std::move(d.status);
      action = d.action;
      record = std::move(d.record);
      break;
    }
    case Op::Kind::kDelete:
      action = WriteAction::kDelete;
      break;
  }
  StoreStatus applied = Apply(op.key, action, record);
  if (!applied.ok()) {  // nothing of this op is in the batch: it must not report success
    op.claim_result = ClaimResult{};
    op.claim_result.status = applied;
    op.status = applied;
    return;
  }
  undo_.Note(undo_kind, op.key, existing, action, record, op.arrived_ms);
  NoteLocal(op, action, now, now_mono);
}

// A winning claim starts a local attempt; a Complete, Release or Delete that writes ends it.
void RocksStore::NoteLocal(const Op& op, WriteAction action, TimeMs now, TimeMs now_mono) {
  if (action == WriteAction::kNone) return;
  if (op.kind != Op::Kind::kClaim) return local_.StageEnd(op.key);
  const ClaimToken& t = op.claim_result.token;
  local_.StageStart(op.key, t.owner, t.attempt, now_mono + t.lease_left_ms);
}

StoreStatus RocksStore::ReadRecord(const std::string& key, std::optional<Record>* record) {
  rocksdb::PinnableSlice pinned;
  std::string_view value;
  if (auto it = written_.find(key); it != written_.end()) {
    if (!it->second.has_value()) return {};  // deleted earlier in this batch
    value = *it->second;
  } else {
    rocksdb::Status s = db_->Get(read_options_, db_->DefaultColumnFamily(), key, &pinned);
    if (s.IsNotFound()) return {};
    if (!s.ok()) return MapStatus(s);
    value = std::string_view(pinned.data(), pinned.size());
  }
  *record = DecodeRecord(value);
  if (!record->has_value()) return {StoreCode::kCorruption, "stored record does not decode"};
  return {};
}

// `key` is the op's own, alive until the batch is reported (written_ keeps a view of it).
StoreStatus RocksStore::Apply(const std::string& key, WriteAction action, const Record& record) {
  rocksdb::Status s;
  std::optional<std::string> value;
  if (action == WriteAction::kPut) {
    value = EncodeRecord(record);
    s = batch_.Put(key, *value);
  } else if (action == WriteAction::kDelete) {
    s = batch_.Delete(key);
  } else {
    return {};
  }
  if (s.ok()) written_[key] = std::move(value);
  return MapStatus(s);
}

// After a failed write: Resume() clears retryable errors; errors RocksDB deems fatal (a failed
// WAL append or sync) need the DB closed and reopened, which replays the WAL. Then the failed
// batch is reconciled. If any step fails, the next batch fails with an error and we try again
// before the one after. Lookup must not see the DB meanwhile (a reopened DB may hold a failed
// claim until it is reconciled): it gets kError and the caller goes through Claim.
void RocksStore::Recover() {
  std::unique_lock lock(db_mu_);
  if (!db_ || !db_->Resume().ok()) {
    if (db_) {
      db_->Close();
      db_.reset();
    }
    rocksdb::DB* raw = nullptr;
    if (!rocksdb::DB::Open(db_options_, path_, &raw).ok()) return;
    db_.reset(raw);
  }
  if (Reconcile()) need_resume_ = false;
}

// Writes the failed batch's reconciling writes (synced); true when there is nothing left to do.
bool RocksStore::Reconcile() {
  if (reconcile_.empty()) return true;
  rocksdb::WriteBatch wb;
  for (const ReconcileWrite& w : reconcile_) {
    rocksdb::Status s =
        w.action == WriteAction::kPut ? wb.Put(w.key, EncodeRecord(w.record)) : wb.Delete(w.key);
    if (!s.ok()) return false;
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (!db_->Write(sync, &wb).ok()) return false;
  reconcile_.clear();
  return true;
}

uint64_t RocksStore::NewOwner() {
  uint64_t owner = 0;
  while (owner == 0) owner = rng_();  // 0 marks "no owner" and must never match
  return owner;
}

void RocksStore::Report(Op& op) {
  if (op.kind == Op::Kind::kClaim) {
    if (op.claim_done) op.claim_done(std::move(op.claim_result));
  } else if (op.status_done) {
    op.status_done(std::move(op.status));
  }
}

std::unique_ptr<Store> OpenRocksStoreWithEnv(const RocksStoreOptions& options, rocksdb::Env* env,
                                             std::string* error) {
  if (options.clock == nullptr || options.path.empty()) {
    if (error) *error = "RocksStore needs a path and a clock";
    return nullptr;
  }
  // Created here so RocksDB does not log a false "error" while it creates the directory.
  std::error_code ignored;
  std::filesystem::create_directories(options.path, ignored);
  LevelLayout layout = LevelLayout::kStatic;
  StoreStatus chosen = ChooseLevelLayout(options.path, &layout);
  if (!chosen.ok()) {
    if (error) *error = "opening " + options.path + ": " + chosen.message;
    return nullptr;
  }
  auto filter = std::make_unique<TtlCompactionFilter>(options.clock);
  rocksdb::Options db_options = MakeDbOptions(env, filter.get(), layout);
  std::unique_ptr<rocksdb::Env> wal_env = WalPrewriteEnvFor(options.path, db_options);
  if (wal_env) db_options.env = wal_env.get();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, &raw);
  if (!s.ok()) {
    if (error) *error = "opening " + options.path + ": " + s.ToString();
    return nullptr;
  }
  return std::make_unique<RocksStore>(options, std::move(filter), std::move(wal_env),
                                      std::move(db_options), std::unique_ptr<rocksdb::DB>(raw));
}

std::unique_ptr<Store> OpenRocksStore(const RocksStoreOptions& options, std::string* error) {
  return OpenRocksStoreWithEnv(options, nullptr, error);
}

rocksdb::DB* RocksStoreDb(Store* store) {
  auto* rocks = dynamic_cast<RocksStore*>(store);
  return rocks == nullptr ? nullptr : rocks->db();
}

rocksdb::Status CompactRocksStore(Store* store) {
  auto* rocks = dynamic_cast<RocksStore*>(store);
  if (rocks == nullptr) return rocksdb::Status::InvalidArgument("not a RocksStore");
  return rocks->CompactAll();
}

}  // namespace idemgate

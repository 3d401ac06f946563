// SPDX-License-Identifier: Apache-2.0
// RocksStore's class, shared by rocks_store.cc (the Store API, called from any thread, and
// opening the database) and rocks_store_writer.cc (the writer thread: batches, decisions, the
// group commit, recovery after a failed write). Internal.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/thread_name.h"
#include "store/claim_rules.h"
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "store/store_backup.h"
#include "store/ttl_filter.h"
#include "store/writer_ledger.h"

namespace idemgate {
namespace rocks {

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

}  // namespace rocks

class RocksStore final : public Store {
 public:
  using Op = rocks::Op;
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
  std::unique_ptr<TtlCompactionFilter> filter_;          // outlives db_ (declared first)
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

}  // namespace idemgate

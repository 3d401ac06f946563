// SPDX-License-Identifier: Apache-2.0
// RocksStore: the embedded Store over RocksDB; one writer thread decides and group-commits
// (rocks_store_writer.cc). Here: the Store API, called from any thread, and opening the database.
#include "store/rocks_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <thread>

#include "common/log.h"
#include "store/meta_file.h"
#include "store/rocks_options.h"
#include "store/rocks_store_impl.h"
#include "store/wal_prewrite.h"

namespace idemgate {

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

// SPDX-License-Identifier: Apache-2.0
// RocksStore's writer thread: it takes the queued ops in batches, decides each against the
// database and the batch, writes the batch once (the group commit), reports every result, and
// recovers after a failed write.
#include <chrono>
#include <cstddef>
#include <iterator>

#include "store/rocks_options.h"
#include "store/rocks_store_impl.h"

namespace idemgate {

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

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// PgStore on its own libevent thread: the queue of statements spread over the connections,
// unknown outcomes sent again, fail-fast while no connection is up, clean-up and count timers,
// and each statement's result turned into the caller's answer.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "store/pg_store_impl.h"

namespace idemgate::pg {

void PgStore::Schedule(event* timer, int64_t ms) {
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  evtimer_add(timer, &tv);
}

void PgStore::Run() {
  for (auto& conn : conns_) conn->Start();
  Schedule(cleanup_, options_.cleanup_interval_ms);
  Schedule(count_, options_.count_interval_ms);
  event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY);
  // Stopped: whatever is left never got a known outcome in time.
  StoreStatus closed = Error(StoreCode::kShutdown, "the store closed before the database answered");
  for (auto& conn : conns_) {
    if (std::unique_ptr<Op> op = conn->TakeOp()) FailOp(*op, closed);
  }
  for (auto& op : queue_) FailOp(*op, closed);
  queue_.clear();
}

void PgStore::OnWake(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<PgStore*>(arg);
  std::vector<std::unique_ptr<Op>> ops;
  bool closing;
  {
    std::lock_guard lock(self->mu_);
    ops.swap(self->inbox_);
    closing = self->closing_;
  }
  for (auto& op : ops) {
    if (self->up_ == 0) {
      FailOp(*op, Error(StoreCode::kIoError, "no PostgreSQL primary is reachable"));
    } else {
      self->queue_.push_back(std::move(op));
    }
  }
  if (closing && !self->stopping_) {
    self->stopping_ = true;
    self->stop_deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDrainMs);
    self->Schedule(self->cleanup_, 50);  // from now on the timer checks whether to stop
  }
  self->Pump();
}

void PgStore::Pump() {
  if (pumping_) return;
  pumping_ = true;
  bool progress = true;
  while (progress && !queue_.empty()) {
    progress = false;
    for (auto& conn : conns_) {
      if (queue_.empty()) break;
      if (!conn->idle()) continue;
      std::unique_ptr<Op> op = std::move(queue_.front());
      queue_.pop_front();
      conn->Send(std::move(op));
      progress = true;
    }
  }
  pumping_ = false;
  MaybeStop();
}

void PgStore::MaybeStop() {
  if (!stopping_) return;
  bool busy = !queue_.empty();
  for (auto& conn : conns_) busy = busy || (conn->up() && !conn->idle());
  if (!busy || std::chrono::steady_clock::now() >= stop_deadline_) event_base_loopbreak(base_);
}

void PgStore::OnCleanupTimer(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<PgStore*>(arg);
  if (self->stopping_) {
    self->MaybeStop();
    return self->Schedule(self->cleanup_, 50);
  }
  if (self->up_ == 0) return self->Schedule(self->cleanup_, self->options_.cleanup_interval_ms);
  auto op = std::make_unique<Op>();
  op->kind = OpKind::kCleanup;
  op->sql = pg::kCleanupSql;
  op->params.Int(self->Offset());
  self->queue_.push_back(std::move(op));
  auto marks = std::make_unique<Op>();
  marks->kind = OpKind::kFenceCleanup;
  marks->sql = pg::kFenceCleanupSql;
  marks->params.Int(self->Offset());
  self->queue_.push_back(std::move(marks));
  self->Pump();
}

void PgStore::OnCountTimer(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<PgStore*>(arg);
  if (self->stopping_) return;
  if (self->up_ == 0) return self->Schedule(self->count_, self->options_.count_interval_ms);
  auto op = std::make_unique<Op>();
  op->kind = OpKind::kCount;
  op->sql = pg::kCountSql;
  self->queue_.push_back(std::move(op));
  self->Pump();
}

// A claim whose row is in flight with an expired lease goes on as kTakeover (SPEC §12 A3: only
// idemgate_take_over may decide it); a takeover that found no row (released, deleted) claims
// again. Same parameters, same owner; bounded, after which the answer is delivered as it is.
bool PgStore::Redirect(std::unique_ptr<Op>& op, PGresult* res) {
  if (PQresultStatus(res) != PGRES_TUPLES_OK || op->hops >= 4) return false;
  if (op->kind == OpKind::kClaim) {
    Record row;
    TimeMs now = 0;
    if (PQntuples(res) != 1 || !pg::DecodeRow(res, 0, &row, &now)) return false;
    if (!pg::NeedsTakeover(row, now, op->fingerprint, op->owner)) return false;
    op->kind = OpKind::kTakeover;
    op->sql = pg::kTakeoverSql;
  } else if (op->kind == OpKind::kTakeover && PQntuples(res) == 0) {
    op->kind = OpKind::kClaim;
    op->sql = pg::kClaimSql;
  } else {
    return false;
  }
  ++op->hops;
  queue_.push_front(std::move(op));
  return true;
}

void PgStore::Deliver(Op& op, PGresult* res) {
  ExecStatusType st = PQresultStatus(res);
  bool ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
  int affected = atoi(PQcmdTuples(res));
  if (op.kind == OpKind::kFenceCleanup) {
    if (!ok)
      LogF(LogLevel::kError, "store", "fence clean-up failed: %s", PQresultErrorMessage(res));
    return;
  }
  if (op.kind == OpKind::kCleanup) {
    if (!ok) LogF(LogLevel::kError, "store", "clean-up failed: %s", PQresultErrorMessage(res));
    bool more = ok && affected >= pg::kCleanupBatch && !stopping_;
    return Schedule(cleanup_, more ? 0 : options_.cleanup_interval_ms);
  }
  if (op.kind == OpKind::kCount) {
    if (ok && PQntuples(res) == 1 && PQgetlength(res, 0, 0) == 8) {
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(PQgetvalue(res, 0, 0)[i]);
      records_ = v;
    }
    return Schedule(count_, options_.count_interval_ms);
  }
  if (!ok) return FailOp(op, Error(StoreCode::kIoError, PQresultErrorMessage(res)));
  Record row;
  TimeMs now = 0;
  switch (op.kind) {
    case OpKind::kClaim:
      if (PQntuples(res) != 1 || !pg::DecodeRow(res, 0, &row, &now)) {
        return FailOp(op, Error(StoreCode::kCorruption, "the claim returned no readable row"));
      }
      return op.claim_done(
          pg::ClaimFromRow(row, now, op.fingerprint, op.owner, std::move(op.record_key)));
    case OpKind::kTakeover: {
      if (PQntuples(res) != 1 || !pg::DecodeRow(res, 0, &row, &now)) {
        return FailOp(op, Error(StoreCode::kCorruption, "the takeover returned no readable row"));
      }
      ClaimResult r =
          pg::ClaimFromRow(row, now, op.fingerprint, op.owner, std::move(op.record_key));
      if (r.outcome == ClaimOutcome::kTakeover) r.fenced_attempt = pg::FencedAttempt(res, 0);
      return op.claim_done(std::move(r));
    }
    case OpKind::kComplete:
      return op.status_done(affected == 1 ? StoreStatus{} : Stale());
    case OpKind::kRelease:
      return op.status_done(affected == 1 || op.retry ? StoreStatus{} : Stale());
    case OpKind::kDelete:
      return op.status_done(StoreStatus{});
    case OpKind::kGetMeta:
    case OpKind::kPutMeta: {
      std::optional<std::string> value;
      if (PQntuples(res) == 1) {
        value.emplace(PQgetvalue(res, 0, 0), static_cast<size_t>(PQgetlength(res, 0, 0)));
      }
      return op.meta_done(StoreStatus{}, std::move(value));
    }
    case OpKind::kLookup: {
      LookupResult r;
      r.outcome = LookupOutcome::kMiss;
      if (PQntuples(res) == 1) {
        r.outcome =
            pg::DecodeRow(res, 0, &r.record, &now) ? LookupOutcome::kFound : LookupOutcome::kError;
        r.now_ms = now;
      }
      return op.lookup_done(std::move(r));
    }
    case OpKind::kKeyHash:
      return DeliverKeyHash(op, res);
    default:
      return;
  }
}

void PgStore::DeliverKeyHash(Op& op, PGresult* res) {
  std::vector<KeyHashMatch> matches;
  if (PQnfields(res) != 15) {
    return op.key_hash_done(Error(StoreCode::kCorruption, "the lookup returned other columns"), {});
  }
  for (int row = 0; row < PQntuples(res); ++row) {
    KeyHashMatch m;
    TimeMs now = 0;
    std::string_view scope(PQgetvalue(res, row, 13), PQgetlength(res, row, 13));
    if (!pg::DecodeRow(res, row, &m.record, &now) || scope.size() != m.scope.size()) {
      return op.key_hash_done(Error(StoreCode::kCorruption, "a record's row does not read"), {});
    }
    std::memcpy(m.scope.data(), scope.data(), scope.size());
    m.key.assign(PQgetvalue(res, row, 14), PQgetlength(res, row, 14));
    matches.push_back(std::move(m));
  }
  op.key_hash_done(StoreStatus{}, std::move(matches));
}

}  // namespace idemgate::pg

// PgStore: a queue of statements on the store's libevent thread, spread over several libpq
// connections. A statement whose outcome is unknown (its connection broke, or its commit's
// replication wait was cancelled) is sent again until known: every statement here is safe to
// repeat with the same owner token. While no connection is up, new work fails at once (503).
#include "store/pg_store.h"

#include <event2/event.h>
#include <event2/thread.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "store/pg_conn.h"
#include "store/pg_schema.h"

namespace idemgate {
namespace {

using pg::Op;
using pg::OpKind;
using pg::ResultPtr;

constexpr int64_t kDrainMs = 10'000;  // Close() waits this long for unknown outcomes

uint64_t NewOwner() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  uint64_t v;
  do v = rng();
  while (v == 0);
  return v;
}

StoreStatus Error(StoreCode code, std::string message) { return {code, std::move(message)}; }

void FailOp(Op& op, StoreStatus status) {
  if (op.claim_done) {
    ClaimResult r;
    r.status = std::move(status);
    op.claim_done(std::move(r));
  } else if (op.status_done) {
    op.status_done(std::move(status));
  } else if (op.lookup_done) {
    LookupResult r;
    r.outcome = LookupOutcome::kError;
    op.lookup_done(std::move(r));
  } else if (op.meta_done) {
    op.meta_done(std::move(status), std::nullopt);
  }
}

class PgStore final : public Store, public pg::ConnListener {
 public:
  explicit PgStore(PgStoreOptions options) : options_(std::move(options)) {}
  ~PgStore() override { Close(); }

  void Start(uint64_t records) {
    records_ = records;
    base_ = event_base_new();
    wake_ = event_new(base_, -1, 0, &PgStore::OnWake, this);
    cleanup_ = evtimer_new(base_, &PgStore::OnCleanupTimer, this);
    count_ = evtimer_new(base_, &PgStore::OnCountTimer, this);
    for (int i = 0; i < options_.connections; ++i) {
      conns_.push_back(std::make_unique<pg::Conn>(base_, options_.dsn, this));
    }
    thread_ = std::thread([this] { Run(); });
  }

  // Start-up: new work fails at once while no connection is up, so wait for the first one.
  bool WaitUntilUp(std::chrono::milliseconds timeout) {
    return first_up_.get_future().wait_for(timeout) == std::future_status::ready;
  }

  void Claim(ClaimRequest request, ClaimCallback done) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kClaim;
    op->sql = pg::kClaimSql;
    op->owner = NewOwner();
    op->fingerprint = request.fingerprint;
    op->record_key = MakeRecordKey(request.scope, request.key);
    ScopeKey(op.get(), request.scope, request.key);
    op->params.Bytes(std::string_view(reinterpret_cast<const char*>(request.fingerprint.data()),
                                      request.fingerprint.size()));
    op->params.Int(static_cast<int64_t>(op->owner));
    op->params.Int(request.lease_ms);
    op->params.Int(request.ttl_ms);
    op->params.Int(Offset());
    op->claim_done = std::move(done);
    Submit(std::move(op));
  }

  void Complete(ClaimToken token, StoredResponse response, StatusCallback done) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kComplete;
    op->sql = pg::kCompleteSql;
    op->status_done = std::move(done);
    if (!TokenParams(op.get(), token)) return FailOp(*op, Closed() ? ShutdownStatus() : Stale());
    op->params.Int(token.attempt);
    op->params.Int(static_cast<int64_t>(token.owner));
    op->params.Int(response.status);
    op->params.Bytes(response.reason);
    op->params.Bytes(pg::EncodeHeaders(response.headers));
    op->params.Bytes(response.body);
    op->params.Bool(false);  // $9: set when the statement is sent again
    Submit(std::move(op));
  }

  void Release(ClaimToken token, StatusCallback done) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kRelease;
    op->status_done = std::move(done);
    if (!TokenParams(op.get(), token)) return FailOp(*op, Closed() ? ShutdownStatus() : Stale());
    if (token.attempt <= 1) {
      op->sql = pg::kReleaseFirstSql;
      op->params.Int(static_cast<int64_t>(token.owner));
    } else {
      op->sql = pg::kReleaseTakeoverSql;
      op->params.Int(token.attempt);
      op->params.Int(static_cast<int64_t>(token.owner));
      op->params.Int(Offset());
    }
    Submit(std::move(op));
  }

  LookupResult Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) override {
    LookupResult result;
    result.outcome = LookupOutcome::kNotCached;  // no cache: the event loops go through Claim
    if (mode == LookupMode::kNoWait) return result;
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kLookup;
    op->sql = pg::kLookupSql;
    ScopeKey(op.get(), scope, key);
    op->params.Int(Offset());
    std::promise<LookupResult> p;
    std::future<LookupResult> f = p.get_future();
    op->lookup_done = [&p](LookupResult r) { p.set_value(std::move(r)); };
    Submit(std::move(op));
    return f.get();
  }

  void Delete(const ScopeId& scope, std::string key, StatusCallback done) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kDelete;
    op->sql = pg::kDeleteSql;
    ScopeKey(op.get(), scope, key);
    op->status_done = std::move(done);
    Submit(std::move(op));
  }

  StoreStatus GetMeta(std::string_view name, std::optional<std::string>* value) override {
    return Meta(pg::kGetMetaSql, name, std::nullopt, value);
  }

  StoreStatus PutMeta(std::string_view name, std::string_view value) override {
    return Meta(pg::kPutMetaSql, name, value, nullptr);
  }

  uint64_t ApproximateRecords() override { return records_.load(); }

  void Close() override {
    {
      std::lock_guard lock(mu_);
      if (closing_) {
        if (!thread_.joinable()) return;
      }
      closing_ = true;
    }
    if (base_ != nullptr) event_active(wake_, EV_READ, 0);
    if (thread_.joinable()) thread_.join();
    conns_.clear();
    for (event* e : {wake_, cleanup_, count_}) {
      if (e != nullptr) event_free(e);
    }
    wake_ = cleanup_ = count_ = nullptr;
    if (base_ != nullptr) event_base_free(base_);
    base_ = nullptr;
  }

  // ConnListener, on the store's thread.
  void OnUp(pg::Conn*) override {
    if (up_++ == 0) fprintf(stderr, "idemgate store: connected to PostgreSQL\n");
    if (!announced_up_) {
      announced_up_ = true;
      first_up_.set_value();
    }
    Pump();
  }

  void OnDown(pg::Conn*, std::unique_ptr<Op> op, const std::string& why) override {
    if (--up_ == 0) fprintf(stderr, "idemgate store: lost PostgreSQL: %s\n", why.c_str());
    if (op != nullptr) Requeue(std::move(op));
    if (up_ == 0) FailFreshOps("no PostgreSQL primary is reachable: " + why);
    Pump();
  }

  void OnDone(pg::Conn*, std::unique_ptr<Op> op, ResultPtr result, bool unknown) override {
    if (unknown) {
      fprintf(stderr, "idemgate store: replication wait cancelled; sending the statement again\n");
      Requeue(std::move(op));
    } else {
      Deliver(*op, result.get());
    }
    Pump();
  }

 private:
  static StoreStatus Stale() {
    return Error(StoreCode::kStaleClaim, "claim was taken over or is gone");
  }

  static StoreStatus ShutdownStatus() { return Error(StoreCode::kShutdown, "the store is closed"); }

  bool Closed() {
    std::lock_guard lock(mu_);
    return closing_;
  }

  int64_t Offset() const {
    return options_.clock_offset_ms == nullptr ? 0 : options_.clock_offset_ms->load();
  }

  static void ScopeKey(Op* op, const ScopeId& scope, std::string_view key) {
    op->params.Bytes(std::string_view(reinterpret_cast<const char*>(scope.data()), scope.size()));
    op->params.Bytes(key);
  }

  static bool TokenParams(Op* op, const ClaimToken& token) {
    std::string_view scope, key;
    if (token.owner == 0 || !pg::SplitRecordKey(token.record_key, &scope, &key)) return false;
    op->params.Bytes(scope);
    op->params.Bytes(key);
    return true;
  }

  void Submit(std::unique_ptr<Op> op) {
    {
      std::lock_guard lock(mu_);
      if (!closing_) {
        inbox_.push_back(std::move(op));
        event_active(wake_, EV_READ, 0);
        return;
      }
    }
    FailOp(*op, ShutdownStatus());
  }

  void Requeue(std::unique_ptr<Op> op) {
    op->retry = true;
    if (op->kind == OpKind::kComplete) op->params.SetBool(8, true);
    queue_.push_front(std::move(op));
  }

  void FailFreshOps(const std::string& why) {
    std::deque<std::unique_ptr<Op>> keep;
    for (auto& op : queue_) {
      if (op->retry) {
        keep.push_back(std::move(op));
      } else {
        FailOp(*op, Error(StoreCode::kIoError, why));
      }
    }
    queue_ = std::move(keep);
  }

  // Start-up only: blocks the caller until the database answered.
  StoreStatus Meta(const char* sql, std::string_view name, std::optional<std::string_view> put,
                   std::optional<std::string>* got) {
    if (name.empty() || name.size() > kMaxMetaName) {
      return Error(StoreCode::kIoError, "a meta name is 1 to 16 bytes");
    }
    auto op = std::make_unique<Op>();
    op->kind = put ? OpKind::kPutMeta : OpKind::kGetMeta;
    op->sql = sql;
    op->params.Bytes(name);
    if (put) op->params.Bytes(*put);
    std::promise<StoreStatus> p;
    std::future<StoreStatus> f = p.get_future();
    op->meta_done = [&p, got](StoreStatus s, std::optional<std::string> v) {
      if (got != nullptr) *got = std::move(v);
      p.set_value(std::move(s));
    };
    Submit(std::move(op));
    return f.get();
  }

  void Deliver(Op& op, PGresult* res);
  void Pump();
  void Run();
  void MaybeStop();
  static void OnWake(evutil_socket_t, short, void* arg);
  static void OnCleanupTimer(evutil_socket_t, short, void* arg);
  static void OnCountTimer(evutil_socket_t, short, void* arg);
  void Schedule(event* timer, int64_t ms);

  PgStoreOptions options_;
  std::mutex mu_;
  bool closing_ = false;                     // guarded by mu_
  std::vector<std::unique_ptr<Op>> inbox_;   // guarded by mu_
  std::deque<std::unique_ptr<Op>> queue_;    // the store's thread only
  std::vector<std::unique_ptr<pg::Conn>> conns_;
  int up_ = 0;
  bool announced_up_ = false;
  std::promise<void> first_up_;
  bool pumping_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_deadline_;
  std::atomic<uint64_t> records_{0};
  event_base* base_ = nullptr;
  event* wake_ = nullptr;
  event* cleanup_ = nullptr;
  event* count_ = nullptr;
  std::thread thread_;
};


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

void PgStore::Deliver(Op& op, PGresult* res) {
  ExecStatusType st = PQresultStatus(res);
  bool ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
  int affected = atoi(PQcmdTuples(res));
  if (op.kind == OpKind::kCleanup) {
    if (!ok) fprintf(stderr, "idemgate store: clean-up failed: %s", PQresultErrorMessage(res));
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
        r.outcome = pg::DecodeRow(res, 0, &r.record, &now) ? LookupOutcome::kFound
                                                            : LookupOutcome::kError;
      }
      return op.lookup_done(std::move(r));
    }
    default:
      return;
  }
}

}  // namespace

std::unique_ptr<Store> OpenPgStore(const PgStoreOptions& options, std::string* error) {
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });
  if (options.dsn.empty() || options.connections < 1) {
    *error = "store.postgres: dsn and connections >= 1 are required";
    return nullptr;
  }
  uint64_t records = 0;
  if (!pg::PrepareSchema(options.dsn, &records, error)) return nullptr;
  auto store = std::make_unique<PgStore>(options);
  store->Start(records);
  if (!store->WaitUntilUp(std::chrono::seconds(10))) {
    *error = "PostgreSQL accepted the schema connection but no store connection came up";
    return nullptr;
  }
  return store;
}

}  // namespace idemgate

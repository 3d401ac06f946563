// SPDX-License-Identifier: Apache-2.0
// PgStore's class, shared by pg_store.cc (the Store API, called from any thread) and
// pg_store_loop.cc (the store's libevent thread: queue, connections, results). Internal.
#pragma once

#include <event2/event.h>

#include <chrono>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/thread_name.h"
#include "store/pg_conn.h"
#include "store/pg_store.h"

namespace idemgate::pg {

inline constexpr int64_t kDrainMs = 10'000;  // Close() waits this long for unknown outcomes

uint64_t NewOwner();  // random, never 0
inline StoreStatus Error(StoreCode code, std::string message) { return {code, std::move(message)}; }
void FailOp(Op& op, StoreStatus status);  // reports the failure through the op's callback

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
    NameThread(thread_, "idg-store-pg");
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
    op->params.Bool(false);    // $9: set when the statement is sent again
    op->params.Int(Offset());  // $10: the clock offset, for completed_ms
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
    std::promise<LookupResult> p;
    std::future<LookupResult> f = p.get_future();
    LookupAsync(scope, std::string(key), [&p](LookupResult r) { p.set_value(std::move(r)); });
    return f.get();
  }

  void LookupAsync(const ScopeId& scope, std::string key, LookupCallback done) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kLookup;
    op->sql = pg::kLookupSql;
    ScopeKey(op.get(), scope, key);
    op->params.Int(Offset());
    op->lookup_done = std::move(done);
    Submit(std::move(op));
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

  // The admin thread only: blocks until the database answered (an index read, kKeyHashSql).
  StoreStatus FindByKeyHash(std::string_view key_hash, size_t limit,
                            std::vector<KeyHashMatch>* out) override {
    if (key_hash.size() != 16 ||
        key_hash.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
      return Error(StoreCode::kIoError, "key_hash must be 16 hex digits");
    }
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kKeyHash;
    op->sql = pg::kKeyHashSql;
    op->params.Text(key_hash);
    op->params.Int(static_cast<int64_t>(limit));
    op->params.Int(Offset());
    std::promise<StoreStatus> p;
    std::future<StoreStatus> f = p.get_future();
    op->key_hash_done = [&p, out](StoreStatus s, std::vector<KeyHashMatch> matches) {
      *out = std::move(matches);
      p.set_value(std::move(s));
    };
    Submit(std::move(op));
    return f.get();
  }

  uint64_t ApproximateRecords() override { return records_.load(); }
  bool Shared() const override { return true; }

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
  void OnUp(pg::Conn* conn) override {
    // The server is named on the first connection, and whenever one comes up on another server
    // than the last (after a failover, a multi-host dsn moves to the new primary).
    const std::string server = conn->Server();
    const bool first = up_++ == 0;
    if (!server_.empty() && server != server_) {
      LogF(LogLevel::kWarn, "store", "connected to PostgreSQL at %s (was %s: a failover?)",
           server.c_str(), server_.c_str());
    } else if (first) {
      LogF(LogLevel::kInfo, "store", "connected to PostgreSQL at %s", server.c_str());
    }
    server_ = server;
    if (!announced_up_) {
      announced_up_ = true;
      first_up_.set_value();
    }
    Pump();
  }

  void OnDown(pg::Conn*, std::unique_ptr<Op> op, const std::string& why) override {
    if (--up_ == 0) LogF(LogLevel::kError, "store", "lost PostgreSQL: %s", why.c_str());
    if (op != nullptr) Requeue(std::move(op));
    if (up_ == 0) FailFreshOps("no PostgreSQL primary is reachable: " + why);
    Pump();
  }

  void OnDone(pg::Conn*, std::unique_ptr<Op> op, ResultPtr result, bool unknown) override {
    if (!unknown && Redirect(op, result.get())) return Pump();
    if (unknown) {
      IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store",
                           "replication wait cancelled; sending the statement again");
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
  void DeliverKeyHash(Op& op, PGresult* res);
  bool Redirect(std::unique_ptr<Op>& op, PGresult* res);  // pg_store_loop.cc
  void Pump();
  void Run();
  void MaybeStop();
  static void OnWake(evutil_socket_t, short, void* arg);
  static void OnCleanupTimer(evutil_socket_t, short, void* arg);
  static void OnCountTimer(evutil_socket_t, short, void* arg);
  void Schedule(event* timer, int64_t ms);

  PgStoreOptions options_;
  std::mutex mu_;
  bool closing_ = false;                    // guarded by mu_
  std::vector<std::unique_ptr<Op>> inbox_;  // guarded by mu_
  std::deque<std::unique_ptr<Op>> queue_;   // the store's thread only
  std::vector<std::unique_ptr<pg::Conn>> conns_;
  int up_ = 0;
  std::string server_;  // "HOST:PORT" of the last connection that came up
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

}  // namespace idemgate::pg

// SPDX-License-Identifier: Apache-2.0
// One libpq connection driven without blocking by the store's libevent loop: connects (and
// reconnects, following a multi-host DSN), runs one statement at a time, and tells its listener
// when it is up, when a statement finished, and when it broke (with the statement whose outcome
// is then unknown).
#pragma once

#include <event2/event.h>
#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/pg_sql.h"
#include "store/store.h"

namespace idemgate::pg {

enum class OpKind {
  kClaim,
  kComplete,
  kRelease,
  kLookup,
  kDelete,
  kCleanup,
  kCount,
  kGetMeta,
  kPutMeta,
  kTakeover,      // a claim that found an expired lease: idemgate_take_over (SPEC §12 A3)
  kFenceCleanup,  // fence marks of records that are gone
  kKeyHash,       // the admin's lookup by key_hash
};

// One statement and what to do with its result.
struct Op {
  OpKind kind = OpKind::kClaim;
  const char* sql = nullptr;
  Params params;
  bool retry = false;  // sent before, outcome unknown: the statement is idempotent, send again
  ClaimCallback claim_done;
  StatusCallback status_done;
  std::function<void(LookupResult)> lookup_done;
  std::function<void(StoreStatus, std::optional<std::string>)> meta_done;
  std::function<void(StoreStatus, std::vector<KeyHashMatch>)> key_hash_done;
  Fingerprint fingerprint{};  // kClaim
  uint64_t owner = 0;         // kClaim
  std::string record_key;     // kClaim
  int hops = 0;               // kClaim <-> kTakeover redirections so far (bounded)
};

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

class Conn;

class ConnListener {
 public:
  virtual ~ConnListener() = default;
  virtual void OnUp(Conn* conn) = 0;
  // The statement finished; `unknown`: the server warned that its commit may not be replicated
  // (a cancelled synchronous-replication wait), so its outcome must be found out again.
  virtual void OnDone(Conn* conn, std::unique_ptr<Op> op, ResultPtr result, bool unknown) = 0;
  // The connection broke; `op` (may be null) was sent and its outcome is unknown.
  virtual void OnDown(Conn* conn, std::unique_ptr<Op> op, const std::string& why) = 0;
};

class Conn {
 public:
  Conn(event_base* base, std::string dsn, ConnListener* listener);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  void Start();  // begins connecting; reconnects by itself after a failure, with backoff
  bool up() const { return state_ == State::kIdle || state_ == State::kBusy; }
  // "HOST:PORT" of the server this connection reached (of a multi-host dsn, the one it chose).
  std::string Server() const;
  bool idle() const { return state_ == State::kIdle; }
  void Send(std::unique_ptr<Op> op);                       // only when idle()
  std::unique_ptr<Op> TakeOp() { return std::move(op_); }  // at shutdown

 private:
  enum class State { kDown, kConnecting, kPreparing, kIdle, kBusy };
  static void OnEvent(evutil_socket_t fd, short what, void* arg);
  static void OnTimer(evutil_socket_t fd, short what, void* arg);
  static void OnNotice(void* arg, const PGresult* res);
  void Watch(short what);
  void Poll();
  void Flush();
  void Read();
  void Fail(std::string why);  // closes; reports down if it was up; schedules a reconnect
  void Finish();
  void PrepareNext();  // kPreparing: the next statement, or up once all are prepared

  event_base* base_;
  std::string dsn_;
  ConnListener* listener_;
  State state_ = State::kDown;
  PGconn* pg_ = nullptr;
  event* ev_ = nullptr;
  evutil_socket_t ev_fd_ = -1;
  short ev_what_ = 0;
  event* timer_ = nullptr;
  int backoff_ms_ = 50;
  std::unique_ptr<Op> op_;
  ResultPtr result_;
  bool replication_warning_ = false;
  size_t prepared_ = 0;  // statements prepared on this connection so far
};

// True for an error that means the connection or the server went away (SQLSTATE 08xxx, 57Pxx,
// or a read-only transaction on a demoted primary): the statement's outcome is unknown.
bool IsConnectionError(const PGresult* result);

}  // namespace idemgate::pg

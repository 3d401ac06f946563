// SPDX-License-Identifier: Apache-2.0
// One non-blocking libpq connection on the store's libevent loop.
#include "store/pg_conn.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace idemgate::pg {
namespace {

constexpr int kMaxBackoffMs = 1000;
constexpr int kConnectTimeoutMs = 5000;

timeval Ms(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

bool IsConnectionError(const PGresult* result) {
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  if (state == nullptr) return true;  // libpq's own error: the connection failed
  return std::strncmp(state, "08", 2) == 0 || std::strncmp(state, "57P", 3) == 0 ||
         std::strcmp(state, "25006") == 0 || std::strcmp(state, "40001") == 0 ||
         std::strcmp(state, "40P01") == 0;
}

Conn::Conn(event_base* base, std::string dsn, ConnListener* listener)
    : base_(base), dsn_(std::move(dsn)), listener_(listener) {
  timer_ = evtimer_new(base_, &Conn::OnTimer, this);
}

Conn::~Conn() {
  if (ev_ != nullptr) event_free(ev_);
  if (timer_ != nullptr) event_free(timer_);
  if (pg_ != nullptr) PQfinish(pg_);
}

std::string Conn::Server() const {
  if (pg_ == nullptr) return "?";
  const char* host = PQhost(pg_);
  const char* port = PQport(pg_);
  std::string out = host != nullptr && *host != '\0' ? host : "localhost";
  if (out.find(':') != std::string::npos) out = "[" + out + "]";
  return out + ":" + (port != nullptr && *port != '\0' ? port : "5432");
}

void Conn::Start() {
  state_ = State::kConnecting;
  pg_ = PQconnectStart(dsn_.c_str());
  if (pg_ == nullptr || PQstatus(pg_) == CONNECTION_BAD) {
    return Fail(pg_ == nullptr ? "out of memory" : PQerrorMessage(pg_));
  }
  timeval tv = Ms(kConnectTimeoutMs);
  evtimer_add(timer_, &tv);  // a host that never answers
  Watch(EV_WRITE);
}

void Conn::Watch(short what) {
  evutil_socket_t fd = PQsocket(pg_);
  // While connecting, Poll has dropped the event (libpq may have changed sockets, even to one
  // with the same number that epoll had forgotten), so it is registered anew each step.
  if (ev_ != nullptr && fd == ev_fd_ && what == ev_what_) return;
  if (ev_ != nullptr) event_free(ev_);
  ev_ = event_new(base_, fd, what | EV_PERSIST, &Conn::OnEvent, this);
  ev_fd_ = fd;
  ev_what_ = what;
  event_add(ev_, nullptr);
}

void Conn::OnEvent(evutil_socket_t, short what, void* arg) {
  auto* c = static_cast<Conn*>(arg);
  if (c->state_ == State::kConnecting) return c->Poll();
  if ((what & EV_WRITE) && (c->state_ == State::kBusy || c->state_ == State::kPreparing)) {
    c->Flush();
  }
  if ((what & EV_READ) && c->pg_ != nullptr) c->Read();
}

void Conn::OnTimer(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<Conn*>(arg);
  if (c->state_ == State::kConnecting) return c->Fail("connection attempt timed out");
  if (c->state_ == State::kDown) c->Start();
}

void Conn::Poll() {
  // PQconnectPoll may close its socket to try the next host, and another thread's accept() may
  // be given that number at once: the event on it goes first, so no epoll_ctl ever names a
  // descriptor that is no longer ours. Watch registers the one libpq waits on next.
  if (ev_ != nullptr) {
    event_free(ev_);
    ev_ = nullptr;
  }
  switch (PQconnectPoll(pg_)) {
    case PGRES_POLLING_READING:
      return Watch(EV_READ);
    case PGRES_POLLING_WRITING:
      return Watch(EV_WRITE);
    case PGRES_POLLING_OK:
      break;
    default:
      return Fail(PQerrorMessage(pg_));
  }
  evtimer_del(timer_);
  if (PQsetnonblocking(pg_, 1) != 0) return Fail(PQerrorMessage(pg_));
  PQsetNoticeReceiver(pg_, &Conn::OnNotice, this);
  state_ = State::kPreparing;
  prepared_ = 0;
  PrepareNext();
}

void Conn::PrepareNext() {
  const std::vector<Statement>& all = Statements();
  if (prepared_ == all.size()) {
    backoff_ms_ = 50;
    state_ = State::kIdle;
    Watch(EV_READ);
    return listener_->OnUp(this);
  }
  const Statement& st = all[prepared_];
  if (!PQsendPrepare(pg_, PreparedName(st.sql), st.sql, static_cast<int>(st.types.size()),
                     st.types.data())) {
    return Fail(PQerrorMessage(pg_));
  }
  Flush();
}

void Conn::OnNotice(void* arg, const PGresult* res) {
  auto* c = static_cast<Conn*>(arg);
  const char* msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
  if (msg == nullptr) return;
  // "canceling wait for synchronous replication ...": committed locally, maybe not replicated.
  if (std::strstr(msg, "synchronous replication") != nullptr) c->replication_warning_ = true;
}

void Conn::Send(std::unique_ptr<Op> op) {
  op_ = std::move(op);
  state_ = State::kBusy;
  replication_warning_ = false;
  result_.reset();
  Params& p = op_->params;
  p.Finish();
  if (!PQsendQueryPrepared(pg_, PreparedName(op_->sql), p.count(), p.values(), p.lengths(),
                           p.formats(), /*resultFormat=*/1)) {
    return Fail(PQerrorMessage(pg_));
  }
  Flush();
}

void Conn::Flush() {
  int r = PQflush(pg_);
  if (r < 0) return Fail(PQerrorMessage(pg_));
  Watch(r == 1 ? EV_READ | EV_WRITE : EV_READ);
}

void Conn::Read() {
  if (!PQconsumeInput(pg_)) return Fail(PQerrorMessage(pg_));
  while ((state_ == State::kBusy || state_ == State::kPreparing) && !PQisBusy(pg_)) {
    PGresult* r = PQgetResult(pg_);
    if (r == nullptr) return Finish();
    if (result_ == nullptr) {
      result_.reset(r);
    } else {
      PQclear(r);
    }
  }
  if (PQstatus(pg_) == CONNECTION_BAD) Fail(PQerrorMessage(pg_));
}

void Conn::Finish() {
  ResultPtr result = std::move(result_);
  if (state_ == State::kPreparing) {
    if (result == nullptr || PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
      return Fail(result ? PQresultErrorMessage(result.get()) : "no result to PREPARE");
    }
    ++prepared_;
    return PrepareNext();
  }
  if (result == nullptr ||
      (PQresultStatus(result.get()) == PGRES_FATAL_ERROR && IsConnectionError(result.get()))) {
    return Fail(result ? PQresultErrorMessage(result.get()) : "no result");
  }
  state_ = State::kIdle;
  bool unknown = replication_warning_;
  listener_->OnDone(this, std::move(op_), std::move(result), unknown);
}

void Conn::Fail(std::string why) {
  bool was_up = up();
  if (ev_ != nullptr) {
    event_free(ev_);
    ev_ = nullptr;
  }
  if (pg_ != nullptr) PQfinish(pg_);
  pg_ = nullptr;
  result_.reset();
  state_ = State::kDown;
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  timeval tv = Ms(backoff_ms_);
  backoff_ms_ = std::min(backoff_ms_ * 2, kMaxBackoffMs);
  evtimer_add(timer_, &tv);
  if (was_up) listener_->OnDown(this, std::move(op_), why);
}

}  // namespace idemgate::pg

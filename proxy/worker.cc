// SPDX-License-Identifier: Apache-2.0
// One event-loop thread: accept, own connections and exchanges, run store results posted back.
#include "proxy/worker.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/thread_name.h"
#include "proxy/conn/client_conn.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/report.h"
#include "proxy/net/event_loop.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/metrics.h"

namespace idemgate {

namespace {

constexpr int64_t kAcceptPauseMinMs = 100;
constexpr int64_t kAcceptPauseMaxMs = 1'000;
LogLimiter accept_error_log(1);  // one line a second; the next says how many were held back
LogLimiter max_connections_log(1);
LogLimiter unsent_budget_log(1);

std::string PeerIp(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

// A non-blocking stream socket bound to `addr`:`port`, listening when `reuse_port` (SO_REUSEPORT,
// so every worker has its own listener); a bare bound socket otherwise (the probe below).
evutil_socket_t BindSocket(const HostPort& addr, uint16_t port, bool reuse_port,
                           std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  const char* host = addr.host.empty() ? nullptr : addr.host.c_str();
  if (int rc = getaddrinfo(host, port_text.c_str(), &hints, &res); rc != 0) {
    *error = "cannot resolve listen address '" + addr.host + "': " + gai_strerror(rc);
    return -1;
  }
  evutil_socket_t fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            (!reuse_port || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0) &&
            bind(fd, res->ai_addr, res->ai_addrlen) == 0 && (!reuse_port || listen(fd, 1024) == 0);
  int err = errno;
  freeaddrinfo(res);
  if (!ok) {
    *error = "cannot listen on " + addr.host + ":" + port_text + ": " + strerror(err);
    if (fd >= 0) close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Store operations still running when the grace period ends get this much longer: a claim or a
// completion is never cut (an attempt's answer must be stored), but a stalled store must not
// keep the process from exiting forever.
constexpr int64_t kStoreGraceMs = 5'000;

class EventLoopTimer final : public LoopTimer {
 public:
  EventLoopTimer(event_base* base, std::function<void()> fn) : fn_(std::move(fn)) {
    timer_.Init<EventLoopTimer, &EventLoopTimer::Fire>(base, this);
  }
  void Arm(int64_t ms) override { timer_.Arm(ms); }
  void Cancel() override { timer_.Cancel(); }

 private:
  void Fire() { fn_(); }
  std::function<void()> fn_;
  Timer timer_;
};

}  // namespace

// SO_REUSEPORT would let a second process join the port silently (same user), and the kernel
// would split the connections between two gateways with two stores: one key executed once per
// instance. A socket bound WITHOUT SO_REUSEPORT fails with EADDRINUSE while anyone listens on
// the address (SO_REUSEADDR still lets it pass connections in TIME_WAIT).
bool CheckListenAddressFree(const HostPort& addr, std::string* error) {
  if (addr.port == 0) return true;  // a port the kernel picks is nobody else's
  std::string why;
  evutil_socket_t probe = BindSocket(addr, addr.port, /*reuse_port=*/false, &why);
  if (probe >= 0) {
    close(probe);
    return true;
  }
  if (errno != EADDRINUSE) {
    *error = why;
    return false;
  }
  *error = "listen.address " + addr.host + ":" + std::to_string(addr.port) +
           " is already in use by another process (another idemgate?); two gateways on one "
           "address would split the traffic between two stores, so one key could execute once "
           "per instance. Stop the other process or choose another listen.address.";
  return false;
}

Worker::Worker(int index, Gateway* gateway) : index_(index), gateway_(gateway) {}

Worker::~Worker() {
  // Exchanges and connections refer to the loop and the pool: free them first.
  conns_.clear();
  exchanges_.clear();
  dead_conns_.clear();
  dead_exchanges_.clear();
  accept_pause_.Reset();  // frees its event while the loop still exists
  grace_timer_.Reset();
  hard_stop_timer_.Reset();
  linger_timer_.Reset();
  listeners_.clear();
  groups_.clear();
  upstream_.reset();
  mailbox_ev_.reset();
  wake_ev_.reset();
  reaper_.reset();
  base_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool Worker::Init(std::string* error) {
  if (gateway_->metrics && index_ < gateway_->metrics->shard_count()) {
    metrics_ = &gateway_->metrics->shard(index_);
  }
  // Only the loop's own thread touches this base (other threads hand work over through Post,
  // which wakes the loop with an eventfd), so it runs without libevent's lock: no lock and
  // unlock around every event_add, event_del and event_active of every request.
  event_config* loop_config = event_config_new();
  if (loop_config != nullptr) event_config_set_flag(loop_config, EVENT_BASE_FLAG_NOLOCK);
  base_.reset(loop_config != nullptr ? event_base_new_with_config(loop_config) : nullptr);
  if (loop_config != nullptr) event_config_free(loop_config);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!base_ || wake_fd_ < 0) {
    *error = "cannot create an event loop";
    return false;
  }
  mailbox_ev_.reset(
      event_new(base_.get(), -1, 0, &EventTrampoline<Worker, &Worker::DrainMailbox>, this));
  wake_ev_.reset(event_new(base_.get(), wake_fd_, EV_READ | EV_PERSIST,
                           &EventTrampoline<Worker, &Worker::OnWake>, this));
  event_add(wake_ev_.get(), nullptr);
  reaper_.reset(event_new(base_.get(), -1, 0, &EventTrampoline<Worker, &Worker::Reap>, this));
  std::shared_ptr<const Config> config = gateway_->Snapshot();
  auto post = [this](std::function<void()> fn) { Post(std::move(fn)); };
  UpstreamStats* stats = gateway_->metrics ? &gateway_->metrics->upstream_stats() : nullptr;
  upstream_ = std::make_unique<UpstreamGroup>(base_.get(), "", config->upstream,
                                              gateway_->upstream_tls, post, stats);
  if (!upstream_->Init(error)) return false;
  for (const auto& [name, group_config] : config->upstream_groups) {
    auto tls = gateway_->upstream_group_tls.find(name);
    SSL_CTX* ctx = tls == gateway_->upstream_group_tls.end() ? nullptr : tls->second;
    auto group = std::make_unique<UpstreamGroup>(base_.get(), name, group_config, ctx, post, stats);
    if (!group->Init(error)) return false;
    groups_.emplace(name, std::move(group));
  }
  return true;
}

UpstreamGroup* Worker::Group(std::string_view name) {
  if (name.empty() || name == "default") return upstream_.get();
  auto it = groups_.find(name);
  return it == groups_.end() ? nullptr : it->second.get();
}

bool Worker::Listen(const HostPort& addr, uint16_t* bound_port, std::string* error) {
  evutil_socket_t fd = BindSocket(addr, *bound_port, /*reuse_port=*/true, error);
  if (fd < 0) return false;
  return Adopt(fd, bound_port, error);
}

bool Worker::Adopt(evutil_socket_t fd, uint16_t* bound_port, std::string* error) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  evutil_make_socket_nonblocking(fd);
  // Backlog 0: the socket already listens, with BindSocket's 1024, which holds the connections
  // that arrive while a handover has nobody accepting.
  ListenerPtr listener(evconnlistener_new(base_.get(), &Worker::OnAccept, this,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd));
  if (!listener) {
    close(fd);
    *error = "cannot start the listener";
    return false;
  }
  evconnlistener_set_error_cb(listener.get(), &Worker::OnAcceptError);
  listeners_.push_back(std::move(listener));
  listen_fds_.push_back(fd);
  if (!accept_pause_.initialized()) {
    accept_pause_.Init<Worker, &Worker::ResumeAccepting>(base_.get(), this);
  }
  return true;
}

// Recorded when adopted, so that another thread reads no libevent state of this loop.
std::vector<evutil_socket_t> Worker::ListenFds() const { return listen_fds_; }

// accept() failed for a reason retrying at once cannot fix (EMFILE/ENFILE at the descriptor
// limit, ENOBUFS, ENOMEM): the pending connection stays in the backlog and the listener would
// fire again at once, spinning the loop. Stop accepting for a while instead, longer each time
// it keeps failing; connections that close meanwhile free descriptors.
void Worker::OnAcceptError(evconnlistener* listener, void* arg) {
  auto* self = static_cast<Worker*>(arg);
  int err = EVUTIL_SOCKET_ERROR();
  if (self->metrics_) self->metrics_->AcceptError();
  self->accept_backoff_ms_ =
      std::clamp<int64_t>(self->accept_backoff_ms_ * 2, kAcceptPauseMinMs, kAcceptPauseMaxMs);
  LogLimited(accept_error_log, LogLevel::kWarn, "worker",
             "accept() failed: %s; not accepting new connections for %lld ms (the open-file "
             "limit, ulimit -n, must exceed limits.max_connections plus the upstream "
             "connections)",
             strerror(err), static_cast<long long>(self->accept_backoff_ms_));
  evconnlistener_disable(listener);
  self->accept_pause_.Arm(self->accept_backoff_ms_);
}

void Worker::ResumeAccepting() {
  if (draining_) return;
  for (ListenerPtr& listener : listeners_) evconnlistener_enable(listener.get());
}

// limits.max_connections, counted over every worker: false (and counted) past it.
bool Worker::AdmitConnection() {
  int64_t limit = gateway_->Snapshot()->limits.max_connections;
  if (gateway_->open_connections.fetch_add(1, std::memory_order_relaxed) < limit) return true;
  gateway_->open_connections.fetch_sub(1, std::memory_order_relaxed);
  if (metrics_) metrics_->ConnectionRefused();
  LogLimited(max_connections_log, LogLevel::kWarn, "worker",
             "limits.max_connections (%lld) connections are open; closing new ones at once",
             static_cast<long long>(limit));
  return false;
}

void Worker::Start() {
  const int64_t busy_poll_us = gateway_->Snapshot()->server.busy_poll_us;  // restart-only
  thread_ = std::thread([this, busy_poll_us] {
    loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    RunEventLoop(base_.get(), busy_poll_us);
  });
  NameThread(thread_, "idg-worker-" + std::to_string(index_));
}

void Worker::Join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::Post(std::function<void()> fn) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(mailbox_mu_);
    was_empty = mailbox_.empty();
    mailbox_.push_back(std::move(fn));
  }
  // Only the first post after a drain needs to wake the loop (the drain takes everything). The
  // loop's own thread activates the drain directly; any other writes the eventfd (the base has
  // no lock, so only its own thread may call event_active on it).
  if (!was_empty) return;
  if (std::this_thread::get_id() == loop_thread_.load(std::memory_order_relaxed)) {
    event_active(mailbox_ev_.get(), 0, 0);
    return;
  }
  const uint64_t one = 1;
  // Fails only with EAGAIN, when the counter is full: the loop is woken already.
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Worker::OnWake() {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));  // resets the counter
  DrainMailbox();
}

void Worker::DrainMailbox() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mailbox_mu_);
    batch.swap(mailbox_);
  }
  for (auto& fn : batch) fn();
}

void Worker::OnAccept(evconnlistener*, evutil_socket_t fd, sockaddr* sa, int, void* arg) {
  auto* self = static_cast<Worker*>(arg);
  self->accept_backoff_ms_ = 0;  // accept() works again
  if (self->draining_ || !self->AdmitConnection()) {
    close(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SSL* tls = nullptr;
  if (self->gateway_->server_tls != nullptr) {
    tls = SSL_new(self->gateway_->server_tls);
    if (tls == nullptr) {
      self->gateway_->open_connections.fetch_sub(1, std::memory_order_relaxed);
      close(fd);
      return;
    }
  }
  auto conn = std::make_unique<ClientConn>(self, fd, PeerIp(sa), tls);
  ClientConn* raw = conn.get();
  self->conns_.emplace(raw, std::move(conn));
  if (self->metrics_) self->metrics_->ConnectionOpened();
  raw->Start();
}

std::unique_ptr<LoopTimer> Worker::NewTimer(std::function<void()> fn) {
  return std::make_unique<EventLoopTimer>(base_.get(), std::move(fn));
}

int64_t Worker::MonoUs() const {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

void Worker::SendUpstream(std::string request, bool head_request, const UpstreamLimits& limits,
                          UpstreamCallback done) {
  UpstreamGroup* group = Group(limits.group);
  if (group == nullptr) {
    Post([done = std::move(done), result = MissingGroupResult(limits.group)]() mutable {
      done(std::move(result));
    });
    return;
  }
  group->Send(std::move(request), head_request, limits, std::move(done));
}

StreamCall* Worker::SendStream(std::string head, bool head_request, const UpstreamLimits& limits,
                               StreamReceiver* receiver, UpstreamCallback done) {
  UpstreamGroup* group = Group(limits.group);
  if (group == nullptr) return nullptr;
  return group->SendStream(std::move(head), head_request, limits, receiver, std::move(done));
}

Exchange* Worker::NewExchange(ResponseSink* sink, std::shared_ptr<const Config> config,
                              Request request, const std::string& client_ip, bool tls) {
  auto exchange =
      std::make_unique<Exchange>(this, sink, std::move(config), std::move(request), client_ip, tls);
  Exchange* raw = exchange.get();
  exchanges_.emplace(raw, std::move(exchange));
  return raw;
}

void Worker::Finished(Exchange* exchange) {
  auto it = exchanges_.find(exchange);
  if (it == exchanges_.end()) return;
  dead_exchanges_.push_back(std::move(it->second));
  exchanges_.erase(it);
  event_active(reaper_.get(), 0, 0);
}

void Worker::ConnectionClosed(ClientConn* conn, CloseReason reason) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  dead_conns_.push_back(std::move(it->second));
  conns_.erase(it);
  gateway_->open_connections.fetch_sub(1, std::memory_order_relaxed);
  if (metrics_) metrics_->ConnectionClosed(reason);
  event_active(reaper_.get(), 0, 0);
}

void Worker::RecordExchange(const ExchangeSample& sample, const AccessEntry* entry) {
  if (metrics_) metrics_->RecordExchange(sample);
  if (entry != nullptr && gateway_->access_log) {
    access_line_.clear();
    AppendAccessLine(*entry, &access_line_);
    gateway_->access_log->Write(access_line_);
  }
}

void Worker::RecordStoreOp(StoreOp op, int64_t micros) {
  if (metrics_) metrics_->RecordStoreOp(op, micros);
}

void Worker::RecordConnectionError(ErrorCode code, Protocol protocol, std::string_view client_ip,
                                   size_t bytes_out) {
  RequestReport report;
  report.outcome = Outcome::kRejected;
  report.protocol = protocol;
  report.error = code;
  report.status = GetErrorInfo(code).status;
  report.client_ip = client_ip;
  report.bytes_out = bytes_out;
  RecordReport(*this, report);
}

void Worker::RecordAnswerDropped() {
  if (metrics_) metrics_->AnswerDropped();
  LogLimited(unsent_budget_log, LogLevel::kWarn, "worker",
             "limits.max_unsent_bytes (%llu bytes) of answers wait for clients that do not "
             "read; closing the connections of new answers that do not fit",
             static_cast<unsigned long long>(gateway_->Snapshot()->limits.max_unsent_bytes));
}

void Worker::Reap() {
  dead_conns_.clear();
  dead_exchanges_.clear();
  MaybeExit();
}

void Worker::Shutdown(int64_t grace_ms, int64_t idle_linger_ms) {
  Post([this, grace_ms, idle_linger_ms] {
    grace_timer_.Init<Worker, &Worker::CutAtGrace>(base_.get(), this);
    grace_timer_.Arm(grace_ms);
    BeginDrain(idle_linger_ms);
  });
}

void Worker::BeginDrain(int64_t idle_linger_ms) {
  draining_ = true;
  // Closed, not paused: a paused listener's socket would still queue new clients in its backlog,
  // where they hang until the process exits. After a handover the process taking over holds
  // the same sockets, so closing them here leaves their backlog to it.
  listeners_.clear();
  if (idle_linger_ms < 0) {
    CloseIdle();
  } else {
    linger_timer_.Init<Worker, &Worker::MaybeExit>(base_.get(), this);
    linger_timer_.Arm(idle_linger_ms);
  }
  // W3: duplicates waiting for a first answer get their 409 now, well within the grace period.
  std::vector<Exchange*> running;
  for (auto& [raw, owned] : exchanges_) running.push_back(raw);
  for (Exchange* exchange : running) {
    if (exchanges_.count(exchange)) exchange->OnDrain();
  }
  MaybeExit();
}

// Idle connections close now; busy ones after their answer (it says Connection: close).
void Worker::CloseIdle() {
  idle_closed_ = true;
  std::vector<ClientConn*> conns;
  for (auto& [raw, owned] : conns_) conns.push_back(raw);
  for (ClientConn* conn : conns) conn->CloseWhenIdle();
}

// The grace period is over: upstream calls still running end now and their exchanges store an
// indeterminate answer (R4), so a retry after the restart replays it instead of executing again.
void Worker::CutAtGrace() {
  if (!idle_closed_) CloseIdle();
  if (!exchanges_.empty()) {
    LogF(LogLevel::kWarn, "worker", "shutdown grace over: ending %zu requests in progress",
         exchanges_.size());
  }
  upstream_->AbortAll("the gateway shut down before the upstream answered");
  for (auto& [name, group] : groups_) {
    group->AbortAll("the gateway shut down before the upstream answered");
  }
  std::vector<Exchange*> running;
  for (auto& [raw, owned] : exchanges_) running.push_back(raw);
  for (Exchange* exchange : running) {
    if (exchanges_.count(exchange)) exchange->OnShutdown();
  }
  hard_stop_timer_.Init<Worker, &Worker::HardStop>(base_.get(), this);
  hard_stop_timer_.Arm(kStoreGraceMs);
  MaybeExit();
}

// The store did not finish in time either: answer what has not been answered, and leave.
void Worker::HardStop() {
  LogF(LogLevel::kWarn, "worker", "%zu store operations still pending at exit", exchanges_.size());
  for (auto& [raw, owned] : exchanges_) raw->AnswerNow();
  event_base_loopexit(base_.get(), nullptr);
}

void Worker::MaybeExit() {
  if (!draining_ || !exchanges_.empty()) return;
  if (!idle_closed_ && !linger_timer_.armed()) CloseIdle();  // the linger is over
  if (conns_.empty()) event_base_loopexit(base_.get(), nullptr);
}

}  // namespace idemgate

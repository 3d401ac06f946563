// SPDX-License-Identifier: Apache-2.0
// One event-loop thread: its base, listener, client connections, exchanges, upstream pool, and
// the mailbox through which the store's results come back to the loop.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "proxy/conn/client_env.h"
#include "proxy/exchange/exchange_env.h"
#include "proxy/net/event_util.h"
#include "proxy/ops/gateway.h"
#include "proxy/policy/errors.h"
#include "proxy/upstream/upstream.h"
#include "proxy/upstream/upstream_group.h"

namespace idemgate {

class ClientConn;
class Exchange;
class MetricsShard;
struct ExchangeSample;
enum class StoreOp;
enum class CloseReason;

// Start-up check, before any worker binds: false (with *error naming listen.address) when
// another process already listens on `addr`. Port 0 always passes.
bool CheckListenAddressFree(const HostPort& addr, std::string* error);

class Worker final : public ExchangeEnv, public ClientEnv {
 public:
  Worker(int index, Gateway* gateway);
  ~Worker() override;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Creates the loop and the upstream groups. False (with *error) when it cannot.
  bool Init(std::string* error);
  // Binds `addr` with SO_REUSEPORT (port 0 picks one); *bound_port gets the port.
  bool Listen(const HostPort& addr, uint16_t* bound_port, std::string* error);
  // Accepts from `fd` too, a listening socket handed over by the gateway this one replaces
  // (proxy/handover.h); the worker owns it from here on. *bound_port gets its port.
  bool Adopt(evutil_socket_t fd, uint16_t* bound_port, std::string* error);
  // Its listening sockets, for a handover (they stay open; the loop thread may be running).
  std::vector<evutil_socket_t> ListenFds() const;
  void Start();  // runs the loop on its own thread
  void Join();

  // Thread-safe: stop accepting (the listener closes), finish what is in flight, then leave the
  // loop. At `grace_ms` upstream calls still running are cut (their exchanges store an
  // indeterminate answer, R4); store operations get a little longer; then the loop is left.
  // Idle keep-alive connections are closed at once, or with `idle_linger_ms` >= 0 (a handover:
  // the listeners serve on in another process) only once no exchange runs here and that long
  // has passed: meanwhile a request on one is answered with Connection: close, instead of
  // racing the close (the client would have to resend it).
  void Shutdown(int64_t grace_ms, int64_t idle_linger_ms = -1);

  // ExchangeEnv and ClientEnv (Post is thread-safe; the rest runs on the loop).
  void Post(std::function<void()> fn) override;
  std::unique_ptr<LoopTimer> NewTimer(std::function<void()> fn) override;
  int64_t MonoUs() const override;
  const Clock& clock() const override { return *gateway_->clock; }
  Store& store() override { return *gateway_->store; }
  ReplayCache* replay_cache() override { return gateway_->replay_cache; }
  WaitRegistry& waits() override { return *gateway_->waits; }
  void SendUpstream(std::string request, bool head_request, const UpstreamLimits& limits,
                    UpstreamCallback done) override;
  void RecordStoreOp(StoreOp op, int64_t micros) override;
  bool WantsAccessEntry() const override { return gateway_->access_log != nullptr; }
  void RecordExchange(const ExchangeSample& sample, const AccessEntry* entry) override;
  void Finished(Exchange* exchange) override;

  // ClientEnv, for the connections.
  event_base* base() override { return base_.get(); }
  std::shared_ptr<const Config> Snapshot() override { return gateway_->Snapshot(); }
  UnsentBudget* unsent() override { return gateway_->unsent; }
  Exchange* NewExchange(ResponseSink* sink, std::shared_ptr<const Config> config, Request request,
                        const std::string& client_ip, bool tls) override;
  StreamCall* SendStream(std::string head, bool head_request, const UpstreamLimits& limits,
                         StreamReceiver* receiver, UpstreamCallback done) override;
  void RecordConnectionError(ErrorCode code, Protocol protocol, std::string_view client_ip,
                             size_t bytes_out) override;
  void RecordAnswerDropped() override;
  void ConnectionClosed(ClientConn* conn, CloseReason reason) override;

  // The upstream group a route sends to: "" or "default" = [upstream], else [upstreams.NAME];
  // null when the running config has no such group (groups are built at start-up).
  UpstreamGroup* Group(std::string_view name);
  UpstreamGroup& upstream() { return *upstream_; }
  Gateway& gateway() { return *gateway_; }
  bool draining() const override { return draining_; }
  size_t connections() const { return conns_.size(); }

 private:
  static void OnAccept(evconnlistener*, evutil_socket_t fd, sockaddr* sa, int len, void* arg);
  static void OnAcceptError(evconnlistener*, void* arg);
  void ResumeAccepting();
  bool AdmitConnection();
  void DrainMailbox();
  void OnWake();  // another thread posted: the eventfd is readable
  void Reap();
  void BeginDrain(int64_t idle_linger_ms);
  void CloseIdle();
  void CutAtGrace();
  void HardStop();
  void MaybeExit();

  int index_;
  Gateway* gateway_;
  MetricsShard* metrics_ = nullptr;  // this worker's shard of gateway_->metrics
  EventBasePtr base_;
  EventPtr mailbox_ev_;  // activated by the loop's own thread (Post from within the loop)
  EventPtr wake_ev_;     // reads wake_fd_, written by Post from any other thread
  int wake_fd_ = -1;
  std::atomic<std::thread::id> loop_thread_{};
  EventPtr reaper_;
  Timer grace_timer_;
  Timer hard_stop_timer_;
  std::vector<ListenerPtr> listeners_;  // usually one; more after a take-over from more workers
  std::vector<evutil_socket_t> listen_fds_;  // theirs, for ListenFds (set before Start)
  Timer accept_pause_;             // re-enables the listener after an accept() error
  int64_t accept_backoff_ms_ = 0;  // the next pause; grows while accept() keeps failing
  std::unique_ptr<UpstreamGroup> upstream_;  // the default group, [upstream]
  std::map<std::string, std::unique_ptr<UpstreamGroup>, std::less<>> groups_;  // named groups
  std::thread thread_;

  std::mutex mailbox_mu_;
  std::vector<std::function<void()>> mailbox_;

  std::unordered_map<ClientConn*, std::unique_ptr<ClientConn>> conns_;
  std::unordered_map<Exchange*, std::unique_ptr<Exchange>> exchanges_;
  std::vector<std::unique_ptr<ClientConn>> dead_conns_;
  std::vector<std::unique_ptr<Exchange>> dead_exchanges_;
  std::string access_line_;  // reused for each access-log line (no allocation per line)
  bool draining_ = false;
  bool idle_closed_ = false;  // draining, and the idle connections were told to close
  Timer linger_timer_;
};

}  // namespace idemgate

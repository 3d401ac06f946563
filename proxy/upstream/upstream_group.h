// SPDX-License-Identifier: Apache-2.0
// An upstream group, one per worker loop and group: several servers, each with its own
// connection pool. It picks a server for each call (round robin or least connections), takes
// out a server that refuses connections or fails its health check and brings it back, re-resolves
// server names on a schedule, and retries a call on another server only when nothing was sent
// (connect refused or timed out, TLS handshake failed: kUnavailable, SPEC R3). A call that reached
// a server is never retried elsewhere: its outcome (a reset, a timeout) is its result (R4).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "conf/config.h"
#include "proxy/net/event_util.h"
#include "proxy/upstream/upstream.h"
#include "proxy/upstream/upstream_stats.h"

namespace idemgate {

class UpstreamGroup {
 public:
  // Runs a function on this group's loop, from any thread (Worker::Post).
  using Poster = std::function<void(std::function<void()>)>;

  // `tls` (not owned; may be null) for an https group. `stats` (not owned; may be null): where
  // this loop's per-server counters and state go (/metrics, /readyz).
  UpstreamGroup(event_base* base, std::string name, const Config::Upstream& config, SSL_CTX* tls,
                Poster post, UpstreamStats* stats = nullptr);
  ~UpstreamGroup();
  UpstreamGroup(const UpstreamGroup&) = delete;
  UpstreamGroup& operator=(const UpstreamGroup&) = delete;

  // Resolves every server (blocking, at start-up) and starts the health and resolve timers.
  bool Init(std::string* error);

  // As UpstreamPool::Send, on a server of the group; `done` runs exactly once, on the loop.
  void Send(std::string request, bool head_request, const UpstreamLimits& limits,
            UpstreamCallback done);
  // As UpstreamPool::SendStream, on a server of the group; retried on another server as Send is
  // (only when nothing was sent: the head and the body written so far are handed back whole).
  // The StreamCall returned stays valid until `done` ran or it was cancelled.
  StreamCall* SendStream(std::string head, bool head_request, const UpstreamLimits& limits,
                         StreamReceiver* receiver, UpstreamCallback done);
  // Shutdown: calls in progress end now (as UpstreamPool::AbortAll) and are not retried.
  void AbortAll(const std::string& detail);

  const std::string& name() const { return name_; }
  size_t size() const { return servers_.size(); }
  // Servers not taken out (passive or health check) right now.
  size_t servers_up() const;

 private:
  // One address of a configured server: a name that resolves to several addresses is several
  // servers (each with its own pool and state), and one that resolves again may gain or lose some.
  struct Address {
    sockaddr_storage storage{};
    socklen_t len = 0;
    bool operator==(const Address& other) const;
    std::string Text() const;  // numeric, for logs
  };
  struct Server {
    HostPort name;
    Address address;
    std::unique_ptr<UpstreamPool> pool;
    bool gone = false;  // its name no longer resolves to this address: never chosen
    int in_flight = 0;  // calls in progress (least_conn)
    std::chrono::steady_clock::time_point out_until{};  // passive: left out until then
    bool health_down = false;  // the last active check failed: out until one passes
    bool checking = false;     // an active check is in progress
    UpstreamStats::Entry* stats = nullptr;  // may be null
  };
  struct Call;

  // Send and SendStream (`receiver` null: a plain call): a new call, on the server Pick chooses.
  StreamCall* Start(std::string request, bool head_request, const UpstreamLimits& limits,
                    StreamReceiver* receiver, UpstreamCallback done);
  bool Up(const Server& server, std::chrono::steady_clock::time_point now) const;
  bool UpNow(const Server& server) const;
  size_t Pick(size_t start, const std::vector<size_t>& tried) const;
  Call* NewCall();
  void Release(Call* call);
  void Try(Call* call);
  void OnResult(Call* call, UpstreamResult&& result);
  void Finish(Call* call, UpstreamResult&& result);
  void TakeOut(size_t index, const std::string& why);
  void BringBack(size_t index, const char* how);
  void CheckHealth();
  void OnHealth(size_t index, const UpstreamResult& result);
  void Resolve();
  struct Resolved {
    HostPort name;
    std::vector<Address> addresses;  // empty: it did not resolve (see error)
    std::string error;
  };
  static Resolved ResolveName(const HostPort& name);  // blocking
  void AddServer(const HostPort& name, const Address& address);
  void ApplyResolved(const std::vector<Resolved>& resolved);

  event_base* base_;
  std::string name_;
  Config::Upstream config_;
  SSL_CTX* tls_;
  Poster post_;
  UpstreamStats* stats_;
  bool least_conn_;
  std::vector<Server> servers_;
  std::vector<std::unique_ptr<Call>> calls_;  // every call made (as many as ever ran at once)
  std::vector<Call*> free_;                   // those of calls_ that ended, to reuse
  size_t next_ = 0;  // round robin position
  bool aborting_ = false;
  Timer health_timer_;
  Timer resolve_timer_;
  std::thread resolver_;
  bool resolving_ = false;
};

// What a call to a group the running config does not have ends with: a route added by a reload
// names a group the workers do not have (groups are built at start-up). Nothing went upstream.
UpstreamResult MissingGroupResult(const std::string& name);

}  // namespace idemgate

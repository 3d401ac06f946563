// SPDX-License-Identifier: Apache-2.0
// An upstream group: server choice, passive and active health, DNS re-resolution, and the retry
// on another server of a call that never reached one (see upstream_group.h).
#include "proxy/upstream/upstream_group.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"

namespace idemgate {

namespace {
using SteadyClock = std::chrono::steady_clock;

std::string Where(const HostPort& server) {
  return server.host + ":" + std::to_string(server.port);
}

template <typename Server>
std::string Label(const Server& server) {
  std::string address = server.address.Text();
  std::string out = Where(server.name);
  return address == server.name.host ? out : out + " (" + address + ")";
}
}  // namespace

// Owned by the group (calls_), reused once it ended (free_): from Start until `done` is called
// or the client end cancels it, then given back by Release.
struct UpstreamGroup::Call final : StreamCall {
  UpstreamGroup* group = nullptr;
  bool live = false;  // started and not yet ended
  std::string request;
  bool head = false;
  UpstreamLimits limits;
  UpstreamCallback done;
  size_t start = 0;           // the round-robin position it started from
  size_t index = 0;           // the server trying it now
  std::vector<size_t> tried;  // servers that refused it (nothing sent), each tried once
  // A streamed call: the server's call in progress, and what the client end did so far.
  StreamReceiver* receiver = nullptr;
  StreamCall* conn = nullptr;
  bool ended = false;

  void WriteBody(std::string_view prefix, std::string_view data, std::string_view suffix) override {
    if (conn != nullptr) conn->WriteBody(prefix, data, suffix);
  }
  void EndBody() override {
    ended = true;
    if (conn != nullptr) conn->EndBody();
  }
  size_t Unsent() const override { return conn != nullptr ? conn->Unsent() : 0; }
  void PauseResponse(bool paused) override {
    if (conn != nullptr) conn->PauseResponse(paused);
  }
  void Cancel() override {
    if (!live) return;  // its end was given already
    StreamCall* current = conn;
    conn = nullptr;
    if (current != nullptr) {
      --group->servers_[index].in_flight;
      current->Cancel();  // drops the server call's callback: it never reaches this call again
    }
    group->Release(this);
  }
};

UpstreamGroup::UpstreamGroup(event_base* base, std::string name, const Config::Upstream& config,
                             SSL_CTX* tls, Poster post, UpstreamStats* stats)
    : base_(base),
      name_(std::move(name)),
      config_(config),
      tls_(tls),
      post_(std::move(post)),
      stats_(stats),
      least_conn_(config.balance == "least_conn") {
  if (config_.addrs.empty()) config_.addrs.push_back(config_.addr);  // a Config built in code
}

UpstreamGroup::~UpstreamGroup() {
  if (resolver_.joinable()) resolver_.join();
}

bool UpstreamGroup::Address::operator==(const Address& other) const {
  return len == other.len && memcmp(&storage, &other.storage, len) == 0;
}

std::string UpstreamGroup::Address::Text() const {
  char host[NI_MAXHOST] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&storage), len, host, sizeof host, nullptr, 0,
              NI_NUMERICHOST);
  return host;
}

UpstreamGroup::Resolved UpstreamGroup::ResolveName(const HostPort& name) {
  Resolved out;
  out.name = name;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(name.port);
  const int rc = getaddrinfo(name.host.c_str(), port.c_str(), &hints, &res);
  for (addrinfo* ai = rc == 0 ? res : nullptr; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address address;
    memcpy(&address.storage, ai->ai_addr, ai->ai_addrlen);
    address.len = ai->ai_addrlen;
    if (std::find(out.addresses.begin(), out.addresses.end(), address) == out.addresses.end()) {
      out.addresses.push_back(address);
    }
  }
  if (res != nullptr) freeaddrinfo(res);
  if (out.addresses.empty()) {
    out.error = "cannot resolve upstream host '" + name.host +
                "': " + (rc != 0 ? gai_strerror(rc) : "no address");
  }
  return out;
}

void UpstreamGroup::AddServer(const HostPort& name, const Address& address) {
  Server server;
  server.name = name;
  server.address = address;
  server.pool = std::make_unique<UpstreamPool>(
      base_, name, reinterpret_cast<const sockaddr*>(&address.storage), address.len, tls_);
  if (stats_ != nullptr) {
    server.stats = stats_->Add(name_.empty() ? "default" : name_, Where(name), address.Text());
  }
  servers_.push_back(std::move(server));
}

bool UpstreamGroup::Init(std::string* error) {
  for (const HostPort& name : config_.addrs) {
    Resolved resolved = ResolveName(name);
    if (resolved.addresses.empty()) {
      *error = resolved.error;
      if (!name_.empty()) *error += " (upstream group '" + name_ + "')";
      return false;
    }
    for (const Address& address : resolved.addresses) AddServer(name, address);
  }
  if (!config_.health_path.empty()) {
    health_timer_.Init<UpstreamGroup, &UpstreamGroup::CheckHealth>(base_, this);
    health_timer_.Arm(0);
  }
  if (config_.resolve_interval_ms > 0) {
    resolve_timer_.Init<UpstreamGroup, &UpstreamGroup::Resolve>(base_, this);
    resolve_timer_.Arm(config_.resolve_interval_ms);
  }
  return true;
}

bool UpstreamGroup::Up(const Server& server, SteadyClock::time_point now) const {
  return !server.gone && !server.health_down && now >= server.out_until;
}

// As Up, reading the clock only for a server that was taken out (the common case reads none).
bool UpstreamGroup::UpNow(const Server& server) const {
  if (server.out_until == SteadyClock::time_point{}) return !server.gone && !server.health_down;
  return Up(server, SteadyClock::now());
}

size_t UpstreamGroup::servers_up() const {
  const SteadyClock::time_point now = SteadyClock::now();
  return std::count_if(servers_.begin(), servers_.end(),
                       [&](const Server& s) { return Up(s, now); });
}

// The server for a call's next try, SIZE_MAX when every server was tried: the first one up from
// the round-robin position (least_conn: the one up with the fewest calls in progress), else one
// taken out, soonest back first: when every server is out, a call still tries them rather than
// fail without trying. No allocation: this runs for every call.
size_t UpstreamGroup::Pick(size_t start, const std::vector<size_t>& tried) const {
  const size_t n = servers_.size();
  size_t best_up = SIZE_MAX, best_out = SIZE_MAX;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    const Server& s = servers_[i];
    if (s.gone || std::find(tried.begin(), tried.end(), i) != tried.end()) continue;
    if (UpNow(s)) {
      if (!least_conn_) return i;
      if (best_up == SIZE_MAX || s.in_flight < servers_[best_up].in_flight) best_up = i;
    } else if (best_out == SIZE_MAX) {
      best_out = i;
    } else {
      const Server& b = servers_[best_out];
      if (s.health_down != b.health_down ? !s.health_down : s.out_until < b.out_until) {
        best_out = i;
      }
    }
  }
  return best_up != SIZE_MAX ? best_up : best_out;
}

void UpstreamGroup::Send(std::string request, bool head_request, const UpstreamLimits& limits,
                         UpstreamCallback done) {
  Start(std::move(request), head_request, limits, nullptr, std::move(done));
}

StreamCall* UpstreamGroup::SendStream(std::string head, bool head_request,
                                      const UpstreamLimits& limits, StreamReceiver* receiver,
                                      UpstreamCallback done) {
  return Start(std::move(head), head_request, limits, receiver, std::move(done));
}

StreamCall* UpstreamGroup::Start(std::string request, bool head_request,
                                 const UpstreamLimits& limits, StreamReceiver* receiver,
                                 UpstreamCallback done) {
  Call* call = NewCall();
  call->request = std::move(request);
  call->head = head_request;
  call->limits = limits;
  call->done = std::move(done);
  call->receiver = receiver;
  call->start = next_++;
  call->index = Pick(call->start, call->tried);
  Try(call);
  return call;
}

UpstreamGroup::Call* UpstreamGroup::NewCall() {
  if (free_.empty()) {
    calls_.push_back(std::make_unique<Call>());
    calls_.back()->group = this;
    free_.push_back(calls_.back().get());
  }
  Call* call = free_.back();
  free_.pop_back();
  call->live = true;
  return call;
}

// Start sets the rest; `request` went to the server call and `conn` was cleared at the end.
void UpstreamGroup::Release(Call* call) {
  call->live = false;
  call->done = nullptr;  // what it held (its owner's state) is let go now
  call->tried.clear();
  call->ended = false;
  free_.push_back(call);
}

// The server call's callback holds only the call's address (kept in the std::function itself,
// no allocation): the call outlives it, as the server call ends it (OnResult) or is cancelled.
void UpstreamGroup::Try(Call* call) {
  Server& server = servers_[call->index];
  ++server.in_flight;
  if (server.stats != nullptr) server.stats->requests.fetch_add(1, std::memory_order_relaxed);
  UpstreamPool* pool = server.pool.get();
  auto on_result = [call](UpstreamResult&& result) {
    call->group->OnResult(call, std::move(result));
  };
  if (call->receiver != nullptr) {
    call->conn = pool->SendStream(std::move(call->request), call->head, call->limits,
                                  call->receiver, std::move(on_result));
    if (call->ended) call->conn->EndBody();
    return;
  }
  std::string request = std::move(call->request);
  pool->Send(std::move(request), call->head, call->limits, std::move(on_result));
}

// The call's end: given back before `done` runs, which may start another call (and reuse it).
void UpstreamGroup::Finish(Call* call, UpstreamResult&& result) {
  UpstreamCallback done = std::move(call->done);
  Release(call);
  done(std::move(result));
}

void UpstreamGroup::OnResult(Call* call, UpstreamResult&& result) {
  const size_t index = call->index;
  --servers_[index].in_flight;
  call->conn = nullptr;  // that server's call is over (a retry makes another)
  if (UpstreamStats::Entry* stats = servers_[index].stats;
      stats != nullptr && result.error != UpstreamError::kNone) {
    stats->errors[static_cast<size_t>(result.error)].fetch_add(1, std::memory_order_relaxed);
  }
  if (result.error != UpstreamError::kUnavailable) {
    // The server answered, or the request reached it (a reset, a timeout): it takes connections.
    if (servers_[index].out_until != SteadyClock::time_point{}) {
      BringBack(index, "a call reached it");
    }
    return Finish(call, std::move(result));
  }
  // Nothing was sent (R3): the server is taken out, and another one may take the request.
  if (aborting_) return Finish(call, std::move(result));
  TakeOut(index, result.detail);
  call->tried.push_back(index);
  const size_t next = Pick(call->start, call->tried);
  if (next == SIZE_MAX || SteadyClock::now() >= call->limits.deadline) {
    if (servers_.size() > 1) {
      result.detail = "no server of the group could be reached; last: " + Label(servers_[index]) +
                      ": " + result.detail;
    }
    return Finish(call, std::move(result));
  }
  call->index = next;
  call->request = std::move(result.unsent_request);
  Try(call);
}

void UpstreamGroup::TakeOut(size_t index, const std::string& why) {
  Server& server = servers_[index];
  const bool was_up = Up(server, SteadyClock::now());
  server.out_until = SteadyClock::now() + std::chrono::milliseconds(config_.fail_timeout_ms);
  if (server.stats != nullptr) {
    server.stats->out_until_ms.store(
        std::chrono::duration_cast<std::chrono::milliseconds>(server.out_until.time_since_epoch())
            .count(),
        std::memory_order_relaxed);
    if (was_up) {
      server.stats->taken_out.fetch_add(1, std::memory_order_relaxed);
      server.stats->SetReason(why);
    }
  }
  if (was_up) {
    IDEMGATE_LOG_LIMITED(
        LogLevel::kWarn, "upstream", "server %s taken out for %lld ms (nothing was sent): %s",
        Label(server).c_str(), static_cast<long long>(config_.fail_timeout_ms), why.c_str());
  }
}

void UpstreamGroup::BringBack(size_t index, const char* how) {
  Server& server = servers_[index];
  server.out_until = {};
  if (server.stats != nullptr) server.stats->out_until_ms.store(0, std::memory_order_relaxed);
  LogF(LogLevel::kInfo, "upstream", "server %s is back (%s)", Label(server).c_str(), how);
}

// Active checks: GET health_path on every server; a 2xx or 3xx keeps (or brings) it in.
void UpstreamGroup::CheckHealth() {
  health_timer_.Arm(config_.health_interval_ms);
  for (size_t i = 0; i < servers_.size(); ++i) {
    Server& server = servers_[i];
    if (server.checking || server.gone) continue;
    server.checking = true;
    UpstreamLimits limits;
    limits.connect_timeout_ms = config_.connect_timeout_ms;
    limits.response_timeout_ms = std::min(config_.response_timeout_ms, config_.health_interval_ms);
    limits.max_response_body = 64 << 10;
    limits.idle_timeout_ms = config_.idle_timeout_ms;
    // Host: the override, else the server's own name (a bracketed IPv6 literal, with its port).
    const HostPort& name = server.name;
    const std::string host =
        !config_.host.empty()
            ? config_.host
            : (name.host.find(':') != std::string::npos ? "[" + name.host + "]" : name.host) + ":" +
                  std::to_string(name.port);
    std::string request = "GET " + config_.health_path + " HTTP/1.1\r\nHost: " + host +
                          "\r\nUser-Agent: idemgate-health-check\r\nConnection: close\r\n\r\n";
    server.pool->Send(std::move(request), false, limits,
                      [this, i](UpstreamResult&& result) { OnHealth(i, result); });
  }
}

void UpstreamGroup::OnHealth(size_t index, const UpstreamResult& result) {
  Server& server = servers_[index];
  server.checking = false;
  if (aborting_) return;
  const int status = result.error == UpstreamError::kNone ? result.response.status : 0;
  const bool healthy = status >= 200 && status < 400;
  if (healthy && server.health_down) {
    server.health_down = false;
    server.out_until = {};
    if (server.stats != nullptr) {
      server.stats->health_down.store(false, std::memory_order_relaxed);
      server.stats->out_until_ms.store(0, std::memory_order_relaxed);
    }
    LogF(LogLevel::kInfo, "upstream", "server %s is back (health check %s: %d)",
         Label(server).c_str(), config_.health_path.c_str(), status);
  } else if (!healthy && !server.health_down) {
    server.health_down = true;
    const std::string why = "health check " + config_.health_path + " failed: " +
                            (status != 0 ? "status " + std::to_string(status) : result.detail);
    if (server.stats != nullptr) {
      server.stats->SetReason(why);
      server.stats->health_failed.fetch_add(1, std::memory_order_relaxed);
      server.stats->health_down.store(true, std::memory_order_relaxed);
    }
    LogF(LogLevel::kWarn, "upstream", "server %s taken out: %s", Label(server).c_str(),
         why.c_str());
  }
}

// Names are resolved on a thread of their own (getaddrinfo blocks); the addresses come back to
// the loop (ApplyResolved).
void UpstreamGroup::Resolve() {
  resolve_timer_.Arm(config_.resolve_interval_ms);
  if (resolving_ || aborting_) return;
  resolving_ = true;
  if (resolver_.joinable()) resolver_.join();
  resolver_ = std::thread([this, names = config_.addrs] {
    std::vector<Resolved> resolved;
    for (const HostPort& name : names) resolved.push_back(ResolveName(name));
    post_([this, resolved = std::move(resolved)] { ApplyResolved(resolved); });
  });
}

// Each name's servers follow its new addresses: an address it lost is retired (never chosen
// again, its connections not reused), one it gained becomes a server (or returns, when it had
// been retired). A name that does not resolve keeps its addresses.
void UpstreamGroup::ApplyResolved(const std::vector<Resolved>& resolved) {
  resolving_ = false;
  for (const Resolved& r : resolved) {
    if (r.addresses.empty()) {
      IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "upstream", "%s; keeping its last addresses",
                           r.error.c_str());
      continue;
    }
    const size_t count = servers_.size();
    for (size_t i = 0; i < count; ++i) {
      Server& server = servers_[i];
      if (!(server.name == r.name)) continue;
      const bool listed =
          std::find(r.addresses.begin(), r.addresses.end(), server.address) != r.addresses.end();
      if (listed == !server.gone) continue;
      server.gone = !listed;
      if (server.stats != nullptr) server.stats->gone.store(server.gone, std::memory_order_relaxed);
      if (server.gone) server.pool->Retire();
      LogF(LogLevel::kInfo, "upstream", "server %s %s address %s", Where(r.name).c_str(),
           server.gone ? "no longer resolves to" : "resolves again to",
           server.address.Text().c_str());
    }
    for (const Address& address : r.addresses) {
      const bool known = std::any_of(servers_.begin(), servers_.end(), [&](const Server& s) {
        return s.name == r.name && s.address == address;
      });
      if (known) continue;
      AddServer(r.name, address);
      LogF(LogLevel::kInfo, "upstream", "server %s resolves to a new address: %s",
           Where(r.name).c_str(), address.Text().c_str());
    }
  }
}

void UpstreamGroup::AbortAll(const std::string& detail) {
  aborting_ = true;
  health_timer_.Cancel();
  resolve_timer_.Cancel();
  for (Server& server : servers_) server.pool->AbortAll(detail);
}

UpstreamResult MissingGroupResult(const std::string& name) {
  UpstreamResult result;
  result.error = UpstreamError::kUnavailable;
  result.detail = "no upstream group '" + name + "' is running (named groups are restart-only)";
  return result;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Server's half of the handover (proxy/handover.h): taking the listeners over from the running
// gateway (--take-over), and handing this gateway's listeners to its successor.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/log.h"
#include "proxy/server.h"
#include "proxy/service_manager.h"
#include "store/clock.h"
#include "store/store_factory.h"

namespace idemgate {
namespace {

// The store the old gateway closed is free at once; a little patience covers its exit when it
// went away without saying "closed" (the lock is released when its process ends).
constexpr auto kStoreLockPatience = std::chrono::seconds(5);
// Past the old gateway's own bound on its drain (grace plus the store's 5 s), waiting more for
// it to close the store would only hide a hung process.
constexpr int64_t kCloseSlackMs = 10'000;

}  // namespace

bool Server::ReceiveListeners(const Config& config, std::string* error) {
  std::string path = HandoverSocketPath(config);
  if (path.empty()) {
    *error = "--take-over needs server.handover_socket, which is \"off\"";
    return false;
  }
  takeover_ = std::make_unique<HandoverClient>();
  if (!takeover_->Connect(path, error) || !takeover_->SendLine("take-over", error) ||
      !takeover_->Receive(&taken_, error)) {
    return false;
  }
  const HostPort& want = config.listen.addr;
  if (taken_.listen_host != want.host || (want.port != 0 && want.port != taken_.listen_port)) {
    LogF(LogLevel::kWarn, "main",
         "listen.address is now %s:%u, the running gateway's %s:%u: binding it afresh (the old "
         "address closes with the old gateway)",
         want.host.c_str(), want.port, taken_.listen_host.c_str(), taken_.listen_port);
    for (int fd : taken_.listen_fds) close(fd);
    taken_.listen_fds.clear();
    if (!CheckListenAddressFree(want, error)) return false;
  }
  const HostPort& admin = config.admin.addr;
  if (taken_.admin_fd >= 0 && (config.admin.address.empty() || taken_.admin_host != admin.host ||
                               (admin.port != 0 && admin.port != taken_.admin_port))) {
    Log(LogLevel::kWarn, "main",
        "admin.address differs from the running gateway's: binding it afresh");
    close(taken_.admin_fd);
    taken_.admin_fd = -1;
  }
  LogF(LogLevel::kInfo, "main",
       "taking over from the running gateway (pid %d): %zu listeners on "
       "%s:%u%s",
       static_cast<int>(taken_.pid), taken_.listen_fds.size(), taken_.listen_host.c_str(),
       taken_.listen_port, taken_.admin_fd >= 0 ? " and the admin listener" : "");
  return true;
}

bool Server::StopOldGateway(bool wait_closed, std::string* error) {
  const int64_t start = MonotonicNowMs();
  // Under systemd (Type=notify) this process is the service's main one from now on: the old
  // one's exit must not look like the service's end.
  NotifyServiceManager("MAINPID=" + std::to_string(getpid()));
  if (!takeover_->SendLine("stop", error)) {
    if (wait_closed) return false;
    LogF(LogLevel::kWarn, "main", "the old gateway was gone already: %s", error->c_str());
    return true;
  }
  if (!wait_closed) {
    LogF(LogLevel::kInfo, "main", "serving; the old gateway (pid %d) drains and exits",
         static_cast<int>(taken_.pid));
    takeover_.reset();
    return true;
  }
  if (!takeover_->WaitClosed(taken_.grace_ms + 5'000 + kCloseSlackMs, error)) return false;
  takeover_.reset();
  LogF(LogLevel::kInfo, "main",
       "the old gateway (pid %d) drained and closed the store in %lld ms; opening it",
       static_cast<int>(taken_.pid), static_cast<long long>(MonotonicNowMs() - start));
  return true;
}

std::unique_ptr<Store> Server::OpenTakenOverStore(const Config& config, const StoreHooks& hooks,
                                                  std::string* error) {
  auto deadline = std::chrono::steady_clock::now() + kStoreLockPatience;
  for (;;) {
    std::unique_ptr<Store> store = OpenStore(config, hooks, error);
    if (store || std::chrono::steady_clock::now() >= deadline) return store;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Server::OpenHandoverSocket(const Config& config) {
  std::string path = HandoverSocketPath(config);
  if (path.empty()) return;
  std::string error;
  if (!handover_.Open(path, &error)) {
    LogF(LogLevel::kWarn, "main", "%s; a later --take-over will not find this gateway",
         error.c_str());
  }
}

void Server::WatchHandoverSocket(event_base* base) {
  if (handover_.fd() < 0) return;
  handover_ev_.reset(
      event_new(base, handover_.fd(), EV_READ | EV_PERSIST, &Server::OnHandoverConnect, this));
  event_add(handover_ev_.get(), nullptr);
  child_ev_.reset(evsignal_new(base, SIGCHLD, &Server::OnChild, this));
  evsignal_add(child_ev_.get(), nullptr);
}

void Server::ControlPeer::Reset() {
  ev.reset();
  if (fd >= 0) close(fd);
  fd = -1;
}

void Server::OnHandoverConnect(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  std::string why;
  int peer = self->handover_.Accept(&why);
  if (peer < 0) {
    LogF(LogLevel::kWarn, "main", "handover socket: %s", why.c_str());
    return;
  }
  if (self->handing_over_) {
    close(peer);
    return;
  }
  // One peer that has not spoken yet at a time: a newer one replaces it (one that connected
  // and never spoke must not block every later take-over).
  self->pending_.Reset();
  self->pending_.fd = peer;
  self->pending_.ev.reset(
      event_new(self->main_base_, peer, EV_READ | EV_PERSIST, &Server::OnControlRead, self));
  event_add(self->pending_.ev.get(), nullptr);
}

// Each side says one short line at a time, and waits for the answer: one read holds it.
void Server::OnControlRead(evutil_socket_t fd, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  char buf[256];
  ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);  // accepted non-blocking
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  std::string line = n > 0 ? std::string(buf, n) : std::string();
  if (fd == self->pending_.fd) {
    self->OnPendingLine(line);
  } else if (fd == self->taker_.fd) {
    if (n != 0 && line.find("stop\n") == std::string::npos) return;
    self->OnTakerRead(n > 0);
  } else if (fd == self->upgrade_.fd && n <= 0) {
    self->upgrade_.Reset();  // the operator gave up waiting; the upgrade goes on
  }
}

void Server::OnPendingLine(const std::string& line) {
  if (line == "pid\n") {  // which gateway answers here (`idemgate --upgrade` waits for its own)
    std::string reply = "pid " + std::to_string(getpid()) + "\n";
    send(pending_.fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    pending_.Reset();
  } else if (line == "take-over\n" && taker_.fd < 0) {
    std::swap(taker_, pending_);
    OfferListeners();
  } else if (line == "upgrade\n" && taker_.fd < 0 && successor_ < 0) {
    std::swap(upgrade_, pending_);
    StartSuccessor();
  } else {
    if (!line.empty()) {
      const char busy[] = "failed: a take-over of this gateway is already under way\n";
      send(pending_.fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL);
    }
    pending_.Reset();
  }
}

void Server::OfferListeners() {
  std::shared_ptr<const Config> config = gateway_.Snapshot();
  HandoverOffer offer;
  offer.pid = getpid();
  offer.listen_host = config->listen.addr.host;
  offer.listen_port = listen_port_;
  for (auto& worker : workers_) {
    for (int fd : worker->ListenFds()) offer.listen_fds.push_back(fd);
  }
  if (admin_) {
    offer.admin_host = config->admin.addr.host;
    offer.admin_fd = admin_->listen_fd();
    offer.admin_port = admin_port_;
  }
  offer.grace_ms = config->server.shutdown_grace_ms;
  std::string why;
  if (!SendOffer(taker_.fd, offer, &why)) {
    taker_.Reset();
    LogF(LogLevel::kWarn, "main", "handover: %s", why.c_str());
    return;
  }
  Log(LogLevel::kInfo, "main",
      "handed the listeners to a gateway taking over; serving until it says stop");
}

// `idemgate --upgrade`: the successor is this process's child, so it runs where this one does
// (the service's cgroup under systemd), from the binary now at the path this one started from.
void Server::StartSuccessor() {
  std::string error;
  successor_ = SpawnSuccessor(StartedBinaryPath(), config_path_, &error);
  std::string reply =
      successor_ > 0 ? "spawned " + std::to_string(successor_) + "\n" : "failed: " + error + "\n";
  send(upgrade_.fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  if (successor_ < 0) {
    upgrade_.Reset();
    LogF(LogLevel::kError, "main", "upgrade: %s", error.c_str());
    return;
  }
  LogF(LogLevel::kInfo, "main", "upgrade: started %s --take-over (pid %d)",
       StartedBinaryPath().c_str(), static_cast<int>(successor_));
}

void Server::OnTakerRead(bool stop) {
  if (stop) {
    handing_over_ = true;
    taker_.ev.reset();     // the connection stays open for "closed"
    handover_ev_.reset();  // no second successor
    upgrade_.Reset();      // its successor is taking over; it watches the socket's path
    Log(LogLevel::kInfo, "main",
        "a new gateway took over the listeners: draining "
        "(server.shutdown_grace), then closing the store and exiting");
    event_base_loopbreak(main_base_);
    return;
  }
  Log(LogLevel::kWarn, "main",
      "the take-over was abandoned (its process failed or exited); serving on");
  taker_.Reset();
}

void Server::OnChild(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  if (self->successor_ < 0) return;
  int status = 0;
  if (waitpid(self->successor_, &status, WNOHANG) != self->successor_) return;
  std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                      : "was killed by signal " + std::to_string(WTERMSIG(status));
  std::string line = "the new gateway (pid " + std::to_string(self->successor_) + ") " + how +
                     " before taking over; its log says why";
  LogF(LogLevel::kError, "main", "upgrade failed: %s; serving on", line.c_str());
  if (self->upgrade_.fd >= 0) {
    std::string reply = "failed: " + line + "\n";
    send(self->upgrade_.fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    self->upgrade_.Reset();
  }
  self->successor_ = -1;
}

void Server::FinishHandover() {
  if (taker_.fd >= 0 && handing_over_) {
    send(taker_.fd, "closed\n", 7, MSG_NOSIGNAL);
  }
  // Every event before the main loop's base is freed.
  taker_.Reset();
  pending_.Reset();
  upgrade_.Reset();
  handover_ev_.reset();
  child_ev_.reset();
  handover_.Close();
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Server's half of the handover (proxy/handover.h): taking the listeners over from the running
// gateway (--take-over), and handing this gateway's listeners to its successor.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/log.h"
#include "proxy/server.h"
#include "store/store_factory.h"

namespace idemgate {
namespace {

// The store the old gateway closed is free at once; a little patience covers its exit when it
// went away without saying "closed" (the lock is released when its process ends).
constexpr auto kStoreLockPatience = std::chrono::seconds(5);
// Past the old gateway's own bound on its drain (grace plus the store's 5 s), waiting more for
// it to close the store would only hide a hung process.
constexpr int64_t kCloseSlackMs = 10'000;

int64_t SteadyMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool Server::ReceiveListeners(const Config& config, std::string* error) {
  std::string path = HandoverSocketPath(config);
  if (path.empty()) {
    *error = "--take-over needs server.handover_socket, which is \"off\"";
    return false;
  }
  takeover_ = std::make_unique<HandoverClient>();
  if (!takeover_->Connect(path, error) || !takeover_->Receive(&taken_, error)) return false;
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
  if (taken_.admin_fd >= 0 &&
      (config.admin.address.empty() || taken_.admin_host != admin.host ||
       (admin.port != 0 && admin.port != taken_.admin_port))) {
    Log(LogLevel::kWarn, "main",
        "admin.address differs from the running gateway's: binding it afresh");
    close(taken_.admin_fd);
    taken_.admin_fd = -1;
  }
  LogF(LogLevel::kInfo, "main", "taking over from the running gateway (pid %d): %zu listeners on "
       "%s:%u%s",
       static_cast<int>(taken_.pid), taken_.listen_fds.size(), taken_.listen_host.c_str(),
       taken_.listen_port, taken_.admin_fd >= 0 ? " and the admin listener" : "");
  return true;
}

bool Server::StopOldGateway(bool wait_closed, std::string* error) {
  const int64_t start = SteadyMs();
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
       static_cast<int>(taken_.pid), static_cast<long long>(SteadyMs() - start));
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
}

void Server::OnHandoverConnect(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  std::string why;
  int peer = self->handover_.Accept(&why);
  if (peer < 0) {
    LogF(LogLevel::kWarn, "main", "handover socket: %s", why.c_str());
    return;
  }
  if (self->peer_ >= 0) {  // one take-over at a time; the second one is told by the EOF
    close(peer);
    Log(LogLevel::kWarn, "main", "a second take-over was refused: one is under way");
    return;
  }
  std::shared_ptr<const Config> config = self->gateway_.Snapshot();
  HandoverOffer offer;
  offer.pid = getpid();
  offer.listen_host = config->listen.addr.host;
  offer.listen_port = self->listen_port_;
  for (auto& worker : self->workers_) {
    for (int fd : worker->ListenFds()) offer.listen_fds.push_back(fd);
  }
  if (self->admin_) {
    offer.admin_host = config->admin.addr.host;
    offer.admin_fd = self->admin_->listen_fd();
    offer.admin_port = self->admin_port_;
  }
  offer.grace_ms = config->server.shutdown_grace_ms;
  if (!SendOffer(peer, offer, &why)) {
    close(peer);
    LogF(LogLevel::kWarn, "main", "handover: %s", why.c_str());
    return;
  }
  self->peer_ = peer;
  self->peer_ev_.reset(
      event_new(self->main_base_, peer, EV_READ | EV_PERSIST, &Server::OnHandoverPeer, self));
  event_add(self->peer_ev_.get(), nullptr);
  Log(LogLevel::kInfo, "main", "handed the listeners to a gateway taking over; serving until it "
      "says stop");
}

void Server::OnHandoverPeer(evutil_socket_t fd, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  char buf[64];
  ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0 && std::string_view(buf, n).find("stop\n") != std::string_view::npos) {
    self->handing_over_ = true;
    self->peer_ev_.reset();
    self->handover_ev_.reset();  // no second successor
    Log(LogLevel::kInfo, "main", "a new gateway took over the listeners: draining "
        "(server.shutdown_grace), then closing the store and exiting");
    event_base_loopbreak(self->main_base_);
    return;
  }
  if (n > 0) return;  // nothing else is said before "stop"
  Log(LogLevel::kWarn, "main", "the take-over was abandoned (its process failed or exited); "
      "serving on");
  self->peer_ev_.reset();
  close(fd);
  self->peer_ = -1;
}

void Server::FinishHandover() {
  if (peer_ >= 0) {
    if (handing_over_) send(peer_, "closed\n", 7, MSG_NOSIGNAL);
    close(peer_);
    peer_ = -1;
  }
  peer_ev_.reset();  // before the main loop's base is freed
  handover_ev_.reset();
  handover_.Close();
}

}  // namespace idemgate

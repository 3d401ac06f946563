// SPDX-License-Identifier: Apache-2.0
// The handover's control socket and its few messages (see handover.h): a Unix stream socket,
// the offer's text with the listening fds as SCM_RIGHTS, then the lines "stop" and "closed".
#include "proxy/handover.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace idemgate {
namespace {

constexpr char kMagic[] = "idemgate-handover 1";
constexpr size_t kMaxFds = 200;  // under the kernel's SCM_MAX_FD (253); workers are at most 64
constexpr int64_t kReceiveTimeoutMs = 10'000;

bool FillAddress(const std::string& path, sockaddr_un* addr, std::string* error) {
  *addr = {};
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) {
    *error = "server.handover_socket '" + path + "' is longer than a Unix socket path may be (" +
             std::to_string(sizeof(addr->sun_path) - 1) + " bytes); set a shorter one";
    return false;
  }
  memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

// The uid of the process at the other end of `fd`; -1 when unknown.
int64_t PeerUid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return cred.uid;
}

// Waits until `fd` is readable; false at the deadline.
bool WaitReadable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1'000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

}  // namespace

std::string HandoverSocketPath(const Config& config) {
  const std::string& set = config.server.handover_socket;
  if (set == "off") return "";
  if (!set.empty()) return set;
  if (config.store.backend == "rocksdb") return config.store.path + ".handover";
  const char* runtime = getenv("RUNTIME_DIRECTORY");  // systemd's RuntimeDirectory=
  if (runtime != nullptr && *runtime != '\0') {
    std::string dir = runtime;
    dir = dir.substr(0, dir.find(':'));  // several directories: the first
    return dir + "/handover";
  }
  return "idemgate.handover";
}

namespace {

// The offer's text (the fds travel beside it); Decode fills everything but the fds and says
// how many of each to expect.
std::string EncodeOffer(const HandoverOffer& offer) {
  std::ostringstream out;
  out << kMagic << "\npid " << offer.pid << "\nlisten " << offer.listen_host << " "
      << offer.listen_port << " " << offer.listen_fds.size() << "\n";
  if (offer.admin_fd >= 0) out << "admin " << offer.admin_host << " " << offer.admin_port << "\n";
  out << "grace_ms " << offer.grace_ms << "\nend\n";
  return out.str();
}

bool DecodeOffer(std::string_view text, HandoverOffer* offer, size_t* listen_fds, bool* admin_fd,
                 std::string* error) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || line != kMagic) {
    *error = "the running gateway speaks another handover version (an older idemgate?)";
    return false;
  }
  *listen_fds = 0;
  *admin_fd = false;
  bool ended = false;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    words >> word;
    if (word == "pid") {
      words >> offer->pid;
    } else if (word == "listen") {
      words >> offer->listen_host >> offer->listen_port >> *listen_fds;
    } else if (word == "admin") {
      words >> offer->admin_host >> offer->admin_port;
      *admin_fd = true;
    } else if (word == "grace_ms") {
      words >> offer->grace_ms;
    } else if (word == "end") {
      ended = true;
    }
  }
  if (!ended || *listen_fds == 0 || *listen_fds > kMaxFds) {
    *error = "the running gateway's handover offer is incomplete";
    return false;
  }
  return true;
}

}  // namespace

bool HandoverListener::Open(const std::string& path, std::string* error) {
  sockaddr_un addr{};
  std::string temp = path + ".new." + std::to_string(getpid());
  if (!FillAddress(temp, &addr, error)) return false;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  unlink(temp.c_str());
  // 0600 before it is renamed into place: only this user may connect (Main's umask is 077).
  bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            chmod(temp.c_str(), 0600) == 0 && listen(fd, 4) == 0 &&
            rename(temp.c_str(), path.c_str()) == 0;
  struct stat st {};
  ok = ok && stat(path.c_str(), &st) == 0;
  if (!ok) {
    *error = "cannot listen on server.handover_socket " + path + ": " + strerror(errno);
    if (fd >= 0) close(fd);
    unlink(temp.c_str());
    return false;
  }
  path_ = path;
  fd_ = fd;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  return true;
}

int HandoverListener::Accept(std::string* why) {
  // Non-blocking: the running gateway serves it from its main loop, which must never wait on it.
  int peer = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (peer < 0) {
    *why = std::string("accept: ") + strerror(errno);
    return -1;
  }
  if (int64_t uid = PeerUid(peer); uid != static_cast<int64_t>(geteuid())) {
    *why = "refused a take-over from uid " + std::to_string(uid) + " (not this gateway's user)";
    close(peer);
    return -1;
  }
  return peer;
}

void HandoverListener::Close() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  // A new gateway may have renamed its own socket over the path already: leave that one.
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    unlink(path_.c_str());
  }
}

bool SendOffer(int peer, const HandoverOffer& offer, std::string* error) {
  std::vector<int> fds = offer.listen_fds;
  if (offer.admin_fd >= 0) fds.push_back(offer.admin_fd);
  std::string text = EncodeOffer(offer);
  iovec iov{text.data(), text.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  if (sendmsg(peer, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    *error = std::string("cannot send the listeners: ") + strerror(errno);
    return false;
  }
  return true;
}

HandoverClient::~HandoverClient() { Close(); }

void HandoverClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool HandoverClient::Connect(const std::string& path, std::string* error) {
  const std::string none =
      "cannot take over: no running gateway at server.handover_socket " + path + " (";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    *error = none + strerror(errno) + "); start it without --take-over";
    return false;
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
    *error = "cannot take over: " + path + " is not a socket of this user";
    return false;
  }
  sockaddr_un addr{};
  if (!FillAddress(path, &addr, error)) return false;
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = none + strerror(errno) +
             "; a stale socket left by a gateway that was killed?); "
             "start it without --take-over";
    Close();
    return false;
  }
  if (PeerUid(fd_) != static_cast<int64_t>(geteuid())) {
    *error = "cannot take over: the process at " + path + " runs as another user";
    Close();
    return false;
  }
  return true;
}

bool HandoverClient::Receive(HandoverOffer* offer, std::string* error) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReceiveTimeoutMs);
  if (!WaitReadable(fd_, deadline)) {
    *error = "cannot take over: the running gateway did not hand its listeners over within 10 s";
    return false;
  }
  char text[4096];
  iovec iov{text, sizeof(text) - 1};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (kMaxFds + 1)));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* data = reinterpret_cast<const int*>(CMSG_DATA(c));
    fds.insert(fds.end(), data, data + count);
  }
  size_t listen_count = 0;
  bool has_admin = false;
  bool ok = n > 0 && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 &&
            DecodeOffer(std::string_view(text, n), offer, &listen_count, &has_admin, error);
  if (ok && fds.size() != listen_count + (has_admin ? 1 : 0)) {
    *error = "the running gateway's handover carried " + std::to_string(fds.size()) +
             " sockets, not the " + std::to_string(listen_count + has_admin) + " it announced";
    ok = false;
  } else if (!ok && error->empty()) {
    *error = n == 0 ? "cannot take over: the running gateway closed the control connection "
                      "(another take-over under way?)"
                    : "cannot take over: the handover message was not understood";
  }
  if (!ok) {
    for (int fd : fds) close(fd);
    return false;
  }
  offer->listen_fds.assign(fds.begin(), fds.begin() + static_cast<long>(listen_count));
  offer->admin_fd = has_admin ? fds.back() : -1;
  return true;
}

bool HandoverClient::SendLine(std::string_view line, std::string* error) {
  std::string text = std::string(line) + "\n";
  if (send(fd_, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    *error = std::string("cannot reach the running gateway: ") + strerror(errno);
    return false;
  }
  return true;
}

bool HandoverClient::ReadLine(int64_t timeout_ms, std::string* line) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  line->clear();
  while (WaitReadable(fd_, deadline)) {
    char c;
    ssize_t n = recv(fd_, &c, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

bool HandoverClient::WaitClosed(int64_t timeout_ms, std::string* error) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string got;
  while (WaitReadable(fd_, deadline)) {
    char buf[64];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;  // gone: its store is closed with it
    got.append(buf, n);
    if (got.find("closed\n") != std::string::npos) return true;
  }
  *error = "the old gateway did not close its store within " + std::to_string(timeout_ms) +
           " ms of being asked to stop";
  return false;
}

}  // namespace idemgate

namespace idemgate {
namespace {

// The successor's start (config, preflight) before it says "stop"; then the old drain.
constexpr int64_t kSuccessorStartMs = 60'000;

// The pid of the gateway answering at `path` now; "" when none answers.
std::string AnsweringPid(const std::string& path) {
  HandoverClient probe;
  std::string error, line;
  if (!probe.Connect(path, &error) || !probe.SendLine("pid", &error)) return "";
  if (!probe.ReadLine(1'000, &line) || line.rfind("pid ", 0) != 0) return "";
  return line.substr(4);
}

}  // namespace

int RunUpgrade(const Config& config) {
  std::string path = HandoverSocketPath(config);
  if (path.empty()) {
    fprintf(stderr, "cannot upgrade: server.handover_socket is \"off\"\n");
    return 1;
  }
  HandoverClient client;
  std::string error, line;
  if (!client.Connect(path, &error) || !client.SendLine("upgrade", &error)) {
    fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (!client.ReadLine(10'000, &line) || line.rfind("spawned ", 0) != 0) {
    fprintf(stderr, "cannot upgrade: %s\n",
            line.empty() ? "the running gateway did not answer" : line.c_str());
    return 1;
  }
  const std::string pid = line.substr(8);
  printf("upgrade: started the new gateway (pid %s); waiting for it to take over\n", pid.c_str());
  fflush(stdout);
  // It serves once it answers on the control socket's path (its socket replaces the old one's
  // there just before it prints "listening on"); the old gateway says "failed: ..." if the new
  // one exits first, and closes this connection when it says "stop".
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSuccessorStartMs);
  bool connected = true;
  while (std::chrono::steady_clock::now() < deadline) {
    if (connected && client.ReadLine(50, &line)) {
      if (!line.empty()) {
        fprintf(stderr, "upgrade %s\n", line.c_str());
        return 1;
      }
      connected = false;  // "stop" was said: the old drain may take its whole grace period
      deadline =
          std::chrono::steady_clock::now() +
          std::chrono::milliseconds(config.server.shutdown_grace_ms + 5'000 + kSuccessorStartMs);
    }
    if (!connected) {
      if (AnsweringPid(path) == pid) {
        printf("upgrade: pid %s serves; the old gateway drains and exits\n", pid.c_str());
        return 0;
      }
      usleep(20'000);
    }
  }
  fprintf(stderr, "upgrade: the new gateway (pid %s) did not take over in time; see its log\n",
          pid.c_str());
  return 1;
}

}  // namespace idemgate

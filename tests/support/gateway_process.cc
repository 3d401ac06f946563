// SPDX-License-Identifier: Apache-2.0
// GatewayProcess: fork/exec with output captured through a pipe, bounded waits via pidfd + poll.
#include "tests/support/gateway_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

extern char** environ;

namespace idemgate::test {

std::string PreloadAsanOptions() {
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::string options = asan != nullptr && *asan != '\0' ? std::string(asan) + ":" : "";
  return "ASAN_OPTIONS=" + options + "verify_asan_link_order=0";
}
namespace {

using Clock = std::chrono::steady_clock;

// Finds the port in the first complete line of `log` that starts with `prefix` + HOST:PORT.
uint16_t FindPort(std::string_view log, std::string_view prefix) {
  while (!log.empty()) {
    size_t eol = log.find('\n');
    if (eol == std::string_view::npos) return 0;  // incomplete line: wait for the rest
    std::string_view line = log.substr(0, eol);
    log.remove_prefix(eol + 1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (!line.starts_with(prefix)) continue;
    std::string_view addr = line.substr(prefix.size());
    addr = addr.substr(0, addr.find_first_of(" \t\r"));
    size_t colon = addr.rfind(':');
    if (colon == std::string_view::npos || colon + 1 == addr.size()) continue;
    unsigned long port = 0;
    bool digits = true;
    for (char c : addr.substr(colon + 1)) {
      digits = digits && c >= '0' && c <= '9';
      port = port * 10 + static_cast<unsigned long>(c - '0');
    }
    if (digits && port > 0 && port < 65536) return static_cast<uint16_t>(port);
  }
  return 0;
}

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void ExecChild(int out_fd, int report_fd, pid_t parent, char** argv, char** envp) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);  // the test process ignores it; the child must not inherit that
  dup2(out_fd, STDOUT_FILENO);
  dup2(out_fd, STDERR_FILENO);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(argv[0], argv, envp);
  int err = errno;
  (void)!write(report_fd, &err, sizeof(err));
  _exit(127);
}

}  // namespace

bool ExitStatus::exited() const { return WIFEXITED(raw); }
int ExitStatus::code() const { return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1; }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw); }
int ExitStatus::signal() const { return WIFSIGNALED(raw) ? WTERMSIG(raw) : 0; }
std::string ExitStatus::ToString() const {
  if (exited()) return "exited with code " + std::to_string(code());
  if (signaled()) return "killed by signal " + std::to_string(signal());
  return "status " + std::to_string(raw);
}

GatewayProcess::~GatewayProcess() {
  if (running()) {
    Kill(SIGKILL);
    Wait(std::chrono::seconds(30));
  }
  StopReader();
}

bool GatewayProcess::Start(const std::string& binary, const std::vector<std::string>& args,
                           const std::vector<std::string>& extra_env) {
  if (running() || reader_.joinable()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_.clear();
    output_closed_ = false;
  }
  status_.reset();
  error_.clear();
  int out[2], report[2], wake[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0 || pipe2(wake, O_CLOEXEC) != 0) {
    error_ = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  UniqueFd out_w(out[1]), report_r(report[0]), report_w(report[1]);
  out_.Reset(out[0]);
  wake_r_.Reset(wake[0]);
  wake_w_.Reset(wake[1]);
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (char** e = environ; *e != nullptr; ++e) {
    // A variable given in extra_env replaces the inherited one (getenv sees the first).
    std::string_view name(*e, std::strcspn(*e, "="));
    bool replaced = std::any_of(extra_env.begin(), extra_env.end(), [&](const std::string& x) {
      return x.size() > name.size() && x.compare(0, name.size(), name) == 0 &&
             x[name.size()] == '=';
    });
    if (!replaced) envp.push_back(*e);
  }
  std::vector<std::string> env_copy = extra_env;
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) ExecChild(out_w.get(), report_w.get(), parent, argv.data(), envp.data());
  pid_ = pid;
  out_w.Reset();
  report_w.Reset();
  pidfd_.Reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  reader_ = std::thread([this] { ReadOutput(); });
  int err = 0;
  ssize_t n;
  while ((n = read(report_r.get(), &err, sizeof(err))) < 0 && errno == EINTR) {
  }
  if (n == sizeof(err)) {
    error_ = "exec " + binary + ": " + std::strerror(err);
    Wait(std::chrono::seconds(10));
    return false;
  }
  return true;
}

void GatewayProcess::ReadOutput() {
  bool echo = std::getenv("IDEMGATE_TEST_ECHO") != nullptr;
  bool draining = false;
  for (;;) {
    pollfd fds[2] = {{out_.get(), POLLIN, 0}, {wake_r_.get(), POLLIN, 0}};
    if (!draining && poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0 && !draining) {
      draining = true;  // the child is reaped: take what is buffered, then stop
      fcntl(out_.get(), F_SETFL, O_NONBLOCK);
    }
    if (!draining && fds[0].revents == 0) continue;
    char buf[8192];
    ssize_t n = read(out_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (echo) (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
    std::lock_guard<std::mutex> lock(mu_);
    log_.append(buf, static_cast<size_t>(n));
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  output_closed_ = true;
  cv_.notify_all();
}

void GatewayProcess::StopReader() {
  if (!reader_.joinable()) return;
  char c = 1;
  (void)!write(wake_w_.get(), &c, 1);
  reader_.join();
}

uint16_t GatewayProcess::WaitForPort(std::string_view prefix, Ms timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  uint16_t port = 0;
  cv_.wait_for(lock, timeout, [&] {
    port = FindPort(log_, prefix);
    return port != 0 || output_closed_;
  });
  return port;
}

bool GatewayProcess::WaitForOutput(std::string_view needle, Ms timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    return log_.find(needle) != std::string::npos || output_closed_;
  }) && log_.find(needle) != std::string::npos;
}

bool GatewayProcess::Kill(int sig) { return running() && ::kill(pid_, sig) == 0; }

std::optional<ExitStatus> GatewayProcess::Wait(Ms timeout) {
  if (!running()) return status_;
  if (pidfd_.valid()) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    auto deadline = Clock::now() + timeout;
    int rc;
    do {
      auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now()).count();
      rc = poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return std::nullopt;
  }
  int raw = 0;
  pid_t r;
  while ((r = waitpid(pid_, &raw, pidfd_.valid() ? WNOHANG : 0)) < 0 && errno == EINTR) {
  }
  if (r != pid_) return std::nullopt;
  pid_ = -1;
  pidfd_.Reset();
  status_ = ExitStatus{raw};
  StopReader();  // the child's output is complete once it is reaped (unless it forked)
  return status_;
}

std::string GatewayProcess::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

std::string SiblingBinaryPath(std::string_view name) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / std::string(name)).string();
}

}  // namespace idemgate::test

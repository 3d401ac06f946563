// SPDX-License-Identifier: Apache-2.0
// GatewayProcess: runs a program (the gateway, the demo API) as a child with captured output.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/support/ev_util.h"

namespace idemgate::test {

// "ASAN_OPTIONS=..." for a process started with a shim in LD_PRELOAD: in an ASan build the shim
// links the ASan runtime, which would abort the process for not coming first among the preloaded
// libraries. The inherited ASAN_OPTIONS are kept. Harmless in other builds.
std::string PreloadAsanOptions();

// A waitpid status.
struct ExitStatus {
  int raw = 0;
  bool exited() const;
  int code() const;  // exit code when exited(), else -1
  bool signaled() const;
  int signal() const;  // the terminating signal when signaled(), else 0
  std::string ToString() const;
};

class GatewayProcess {
 public:
  using Ms = std::chrono::milliseconds;

  GatewayProcess() = default;
  ~GatewayProcess();  // SIGKILL and reap when still running
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  // fork/exec `binary` with `args` (argv[0] is added) and the environment plus `extra_env`
  // ("NAME=value", replacing an inherited NAME). stdout and stderr go to one pipe read by a thread
  // into log(). The child gets SIGKILL if the thread that called Start exits. False (see error())
  // when exec fails.
  bool Start(const std::string& binary, const std::vector<std::string>& args,
             const std::vector<std::string>& extra_env = {});

  // The port of the first output line that starts (after blanks) with `prefix` followed by
  // HOST:PORT, e.g. "listening on 127.0.0.1:8080"; pass "admin listening on " for another
  // line. 0 when none appears within `timeout` or the process closes its output first.
  uint16_t WaitForPort(std::string_view prefix = "listening on ", Ms timeout = kStartTimeout);
  // True once the captured output contains `needle`.
  bool WaitForOutput(std::string_view needle, Ms timeout = kStartTimeout);

  // Sends `sig` (SIGKILL: crash; SIGTERM: clean shutdown). False when not running.
  bool Kill(int sig = SIGKILL);
  // Reaps the child; nullopt when it is still running after `timeout` (or never started).
  std::optional<ExitStatus> Wait(Ms timeout = kStartTimeout);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  std::string log() const;                             // everything captured so far
  const std::string& error() const { return error_; }  // why Start failed

  static constexpr Ms kStartTimeout = std::chrono::seconds(10);

 private:
  void ReadOutput();
  void StopReader();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd out_;     // read end of the child's stdout+stderr
  UniqueFd wake_r_;  // tells the reader to drain and stop
  UniqueFd wake_w_;
  std::thread reader_;
  std::string error_;
  std::optional<ExitStatus> status_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string log_;             // guarded by mu_
  bool output_closed_ = false;  // guarded by mu_
};

// The path of the program `name` in the directory of the running executable (/proc/self/exe),
// e.g. SiblingBinaryPath("demo-payment-api") from a test in the same build directory.
std::string SiblingBinaryPath(std::string_view name);

}  // namespace idemgate::test

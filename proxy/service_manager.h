// SPDX-License-Identifier: Apache-2.0
// What an upgrade needs from outside the gateway: telling systemd (Type=notify) that it is
// ready and which process is now the service's main one, and starting the successor process
// that takes over (proxy/handover.h).
#pragma once

#include <sys/types.h>

#include <string>

namespace idemgate {

// Sends `state` ("READY=1", "MAINPID=123", "STOPPING=1", lines joined by '\n') to the socket
// named by $NOTIFY_SOCKET (sd_notify(3)'s protocol); nothing when it is unset. False when it is
// set and the message could not be sent.
bool NotifyServiceManager(const std::string& state);

// This process's binary as it was started (read at start-up: after a package upgrade the path
// names the new binary, while /proc/self/exe names the old, deleted one).
std::string StartedBinaryPath();

// Starts `binary --take-over --config config_path` with the environment and descriptors that
// are not close-on-exec (stdout, stderr), no signal blocked; its pid, or -1 with *error.
pid_t SpawnSuccessor(const std::string& binary, const std::string& config_path, std::string* error);

}  // namespace idemgate

// The readiness probes behind /readyz: a store write (claim and release of a reserved key) and
// an upstream connect (with the TLS handshake for https). They block the calling thread (the
// admin thread), never a loop.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <string>

#include "conf/config.h"
#include "store/store.h"

namespace idemgate {

// The readiness probes, usable on their own (they block the calling thread, never a loop).
// Empty on success, else the reason.
std::string ProbeStore(Store* store, std::chrono::milliseconds timeout);
// `tls` (may be null): an https upstream, probed with a verified TLS handshake.
std::string ProbeUpstream(const HostPort& upstream, std::chrono::milliseconds timeout,
                          SSL_CTX* tls = nullptr);
// "" when at least one server of the group answers ProbeUpstream; else every server's error.
std::string ProbeUpstreamGroup(const Config::Upstream& group, std::chrono::milliseconds timeout,
                               SSL_CTX* tls = nullptr);

}  // namespace idemgate

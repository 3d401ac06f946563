// SPDX-License-Identifier: Apache-2.0
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

class UpstreamStats;

// The readiness probes, usable on their own (they block the calling thread, never a loop).
// Empty on success, else the reason.
std::string ProbeStore(Store* store, std::chrono::milliseconds timeout);
// `tls` (may be null): an https upstream, probed with a verified TLS handshake.
std::string ProbeUpstream(const HostPort& upstream, std::chrono::milliseconds timeout,
                          SSL_CTX* tls = nullptr);
// "" when at least one server of the group answers ProbeUpstream; else every server's error.
std::string ProbeUpstreamGroup(const Config::Upstream& group, std::chrono::milliseconds timeout,
                               SSL_CTX* tls = nullptr);

// /readyz's `,"route_groups":["payments: every server is out: …"]` for the named groups whose
// every server is out (from the loops' own view, not a probe); "" when there is none. They are
// named, not counted against readiness: every instance sees the same servers, and taking every
// instance out of the balancer would stop the routes that still work too.
std::string RouteGroupsDownJson(const UpstreamStats& stats);

}  // namespace idemgate

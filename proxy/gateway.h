// What every worker loop shares: the current config, the store, the clock, the access log.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <memory>

#include "conf/config.h"
#include "store/clock.h"
#include "store/store.h"

namespace idemgate {

class AccessLog;
class Metrics;
class ReplayCache;
class UnsentBudget;

struct Gateway {
  // Swapped whole on reload; an exchange keeps the snapshot it started with.
  std::atomic<std::shared_ptr<const Config>> config;
  Store* store = nullptr;
  const Clock* clock = nullptr;
  AccessLog* access_log = nullptr;  // may be null (off)
  Metrics* metrics = nullptr;       // may be null
  SSL_CTX* server_tls = nullptr;    // client-facing TLS (listen.tls_cert/tls_key); may be null
  SSL_CTX* upstream_tls = nullptr;  // https upstream; may be null

  // Completed records' responses, shared by every replay; may be null.
  ReplayCache* replay_cache = nullptr;
  // The memory held by unsent answers (limits.max_unsent_bytes); may be null.
  UnsentBudget* unsent = nullptr;
  // Client connections open in every worker (limits.max_connections).
  std::atomic<int64_t> open_connections{0};

  std::shared_ptr<const Config> Snapshot() const { return config.load(); }
};

}  // namespace idemgate

// What every worker loop shares: the current config, the store, the clock, the access log.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "conf/config.h"
#include "store/clock.h"
#include "store/store.h"

namespace idemgate {

class AccessLog;
class Metrics;
class ReplayCache;
class UnsentBudget;
class WaitRegistry;

struct Gateway {
  Store* store = nullptr;
  const Clock* clock = nullptr;
  AccessLog* access_log = nullptr;  // may be null (off)
  Metrics* metrics = nullptr;       // may be null
  SSL_CTX* server_tls = nullptr;    // client-facing TLS (listen.tls_cert/tls_key); may be null
  SSL_CTX* upstream_tls = nullptr;  // https upstream; may be null
  // Named groups that are https ([upstreams.NAME] with its own ca_file), by name.
  std::map<std::string, SSL_CTX*, std::less<>> upstream_group_tls;

  // Completed records' responses, shared by every replay; may be null.
  ReplayCache* replay_cache = nullptr;
  // The memory held by unsent answers (limits.max_unsent_bytes); may be null.
  UnsentBudget* unsent = nullptr;
  // Duplicates waiting for a first answer, in every worker (SPEC §10). Never null in service.
  WaitRegistry* waits = nullptr;
  // Client connections open in every worker (limits.max_connections).
  std::atomic<int64_t> open_connections{0};

  // The current config, swapped whole on reload; an exchange keeps the snapshot it started with.
  std::shared_ptr<const Config> Snapshot() const {
    std::lock_guard<std::mutex> lock(config_mu_);
    return config_;
  }
  void SetConfig(std::shared_ptr<const Config> config) {
    std::lock_guard<std::mutex> lock(config_mu_);
    config_.swap(config);
  }  // the old config (now in `config`) is released after the lock, by its last holder

 private:
  // Not std::atomic<std::shared_ptr>: libstdc++ 12's load() reads the pointer under its lock bit
  // and then unlocks with memory_order_relaxed, so a reload's store races with a worker's load
  // (a formal data race, reported by TSan). A mutex held for one pointer copy is as cheap here.
  mutable std::mutex config_mu_;
  std::shared_ptr<const Config> config_;
};

}  // namespace idemgate

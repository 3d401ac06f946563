// SPDX-License-Identifier: Apache-2.0
// The admin listener: its own thread, libevent base and evhttp, so admin traffic never touches
// the data-plane loops. /metrics, /healthz, /readyz, and the support-staff record API.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "conf/config.h"
#include "proxy/net/event_util.h"
#include "proxy/ops/gateway.h"
#include "proxy/ops/probes.h"

struct evhttp;
struct evhttp_request;

namespace idemgate {

class Metrics;

class AdminServer {
 public:
  AdminServer(Gateway* gateway, Metrics* metrics);
  ~AdminServer();  // Stop()
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds `addr` (port 0 picks one; *bound_port gets it) and starts the thread; with
  // `listening_fd` >= 0 (a socket handed over, already listening) accepts from it instead.
  bool Start(const HostPort& addr, uint16_t* bound_port, std::string* error, int listening_fd = -1);
  // The listening socket (to hand over); -1 before Start.
  int listen_fd() const { return listen_fd_; }
  // From now on /readyz answers 503 "draining" (shutdown has begun).
  void SetDraining() { draining_.store(true, std::memory_order_relaxed); }
  // Leaves the loop and joins the thread. Idempotent.
  void Stop();

 private:
  static void OnRequest(evhttp_request* req, void* arg);
  void Handle(evhttp_request* req);
  void HandleMetrics(evhttp_request* req);
  void HandleReady(evhttp_request* req);
  void HandleRecords(evhttp_request* req);
  void HandleBackup(evhttp_request* req);
  // Starts `req`'s backup (into a new directory under `root`) on backup_thread_.
  void StartBackup(evhttp_request* req, const std::string& root);
  // On the admin loop, once backup_thread_ has finished: logs and answers, starts the next.
  void OnBackupDone();
  void LookupRecord(evhttp_request* req, const ScopeId& scope, const std::string& key);
  // Refused (409) while an attempt's lease is alive, unless `force`; every delete is logged.
  void DeleteRecord(evhttp_request* req, const ScopeId& scope, const std::string& key,
                    bool force);
  // False (and the answer already sent) when the request may not use the record API.
  bool Authorize(evhttp_request* req, const Config& config);

  Gateway* gateway_;
  Metrics* metrics_;
  EventBasePtr base_;
  evhttp* http_ = nullptr;
  int listen_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> draining_{false};

  // POST /backup runs a checkpoint on its own thread (it may take seconds, or minutes when
  // backup_dir is on another filesystem), so /healthz, /readyz and /metrics keep answering.
  // One at a time, in arrival order, as when the admin loop ran them itself.
  struct Backup {
    evhttp_request* req = nullptr;
    std::string dir;
    std::string client;
    int64_t unix_ms = 0;
    StoreStatus status;
    double seconds = 0;
  };
  std::thread backup_thread_;
  bool backup_running_ = false;                                     // admin loop only
  std::deque<std::pair<evhttp_request*, std::string>> backup_queue_;  // admin loop: (req, root)
  EventPtr backup_done_ev_;                                         // made active by the thread
  std::mutex backup_mu_;
  std::optional<Backup> backup_done_;  // guarded by backup_mu_: the finished one
};

}  // namespace idemgate

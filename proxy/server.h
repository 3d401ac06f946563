// SPDX-License-Identifier: Apache-2.0
// The process: the config in force, the store, the metrics, the access log, TLS contexts, the
// admin thread and the worker loops, opened in that order, run until SIGTERM/SIGINT, then drained
// and closed in reverse. main.cc holds the command line around it.
#pragma once

#include <event2/event.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "conf/config.h"
#include "proxy/conn/unsent_budget.h"
#include "proxy/exchange/replay_cache.h"
#include "proxy/exchange/wait_registry.h"
#include "proxy/handover.h"
#include "proxy/net/tls.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/admin.h"
#include "proxy/ops/certificates.h"
#include "proxy/ops/gateway.h"
#include "proxy/ops/metrics.h"
#include "proxy/ops/ops_metrics.h"
#include "proxy/ops/reload.h"
#include "proxy/worker.h"
#include "store/clock.h"
#include "store/sealed_store.h"
#include "store/store.h"
#include "store/store_factory.h"

namespace idemgate {

// Completed responses kept in memory for replays (an entry over a quarter of it is not kept).
inline constexpr size_t kReplayCacheBytes = 64 << 20;

// Blocks (unblocks) SIGTERM, SIGINT and SIGHUP in the calling thread: blocked before the first
// thread starts, so only the main loop (Server::Run) ever handles them.
void SetStopSignalsBlocked(bool blocked);

// Runs until SIGTERM/SIGINT; then drains the workers within the grace period.
class Server {
 public:
  // `take_over`: take the listeners over from the running gateway (proxy/handover.h) instead
  // of binding them.
  Server(std::shared_ptr<const Config> config, std::string config_path, bool accept_new_signature,
         bool take_over = false)
      : config_path_(std::move(config_path)),
        accept_new_signature_(accept_new_signature),
        take_over_(take_over) {
    gateway_.SetConfig(config);
  }

  // Config -> store -> observability -> TLS -> admin -> workers; false (with *error) when any
  // part cannot start (nothing keeps running then).
  bool Open(std::string* error);
  // Runs until SIGTERM/SIGINT; then drains the workers and closes the store and the log.
  void Run();

 private:
  static int WorkerCount(const Config& config);

  // The store, its settings signature, and the replay cache over it.
  bool OpenStoreParts(const Config& config, std::string* error);

  // Metrics sources and the access log, before any worker starts.
  bool OpenObservability(const Config& config, std::string* error);

  // TLS contexts, shared read-only by every worker's connections.
  bool OpenTls(const Config& config, std::string* error);

  bool StartAdmin(const Config& config, std::string* error);

  bool StartWorkers(const Config& config, std::string* error);

  static std::string DescribeUpstream(const Config::Upstream& upstream);

  // Each client connection may need an upstream one too, and the store and the loops need some:
  // raise the soft open-file limit towards that (up to the hard limit), and say so when the
  // limit stays lower (accept() then fails at the limit and the workers pause accepting).
  static void CheckOpenFileLimit(const Config& config);
  static void CheckBusyPollCpus(const Config& config, int workers);

  // SIGHUP: reopen the access log at its path (after logrotate renamed the old file), and
  // reload the config file: live keys apply to new exchanges; a broken file changes nothing.
  static void OnHangup(evutil_socket_t, short, void* arg);

  void Reload();
  // One line per reload naming what it changed.
  void LogReloaded(const ReloadPlan& plan, const std::string& cert_change) const;

  static void OnStop(evutil_socket_t, short, void* arg);

  // The handover (server_handover.cc). The new side: receive the listeners, and tell the old
  // gateway to stop (with the embedded store, waiting until it has closed the store).
  bool ReceiveListeners(const Config& config, std::string* error);
  bool StopOldGateway(bool wait_closed, std::string* error);
  std::unique_ptr<Store> OpenTakenOverStore(const Config& config, const StoreHooks& hooks,
                                            std::string* error);
  // The old side: the control socket; a peer says "take-over" (it is sent the listeners, then
  // says "stop") or "upgrade" (`idemgate --upgrade`: a successor is started to take over).
  void OpenHandoverSocket(const Config& config);
  void WatchHandoverSocket(event_base* base);
  static void OnHandoverConnect(evutil_socket_t, short, void* arg);
  static void OnControlRead(evutil_socket_t fd, short, void* arg);
  void OnPendingLine(const std::string& line);
  void OfferListeners();
  void StartSuccessor();
  void OnTakerRead(bool stop);
  static void OnChild(evutil_socket_t, short, void* arg);
  void FinishHandover();  // after the drain and the store's close; frees the events

  std::string config_path_;
  const bool accept_new_signature_;
  const bool take_over_;
  SystemClock clock_;
  SslCtxPtr server_tls_;             // before gateway_ and the workers: destroyed after them
  ServerCertificates server_certs_;  // the pair server_tls_'s handshakes use
  SslCtxPtr upstream_tls_;
  std::vector<SslCtxPtr> group_tls_;  // named https groups
  Gateway gateway_;
  ReloadStats reload_stats_;          // before metrics_: its source reads it
  std::unique_ptr<Metrics> metrics_;  // before store_: the writer reports to it until closed
  std::unique_ptr<Store> store_;
  SealedStore* sealed_ = nullptr;  // store_ itself: it seals and opens (store/sealed_store.h)
  std::unique_ptr<Store> caching_store_;  // over store_: a delete evicts from replay_cache_
  ReplayCache replay_cache_{kReplayCacheBytes};
  UnsentBudget unsent_;  // outlives the workers: their buffers hold its charges
  WaitRegistry waits_;   // outlives the workers: their waiting exchanges are listed in it
  std::unique_ptr<AccessLog> access_log_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<AdminServer> admin_;
  event_base* main_base_ = nullptr;
  uint16_t listen_port_ = 0;  // the data listeners' bound port
  uint16_t admin_port_ = 0;
  // The handover, new side: the connection to the old gateway, the sockets it handed over.
  std::unique_ptr<HandoverClient> takeover_;
  HandoverOffer taken_;
  // The handover, old side.
  struct ControlPeer {
    int fd = -1;
    EventPtr ev;
    void Reset();  // closes the connection
  };
  HandoverListener handover_;
  EventPtr handover_ev_;
  EventPtr child_ev_;          // SIGCHLD: the successor started for an upgrade exited
  ControlPeer pending_;        // connected, has not said what it wants yet
  ControlPeer taker_;          // a gateway taking over: it was sent the listeners
  ControlPeer upgrade_;        // an `idemgate --upgrade` waiting for the successor it asked for
  pid_t successor_ = -1;       // the process started for upgrade_
  bool handing_over_ = false;  // it said "stop": drain for it
};

}  // namespace idemgate

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
#include "proxy/net/tls.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/admin.h"
#include "proxy/ops/gateway.h"
#include "proxy/ops/metrics.h"
#include "proxy/ops/ops_metrics.h"
#include "proxy/ops/reload.h"
#include "proxy/worker.h"
#include "store/clock.h"
#include "store/store.h"

namespace idemgate {

// Completed responses kept in memory for replays (an entry over a quarter of it is not kept).
inline constexpr size_t kReplayCacheBytes = 64 << 20;

// Blocks (unblocks) SIGTERM, SIGINT and SIGHUP in the calling thread: blocked before the first
// thread starts, so only the main loop (Server::Run) ever handles them.
void SetStopSignalsBlocked(bool blocked);

// Runs until SIGTERM/SIGINT; then drains the workers within the grace period.
class Server {
 public:
  Server(std::shared_ptr<const Config> config, std::string config_path, bool accept_new_signature)
      : config_path_(std::move(config_path)), accept_new_signature_(accept_new_signature) {
    gateway_.SetConfig(config);
  }

  // Config -> store -> observability -> TLS -> admin -> workers; false (with *error) when any
  // part cannot start (nothing keeps running then).
  bool Open(std::string* error);
  // Runs until SIGTERM/SIGINT; then drains the workers and closes the store and the log.
  void Run();

 private:
  static int WorkerCount(const Config& config);

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

  // SIGHUP: reopen the access log at its path (after logrotate renamed the old file), and
  // reload the config file: live keys apply to new exchanges; a broken file changes nothing.
  static void OnHangup(evutil_socket_t, short, void* arg);

  void Reload();

  static void OnStop(evutil_socket_t, short, void* arg);

  std::string config_path_;
  const bool accept_new_signature_;
  SystemClock clock_;
  SslCtxPtr server_tls_;  // before gateway_ and the workers: destroyed after them
  SslCtxPtr upstream_tls_;
  std::vector<SslCtxPtr> group_tls_;  // named https groups
  Gateway gateway_;
  ReloadStats reload_stats_;          // before metrics_: its source reads it
  std::unique_ptr<Metrics> metrics_;  // before store_: the writer reports to it until closed
  std::unique_ptr<Store> store_;
  std::unique_ptr<Store> caching_store_;  // over store_: a delete evicts from replay_cache_
  ReplayCache replay_cache_{kReplayCacheBytes};
  UnsentBudget unsent_;  // outlives the workers: their buffers hold its charges
  WaitRegistry waits_;   // outlives the workers: their waiting exchanges are listed in it
  std::unique_ptr<AccessLog> access_log_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<AdminServer> admin_;
  event_base* main_base_ = nullptr;
};

}  // namespace idemgate

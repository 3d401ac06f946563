// idemgate: argv -> config -> store -> loops -> run -> clean shutdown.
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "conf/config.h"
#include "proxy/exchange/replay_cache.h"
#include "proxy/exchange/wait_registry.h"
#include "proxy/net/event_util.h"
#include "proxy/net/tls.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/admin.h"
#include "proxy/ops/build_info.h"
#include "proxy/ops/gateway.h"
#include "proxy/ops/metrics.h"
#include "proxy/ops/ops_metrics.h"
#include "proxy/ops/preflight.h"
#include "proxy/ops/reload.h"
#include "proxy/ops/store_signature.h"
#include "proxy/worker.h"
#include "store/store_backup.h"
#include "store/store_factory.h"

namespace idemgate {
namespace {

// Completed responses kept in memory for replays (an entry over a quarter of it is not kept).
constexpr size_t kReplayCacheBytes = 64 << 20;

constexpr char kUsage[] =
    "usage: idemgate --config FILE          run the gateway\n"
    "       idemgate --check-config --config FILE   validate the configuration and exit\n"
    "       idemgate --accept-new-signature --config FILE\n"
    "                run, accepting key settings (idempotency.header, fingerprint_headers,\n"
    "                scope.header, the scope secret) other than those the store was written with\n"
    "       idemgate --restore CHECKPOINT --config FILE\n"
    "                copy a checkpoint made by POST /backup into store.path (new or empty;\n"
    "                the gateway stopped), check that it opens, and exit\n"
    "       idemgate --version | --help\n";

struct Args {
  std::string config_path;
  bool check_only = false;
  bool accept_new_signature = false;  // start although the store's settings signature differs
  std::string restore_from;           // --restore: a checkpoint directory
};

// Returns -1 to go on, or an exit code.
int ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--version") {
      fputs(VersionText().c_str(), stdout);
      return 0;
    } else if (arg == "--check-config") {
      args->check_only = true;
    } else if (arg == "--accept-new-signature") {
      args->accept_new_signature = true;
    } else if (arg == "--restore" && i + 1 < argc) {
      args->restore_from = argv[++i];
    } else if (arg == "--config" && i + 1 < argc) {
      args->config_path = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      args->config_path = arg.substr(9);
    } else {
      LogF(LogLevel::kError, "main", "unknown argument '%s' (idemgate --help lists them)",
           arg.c_str());
      return 2;
    }
  }
  if (args->config_path.empty()) {
    LogF(LogLevel::kError, "main", "--config FILE is required (idemgate --help)");
    return 2;
  }
  return -1;
}

void SetStopSignalsBlocked(bool blocked) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

// Runs until SIGTERM/SIGINT; then drains the workers within the grace period.
class Server {
 public:
  Server(std::shared_ptr<const Config> config, std::string config_path, bool accept_new_signature)
      : config_path_(std::move(config_path)), accept_new_signature_(accept_new_signature) {
    gateway_.SetConfig(config);
  }

  bool Open(std::string* error) {
    const Config& config = *gateway_.Snapshot();
    // Before the store is opened or created: a second instance must not touch anything.
    if (!CheckListenAddressFree(config.listen.addr, error)) return false;
    const bool embedded = config.store.backend == "rocksdb";
    if (std::string e = embedded ? PrepareStoreDirectory(config.store.path) : ""; !e.empty()) {
      *error = e;
      return false;
    }
    StoreHooks hooks;
    hooks.clock = &clock_;
    metrics_ = std::make_unique<Metrics>(WorkerCount(config));  // one shard per worker
    hooks.on_batch = [metrics = metrics_.get()](size_t ops, int64_t) {
      metrics->ObserveBatchSize(ops);
    };
    store_ = OpenStore(config, hooks, error);
    if (!store_) {
      if (embedded) *error = ExplainStoreOpenError(config.store.path, *error);
      return false;
    }
    // Before any loop runs: settings that would remap live records need the operator's consent.
    std::string note;
    if (!CheckStoreSignature(store_.get(), config, accept_new_signature_, error, &note)) {
      return false;
    }
    if (!note.empty()) Log(LogLevel::kWarn, "store", note);
    // The replay cache only over a store no other process writes: an admin delete on another
    // instance could not evict it (a shared store's replays are read from the database).
    if (store_->Shared()) {
      gateway_.store = store_.get();
    } else {
      caching_store_ = std::make_unique<CachingStore>(store_.get(), &replay_cache_);
      gateway_.store = caching_store_.get();
      gateway_.replay_cache = &replay_cache_;
    }
    gateway_.unsent = &unsent_;
    gateway_.waits = &waits_;
    metrics_->SetWaitersSource([waits = &waits_] { return waits->size(); });
    metrics_->SetUnsentBytesSource([unsent = &unsent_] { return unsent->bytes(); });
    gateway_.clock = &clock_;
    if (!OpenObservability(config, error) || !OpenTls(config, error)) return false;
    // The admin thread first: a failure here leaves no worker thread running.
    return StartAdmin(config, error) && StartWorkers(config, error);
  }

  void Run() {
    EventBasePtr base(event_base_new());
    main_base_ = base.get();
    EventPtr term(evsignal_new(base.get(), SIGTERM, &Server::OnStop, this));
    EventPtr intr(evsignal_new(base.get(), SIGINT, &Server::OnStop, this));
    EventPtr hup(evsignal_new(base.get(), SIGHUP, &Server::OnHangup, this));
    evsignal_add(term.get(), nullptr);
    evsignal_add(intr.get(), nullptr);
    evsignal_add(hup.get(), nullptr);
    // Blocked since before the first thread started (Main): a signal that arrived during
    // start-up was held pending and is delivered now, to this thread's handlers.
    SetStopSignalsBlocked(false);
    event_base_dispatch(base.get());
    int64_t grace = gateway_.Snapshot()->server.shutdown_grace_ms;
    if (admin_) admin_->SetDraining();
    for (auto& worker : workers_) worker->Shutdown(grace);
    for (auto& worker : workers_) worker->Join();
    if (admin_) admin_->Stop();  // before the store closes: /readyz probes the store
    store_->Close();             // after the loops: every queued write is finished first
    workers_.clear();
    if (access_log_) access_log_->Close();  // writes every queued line
  }

 private:
  static int WorkerCount(const Config& config) {
    int count = config.server.workers > 0 ? config.server.workers
                                          : static_cast<int>(std::thread::hardware_concurrency());
    return count > 0 ? count : 1;
  }

  // Metrics sources and the access log, before any worker starts.
  bool OpenObservability(const Config& config, std::string* error) {
    Store* store = store_.get();
    metrics_->SetRecordsSource([store] { return store->ApproximateRecords(); });
    reload_stats_.ConfigLoaded(config_path_);
    metrics_->SetExtraSource([stats = &reload_stats_] {
      return RenderProcessMetrics() + stats->Render();
    });
    gateway_.metrics = metrics_.get();
    if (config.log.access != "off") {
      access_log_ = AccessLog::Open(config.log.access, error);
      if (!access_log_) return false;
      AccessLog* log = access_log_.get();
      metrics_->SetAccessLogDroppedSource([log] { return log->dropped(); });
      gateway_.access_log = log;
    }
    return true;
  }

  // TLS contexts, shared read-only by every worker's connections.
  bool OpenTls(const Config& config, std::string* error) {
    if (!config.listen.tls_cert.empty()) {
      server_tls_ = MakeServerTlsContext(config.listen.tls_cert, config.listen.tls_key, error);
      if (!server_tls_) return false;
      OfferAlpn(server_tls_.get(), config.listen.http2);
      gateway_.server_tls = server_tls_.get();
    }
    if (config.upstream.tls) {
      upstream_tls_ = MakeClientTlsContext(config.upstream.ca_file, error);
      if (!upstream_tls_) return false;
      gateway_.upstream_tls = upstream_tls_.get();
    }
    for (const auto& [name, group] : config.upstream_groups) {
      if (!group.tls) continue;
      SslCtxPtr ctx = MakeClientTlsContext(group.ca_file, error);
      if (!ctx) return false;
      gateway_.upstream_group_tls.emplace(name, ctx.get());
      group_tls_.push_back(std::move(ctx));
    }
    return true;
  }

  bool StartAdmin(const Config& config, std::string* error) {
    if (config.admin.address.empty()) return true;
    admin_ = std::make_unique<AdminServer>(&gateway_, metrics_.get());
    uint16_t port = 0;
    if (!admin_->Start(config.admin.addr, &port, error)) return false;
    printf("admin listening on %s:%u\n", config.admin.addr.host.c_str(), port);
    fflush(stdout);
    return true;
  }

  bool StartWorkers(const Config& config, std::string* error) {
    int count = WorkerCount(config);
    CheckOpenFileLimit(config);
    uint16_t port = config.listen.addr.port;
    for (int i = 0; i < count; ++i) {
      auto worker = std::make_unique<Worker>(i, &gateway_);
      if (!worker->Init(error) || !worker->Listen(config.listen.addr, &port, error)) return false;
      workers_.push_back(std::move(worker));
    }
    for (auto& worker : workers_) worker->Start();
    printf("listening on %s:%u\n", config.listen.addr.host.c_str(), port);
    fflush(stdout);
    LogF(LogLevel::kInfo, "main", "idemgate %s (commit %s): %d workers, upstream %s, store %s",
         GetBuildInfo().version.c_str(), GetBuildInfo().commit.c_str(), count,
         DescribeUpstream(config.upstream).c_str(), DescribeStore(config).c_str());
    return true;
  }

  static std::string DescribeUpstream(const Config::Upstream& upstream) {
    if (upstream.servers.empty()) return upstream.url;
    std::string out;
    for (const std::string& server : upstream.servers) out += (out.empty() ? "" : ", ") + server;
    return out + " (" + upstream.balance + ")";
  }

  // Each client connection may need an upstream one too, and the store and the loops need some:
  // raise the soft open-file limit towards that (up to the hard limit), and say so when the
  // limit stays lower (accept() then fails at the limit and the workers pause accepting).
  static void CheckOpenFileLimit(const Config& config) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
    const rlim_t wanted = static_cast<rlim_t>(config.limits.max_connections) * 2 + 256;
    if (limit.rlim_cur >= wanted) return;
    rlimit raised = limit;
    raised.rlim_cur = std::min(wanted, limit.rlim_max);
    if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
    if (limit.rlim_cur >= wanted) return;
    LogF(LogLevel::kWarn, "main",
         "the open-file limit (%llu) is below what limits.max_connections (%lld) may need (%llu: "
         "a client and an upstream connection each, and 256 for the store); past it new "
         "connections wait. Raise the limit (ulimit -n, LimitNOFILE=) or lower "
         "limits.max_connections.",
         static_cast<unsigned long long>(limit.rlim_cur),
         static_cast<long long>(config.limits.max_connections),
         static_cast<unsigned long long>(wanted));
  }

  // SIGHUP: reopen the access log at its path (after logrotate renamed the old file), and
  // reload the config file: live keys apply to new exchanges; a broken file changes nothing.
  static void OnHangup(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Server*>(arg);
    if (self->access_log_) self->access_log_->Reopen();
    self->Reload();
  }

  void Reload() {
    ConfigResult loaded = LoadConfig(config_path_);
    if (!loaded.ok()) {
      reload_stats_.ReloadFailed();  // counted before the line: a reader of the line sees it
      LogF(LogLevel::kError, "reload", "reload failed, keeping the running config: %s",
           loaded.error.c_str());
      return;
    }
    ReloadPlan plan = PlanReload(*gateway_.Snapshot(), *loaded.config);
    for (const std::string& key : plan.ignored) {
      LogF(LogLevel::kWarn, "reload", "%s changed; it takes effect after a restart", key.c_str());
    }
    gateway_.SetConfig(plan.config);
    reload_stats_.ReloadSucceeded(config_path_);
    LogF(LogLevel::kInfo, "reload", "config reloaded from %s", config_path_.c_str());
  }

  static void OnStop(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Server*>(arg);
    Log(LogLevel::kInfo, "main", "shutting down");
    event_base_loopbreak(self->main_base_);
  }

  std::string config_path_;
  const bool accept_new_signature_;
  SystemClock clock_;
  SslCtxPtr server_tls_;  // before gateway_ and the workers: destroyed after them
  SslCtxPtr upstream_tls_;
  std::vector<SslCtxPtr> group_tls_;  // named https groups
  Gateway gateway_;
  ReloadStats reload_stats_;           // before metrics_: its source reads it
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

// The host checks (proxy/preflight.h), for --check-config and before start: each of these
// would stop the start later with a less direct message.
bool RunPreflight(const Config& config, const std::string& config_path) {
  std::vector<PreflightProblem> problems = Preflight(config);
  for (const PreflightProblem& p : problems) {
    LogF(LogLevel::kError, "config", "%s: %s", config_path.c_str(), p.message.c_str());
  }
  return problems.empty();
}

// --restore: the checkpoint's files copied into store.path, then opened once (a damaged copy
// fails here, not at the next start). The store's settings signature comes with the copy.
int Restore(const Config& config, const std::string& from) {
  if (config.store.backend != "rocksdb") {
    Log(LogLevel::kError, "main",
        "--restore is for the embedded (rocksdb) store; restore PostgreSQL with pg_restore or "
        "point-in-time recovery");
    return 1;
  }
  if (std::string e = RestoreCheckpoint(from, config.store.path); !e.empty()) {
    LogF(LogLevel::kError, "main", "restore failed: %s", e.c_str());
    return 1;
  }
  SystemClock clock;
  StoreHooks hooks;
  hooks.clock = &clock;
  std::string error;
  std::unique_ptr<Store> store = OpenStore(config, hooks, &error);
  if (!store) {
    LogF(LogLevel::kError, "main", "the restored store does not open: %s",
         ExplainStoreOpenError(config.store.path, error).c_str());
    return 1;
  }
  uint64_t records = store->ApproximateRecords();
  store->Close();
  printf("restored %s into store.path %s (about %llu records); start idemgate with this config\n",
         from.c_str(), config.store.path.c_str(), static_cast<unsigned long long>(records));
  return 0;
}

int Main(int argc, char** argv) {
  Args args;
  if (int rc = ParseArgs(argc, argv, &args); rc >= 0) return rc;
  // Every file the gateway creates (the store's, whatever RocksDB makes) is private to its user;
  // the access log is widened to 0640 where it is opened.
  umask(077);
  ConfigResult loaded = LoadConfig(args.config_path);
  if (!loaded.ok()) {
    Log(LogLevel::kError, "config", loaded.error);
    return 1;
  }
  // A restore needs only store.path: an upstream that does not resolve right now must not stop it.
  if (!args.restore_from.empty()) return Restore(*loaded.config, args.restore_from);
  if (!RunPreflight(*loaded.config, args.config_path)) return 1;
  if (args.check_only) {
    printf("%s: configuration OK\n", args.config_path.c_str());
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  // Every thread started from here on inherits the mask, so SIGTERM/SIGINT/SIGHUP are only
  // ever handled by the main loop, and one sent during start-up is not lost or fatal.
  SetStopSignalsBlocked(true);
  evthread_use_pthreads();
  Server server(loaded.config, args.config_path, args.accept_new_signature);
  std::string error;
  if (!server.Open(&error)) {
    Log(LogLevel::kError, "main", error);
    return 1;
  }
  server.Run();
  Log(LogLevel::kInfo, "main", "stopped");
  return 0;
}

}  // namespace
}  // namespace idemgate

int main(int argc, char** argv) { return idemgate::Main(argc, argv); }

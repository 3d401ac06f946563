// SPDX-License-Identifier: Apache-2.0
// Server (see server.h): opening the process's parts in order, running the main loop's signal
// handlers (stop, reload), and the drain at shutdown.
#include "proxy/server.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/log.h"
#include "conf/config_values.h"
#include "proxy/net/event_util.h"
#include "proxy/ops/build_info.h"
#include "proxy/ops/certificates.h"
#include "proxy/ops/ops_metrics.h"
#include "proxy/ops/preflight.h"
#include "proxy/ops/store_signature.h"
#include "proxy/service_manager.h"
#include "store/store_backup.h"
#include "store/store_factory.h"

namespace idemgate {
namespace {

// With the default limits.max_connections, an open-file limit of at least this is not warned
// about (about 2000 client connections, each with an upstream one).
constexpr rlim_t kQuietOpenFileLimit = 4096;

// See Run: how long a handover over a shared store keeps idle keep-alive connections open.
constexpr int64_t kHandoverIdleLingerMs = 1'000;

}  // namespace


void SetStopSignalsBlocked(bool blocked) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

bool Server::Open(std::string* error) {
  const Config& config = *gateway_.Snapshot();
  // Before the store is opened or created: a second instance must not touch anything. Taking
  // over, this process is the running one's successor, and receives its listeners instead.
  if (take_over_) {
    if (!ReceiveListeners(config, error)) return false;
  } else if (!CheckListenAddressFree(config.listen.addr, error)) {
    return false;
  }
  const bool embedded = config.store.backend == "rocksdb";
  if (std::string e = embedded ? PrepareStoreDirectory(config.store.path) : ""; !e.empty()) {
    *error = e;
    return false;
  }
  metrics_ = std::make_unique<Metrics>(WorkerCount(config));  // one shard per worker
  // What can fail without the store comes first: a take-over that fails here leaves the
  // running gateway serving.
  if (!OpenObservability(config, error) || !OpenTls(config, error)) return false;
  // One writer at a time: the old gateway closes the embedded store before this one opens it.
  if (take_over_ && embedded && !StopOldGateway(/*wait_closed=*/true, error)) return false;
  if (!OpenStoreParts(config, error)) return false;
  // The admin thread first: a failure here leaves no worker thread running.
  if (!StartAdmin(config, error) || !StartWorkers(config, error)) return false;
  // A shared store may have two writers: the old gateway drains while this one serves.
  if (take_over_ && !embedded) StopOldGateway(/*wait_closed=*/false, error);
  return true;
}

bool Server::OpenStoreParts(const Config& config, std::string* error) {
  const bool embedded = config.store.backend == "rocksdb";
  StoreHooks hooks;
  hooks.clock = &clock_;
  hooks.on_batch = [metrics = metrics_.get()](size_t ops, int64_t write_us) {
    metrics->ObserveBatch(ops, write_us);
  };
  hooks.sealed = &sealed_;
  store_ = take_over_ && embedded ? OpenTakenOverStore(config, hooks, error)
                                  : OpenStore(config, hooks, error);
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
  return true;
}

void Server::Run() {
  EventBasePtr base(event_base_new());
  main_base_ = base.get();
  EventPtr term(evsignal_new(base.get(), SIGTERM, &Server::OnStop, this));
  EventPtr intr(evsignal_new(base.get(), SIGINT, &Server::OnStop, this));
  EventPtr hup(evsignal_new(base.get(), SIGHUP, &Server::OnHangup, this));
  evsignal_add(term.get(), nullptr);
  evsignal_add(intr.get(), nullptr);
  evsignal_add(hup.get(), nullptr);
  WatchHandoverSocket(base.get());
  // Blocked since before the first thread started (Main): a signal that arrived during
  // start-up was held pending and is delivered now, to this thread's handlers.
  SetStopSignalsBlocked(false);
  event_base_dispatch(base.get());
  int64_t grace = gateway_.Snapshot()->server.shutdown_grace_ms;
  // Handing over, /readyz stays ready: the same admin socket goes on serving, from the new one.
  if (!handing_over_) {
    if (admin_) admin_->SetDraining();
    NotifyServiceManager("STOPPING=1");
  }
  // Handing over, idle keep-alive connections stay open while exchanges finish (with a shared
  // store, for up to kHandoverIdleLingerMs more: the new gateway serves meanwhile), so that a
  // request sent on one is answered, with Connection: close, rather than cut.
  const int64_t linger = !handing_over_ ? -1 : store_->Shared() ? kHandoverIdleLingerMs : 0;
  for (auto& worker : workers_) worker->Shutdown(grace, linger);
  for (auto& worker : workers_) worker->Join();
  if (admin_) admin_->Stop();  // before the store closes: /readyz probes the store
  store_->Close();             // after the loops: every queued write is finished first
  FinishHandover();            // "closed": the gateway taking over opens the store now
  workers_.clear();
  if (access_log_) access_log_->Close();  // writes every queued line
}

int Server::WorkerCount(const Config& config) {
  int count = config.server.workers > 0 ? config.server.workers
                                        : static_cast<int>(std::thread::hardware_concurrency());
  return count > 0 ? count : 1;
}

bool Server::OpenObservability(const Config& config, std::string* error) {
  // Read at each scrape: the store opens after this (a take-over opens it last).
  metrics_->SetRecordsSource([this] { return store_->ApproximateRecords(); });
  reload_stats_.ConfigLoaded(config_path_);
  metrics_->SetExtraSource([this] {
    return RenderProcessMetrics() + reload_stats_.Render() + server_certs_.RenderMetrics() +
           RenderCaExpiryMetrics(*gateway_.Snapshot()) + sealed_->RenderMetrics();
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

bool Server::OpenTls(const Config& config, std::string* error) {
  const std::vector<std::string>& certs = config.listen.certificate_files;  // cert, key, ...
  if (certs.size() >= 2) {
    server_tls_ = MakeServerTlsContext(certs[0], certs[1], error);
    if (!server_tls_) return false;
    // Each handshake takes its current pair from server_certs_ (by SNI; replaced on SIGHUP).
    if (!server_certs_.Install(server_tls_.get(), certs, error)) {
      return false;
    }
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

bool Server::StartAdmin(const Config& config, std::string* error) {
  if (config.admin.address.empty()) return true;
  admin_ = std::make_unique<AdminServer>(&gateway_, metrics_.get());
  uint16_t port = 0;
  const int handed = taken_.admin_fd;  // a take-over's admin socket, when it listens on the same
  taken_.admin_fd = -1;
  if (!admin_->Start(config.admin.addr, &port, error, handed)) return false;
  admin_port_ = port;
  printf("admin listening on %s:%u\n", config.admin.addr.host.c_str(), port);
  fflush(stdout);
  return true;
}

bool Server::StartWorkers(const Config& config, std::string* error) {
  int count = WorkerCount(config);
  CheckOpenFileLimit(config);
  CheckBusyPollCpus(config, count);
  uint16_t port = config.listen.addr.port;
  // Taken over: worker i accepts from sockets i, i + count, ...; a worker left without one
  // binds its own, which joins the same SO_REUSEPORT group.
  std::vector<int> handed = std::move(taken_.listen_fds);
  taken_.listen_fds.clear();
  if (!handed.empty()) port = taken_.listen_port;
  for (int i = 0; i < count; ++i) {
    auto worker = std::make_unique<Worker>(i, &gateway_);
    if (!worker->Init(error)) return false;
    bool adopted = false;
    for (size_t j = i; j < handed.size(); j += count) {
      if (!worker->Adopt(handed[j], &port, error)) return false;
      adopted = true;
    }
    if (!adopted && !worker->Listen(config.listen.addr, &port, error)) return false;
    workers_.push_back(std::move(worker));
  }
  listen_port_ = port;
  for (auto& worker : workers_) worker->Start();
  // Before "listening on": whoever waits for that line can take over from this gateway.
  OpenHandoverSocket(config);
  printf("listening on %s:%u\n", config.listen.addr.host.c_str(), port);
  fflush(stdout);
  NotifyServiceManager("READY=1");  // systemd's Type=notify: started
  LogF(LogLevel::kInfo, "main", "idemgate %s (commit %s): %d workers, upstream %s, store %s",
       GetBuildInfo().version.c_str(), GetBuildInfo().commit.c_str(), count,
       DescribeUpstream(config.upstream).c_str(), DescribeStore(config).c_str());
  return true;
}

std::string Server::DescribeUpstream(const Config::Upstream& upstream) {
  if (upstream.servers.empty()) return upstream.url;
  std::string out;
  for (const std::string& server : upstream.servers) out += (out.empty() ? "" : ", ") + server;
  return out + " (" + upstream.balance + ")";
}

// A worker that busy-polls holds its CPU while it polls: with one on every CPU the store thread,
// the upstream and the clients wait for one.
void Server::CheckBusyPollCpus(const Config& config, int workers) {
  if (config.server.busy_poll_us <= 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  const int cpus = CPU_COUNT(&set);
  if (workers < cpus) return;
  LogF(LogLevel::kWarn, "main",
       "server.busy_poll (%s) with %d workers on %d CPUs: each worker holds a CPU while it "
       "polls, leaving none for the store thread, the upstream or the clients; set "
       "server.workers below the number of CPUs",
       conf::FormatDurationUs(config.server.busy_poll_us).c_str(), workers, cpus);
}

void Server::CheckOpenFileLimit(const Config& config) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(config.limits.max_connections) * 2 + 256;
  if (limit.rlim_cur >= wanted) return;
  rlimit raised = limit;
  raised.rlim_cur = std::min(wanted, limit.rlim_max);
  if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  if (limit.rlim_cur >= wanted) return;
  // The default max_connections (10000) is a ceiling, not a sizing: on a machine whose limit
  // leaves room for a few thousand connections, the default config starts quietly.
  static const Config kDefaults;
  const bool default_ceiling = config.limits.max_connections == kDefaults.limits.max_connections;
  if (default_ceiling && limit.rlim_cur >= kQuietOpenFileLimit) return;
  LogF(LogLevel::kWarn, "main",
       "the open-file limit (%llu) is below what limits.max_connections (%lld) may need (%llu: "
       "a client and an upstream connection each, and 256 for the store); past it new "
       "connections wait. Raise the limit (ulimit -n, LimitNOFILE=) or lower "
       "limits.max_connections.",
       static_cast<unsigned long long>(limit.rlim_cur),
       static_cast<long long>(config.limits.max_connections),
       static_cast<unsigned long long>(wanted));
}

void Server::OnHangup(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  if (self->access_log_) self->access_log_->Reopen();
  self->Reload();
}

void Server::Reload() {
  ConfigResult loaded = LoadConfig(config_path_);
  if (!loaded.ok()) {
    reload_stats_.ReloadFailed();  // counted before the line: a reader of the line sees it
    for (const std::string& e : loaded.errors) {
      LogF(LogLevel::kError, "reload", "reload failed, keeping the running config: %s",
           e.c_str());
    }
    return;
  }
  ReloadPlan plan = PlanReload(*gateway_.Snapshot(), *loaded.config);
  std::string key_error;  // the key files are read again, changed or not (SPEC §13 E1)
  if (plan.config->store.encryption.enabled &&
      !ReloadStoreKeys(sealed_, *plan.config, &key_error)) {
    reload_stats_.ReloadFailed();
    LogF(LogLevel::kError, "reload", "reload failed, keeping the running config and keys: %s",
         key_error.c_str());
    return;
  }
  // The upstream CA files, then the listener's certificates and keys, read again from the same
  // files and verified first: one that fails refuses the whole reload (nothing changes).
  if (std::string ca_error = VerifyUpstreamCas(gateway_, *gateway_.Snapshot()); !ca_error.empty()) {
    reload_stats_.ReloadFailed();
    LogF(LogLevel::kError, "reload",
         "reload failed, keeping the running config and certificates: %s", ca_error.c_str());
    return;
  }
  std::string cert_change;
  if (server_tls_) {
    std::string detail;
    ServerCertificates::Outcome outcome = server_certs_.Reload(&detail);
    if (outcome == ServerCertificates::Outcome::kRefused) {
      reload_stats_.ReloadFailed();
      LogF(LogLevel::kError, "reload",
           "reload failed, keeping the running config and certificate: listen.tls_cert/"
           "listen.tls_key: %s",
           detail.c_str());
      return;
    }
    if (outcome == ServerCertificates::Outcome::kReplaced) {
      cert_change = "listen.tls_cert certificate replaced (" + detail + ")";
    }
  }
  const std::string ca_change = ReloadUpstreamCas(gateway_, *gateway_.Snapshot());
  if (!ca_change.empty()) cert_change += (cert_change.empty() ? "" : "; ") + ca_change;
  for (const std::string& key : plan.ignored) {
    LogF(LogLevel::kWarn, "reload", "%s changed; it takes effect after a restart", key.c_str());
  }
  gateway_.SetConfig(plan.config);
  reload_stats_.ReloadSucceeded(config_path_);
  LogReloaded(plan, cert_change);
}

void Server::LogReloaded(const ReloadPlan& plan, const std::string& cert_change) const {
  std::string changed;
  for (const std::string& key : plan.changed) changed += (changed.empty() ? "" : ", ") + key;
  if (!cert_change.empty()) changed += (changed.empty() ? "" : "; ") + cert_change;
  LogF(LogLevel::kInfo, "reload", "config reloaded from %s: %s%s", config_path_.c_str(),
       changed.empty() ? "nothing changed" : "changed ", changed.c_str());
}

void Server::OnStop(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Server*>(arg);
  Log(LogLevel::kInfo, "main", "shutting down");
  event_base_loopbreak(self->main_base_);
}

}  // namespace idemgate

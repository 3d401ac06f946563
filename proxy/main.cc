// SPDX-License-Identifier: Apache-2.0
// idemgate: the command line (run, --check-config, --restore, --version), around Server
// (server.h): argv -> config -> store -> loops -> run -> clean shutdown.
#include <event2/thread.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "conf/config.h"
#include "proxy/handover.h"
#include "proxy/ops/build_info.h"
#include "proxy/ops/preflight.h"
#include "proxy/ops/store_signature.h"
#include "proxy/server.h"
#include "proxy/service_manager.h"
#include "store/store_backup.h"
#include "store/store_factory.h"

namespace idemgate {
namespace {

constexpr char kUsage[] =
    "usage: idemgate --config FILE          run the gateway\n"
    "       idemgate --check-config --config FILE   validate the configuration and exit\n"
    "       idemgate --accept-new-signature --config FILE\n"
    "                run, accepting key settings (idempotency.header, fingerprint_headers,\n"
    "                scope.header, the scope secret) other than those the store was written with\n"
    "       idemgate --take-over --config FILE\n"
    "                run, taking the listeners over from the gateway running now (an upgrade or\n"
    "                a restart that refuses no connection): it drains and exits, this one serves\n"
    "       idemgate --upgrade --config FILE\n"
    "                check FILE, then have the running gateway start its successor (the binary\n"
    "                now at its path, with --take-over) and wait until that one serves\n"
    "       idemgate --restore CHECKPOINT --config FILE\n"
    "                copy a checkpoint made by POST /backup into store.path (new or empty;\n"
    "                the gateway stopped), check that it opens, and exit\n"
    "       idemgate --version | --help\n";

struct Args {
  std::string config_path;
  bool check_only = false;
  bool accept_new_signature = false;  // start although the store's settings signature differs
  bool take_over = false;             // receive the listeners from the running gateway
  bool upgrade = false;               // ask the running gateway to start its successor
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
    } else if (arg == "--upgrade") {
      args->upgrade = true;
    } else if (arg == "--take-over") {
      args->take_over = true;
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

// The host checks (proxy/preflight.h), for --check-config and before start: each of these
// would stop the start later with a less direct message.
bool RunPreflight(const Config& config, const std::string& config_path, bool check_only) {
  std::vector<PreflightProblem> problems = Preflight(config, /*probe_bound=*/check_only);
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
    for (const std::string& e : loaded.errors) Log(LogLevel::kError, "config", e);
    if (loaded.errors.size() > 1) {
      LogF(LogLevel::kError, "config", "%s: %zu problems", args.config_path.c_str(),
           loaded.errors.size());
    }
    return 1;
  }
  // A restore needs only store.path: an upstream that does not resolve right now must not stop it.
  if (!args.restore_from.empty()) return Restore(*loaded.config, args.restore_from);
  // The binary as started: an upgrade starts the successor from this path.
  StartedBinaryPath();
  if (!RunPreflight(*loaded.config, args.config_path, args.check_only || args.upgrade)) return 1;
  if (args.upgrade) return RunUpgrade(*loaded.config);
  if (args.check_only) {
    std::vector<std::string> key_lines;
    std::string key_error;
    if (!CheckStoreKeys(*loaded.config, &key_lines, &key_error)) {
      LogF(LogLevel::kError, "config", "%s: %s", args.config_path.c_str(), key_error.c_str());
      return 1;
    }
    for (const std::string& line : key_lines) printf("%s\n", line.c_str());
    printf("%s: configuration OK\n", args.config_path.c_str());
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  // Every thread started from here on inherits the mask, so SIGTERM/SIGINT/SIGHUP are only
  // ever handled by the main loop, and one sent during start-up is not lost or fatal.
  SetStopSignalsBlocked(true);
  evthread_use_pthreads();
  Server server(loaded.config, args.config_path, args.accept_new_signature, args.take_over);
  std::string error;
  if (!server.Open(&error)) {
    Log(LogLevel::kError, "main", error);
    // Unblocked before ~Server joins the threads Open started: should any of them wait, a
    // SIGTERM still ends the process instead of staying pending for ever.
    SetStopSignalsBlocked(false);
    return 1;
  }
  server.Run();
  Log(LogLevel::kInfo, "main", "stopped");
  return 0;
}

}  // namespace
}  // namespace idemgate

int main(int argc, char** argv) { return idemgate::Main(argc, argv); }

// SPDX-License-Identifier: Apache-2.0
// PostgreSQL store benchmark: claim+complete pairs/s through PgStore with 1/16/64 callers (one
// connection per caller), next to pgbench running the same two statements at the same
// concurrency against the same server in the same run. Starts its own server (fsync on);
// --standby adds a synchronous standby. Usage: pg_store_bench [--seconds N] [--standby]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/pg_sql.h"
#include "store/pg_store.h"
#include "tests/support/pg_cluster.h"

namespace idemgate {
namespace {

using Clock = std::chrono::steady_clock;

// `callers` closed loops (claim a fresh key -> complete it -> next) for `seconds`.
double StorePairsPerSecond(Store* store, int callers, int seconds) {
  std::atomic<uint64_t> next{0}, pairs{0};
  std::atomic<bool> stop{false}, failed{false};
  std::atomic<int> running{callers};
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> one = [&] {
    if (stop) {
      std::lock_guard lock(mu);
      if (--running == 0) cv.notify_all();
      return;
    }
    ClaimRequest req;
    req.scope[0] = 1;
    req.key = "bench-" + std::to_string(callers) + "-" + std::to_string(next++);
    req.fingerprint[0] = 2;
    store->Claim(std::move(req), [&](ClaimResult r) {
      if (!r.status.ok() || r.outcome != ClaimOutcome::kFresh) failed = true;
      StoredResponse resp;
      resp.status = 201;
      resp.reason = "Created";
      resp.headers = {{"Content-Type", "application/json"}};
      resp.body = R"({"id":"pay_123456789","amount":1000,"currency":"EUR","status":"ok"})";
      store->Complete(std::move(r.token), std::move(resp), [&](StoreStatus s) {
        if (!s.ok()) failed = true;
        ++pairs;
        one();
      });
    });
  };
  auto start = Clock::now();
  for (int c = 0; c < callers; ++c) one();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));  // the measured interval
  uint64_t done = pairs.load();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return running == 0; });
  if (failed) fprintf(stderr, "a claim or completion failed\n");
  return done / elapsed;
}

// The store's two statements as a pgbench script: $n -> pgbench variables and literals.
std::string PgbenchScript() {
  auto subst = [](std::string sql, const std::vector<std::pair<std::string, std::string>>& m) {
    for (auto it = m.rbegin(); it != m.rend(); ++it) {
      for (size_t at; (at = sql.find(it->first)) != std::string::npos;) {
        sql.replace(at, it->first.size(), it->second);
      }
    }
    return sql;
  };
  const std::string scope = "'\\x01" + std::string(62, '0') + "'::bytea";
  const std::string key = "convert_to('pgb-' || :client_id || '-' || :k, 'UTF8')";
  std::string claim = subst(pg::kClaimSql, {{"$1", scope},
                                            {"$2", key},
                                            {"$3", "'\\x02'::bytea"},
                                            {"$4", ":k"},
                                            {"$5", "30000"},
                                            {"$6", "86400000"},
                                            {"$7", "0"}});
  std::string complete =
      subst(pg::kCompleteSql,
            {{"$1", scope},
             {"$2", key},
             {"$3", "1"},
             {"$4", ":k"},
             {"$5", "201"},
             {"$6", "'Created'::bytea"},
             {"$7", "'\\x0000000c436f6e74656e742d5479706500000010617070'::bytea"},
             {"$8",
              "convert_to('{\"id\":\"pay_123456789\",\"amount\":1000,\"currency\":\"EUR\"}', "
              "'UTF8')"},
             {"$9", "false"}});
  return "\\set k random(1, 9000000000000000000)\n" + claim + ";\n" + complete + ";\n";
}

double PgbenchPairsPerSecond(const test::PgCluster& pg, int clients, int seconds) {
  std::string dir = "/tmp/idemgate-pgbench-" + std::to_string(getpid());
  std::string script = dir + ".sql", out = dir + ".out";
  std::ofstream(script) << PgbenchScript();
  std::string cmd = test::PgCluster::BinDir() + "/pgbench -n -M prepared -h 127.0.0.1 -p " +
                    std::to_string(pg.port(0)) + " -U idemgate -c " + std::to_string(clients) +
                    " -j 2 -T " + std::to_string(seconds) + " -f " + script + " postgres >" + out +
                    " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::string line;
  double tps = 0;
  while (std::getline(in, line)) {
    if (line.rfind("tps = ", 0) == 0) tps = atof(line.c_str() + 6);
    if (rc != 0) fprintf(stderr, "pgbench: %s\n", line.c_str());
  }
  unlink(script.c_str());
  unlink(out.c_str());
  return tps;
}

int Main(int argc, char** argv) {
  int seconds = 5;
  bool standby = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atoi(argv[++i]);
    if (!strcmp(argv[i], "--standby")) standby = true;
  }
  test::PgCluster pg;
  pg.set_fsync(true);
  std::string error;
  if (!pg.StartPrimary(&error) || (standby && pg.AddStandby(true, &error) < 0)) {
    fprintf(stderr, "cannot start PostgreSQL: %s\n", error.c_str());
    return 1;
  }
  printf("PostgreSQL %s, fsync on, synchronous_commit on, %u cores, %d s per row\n",
         standby ? "+ synchronous standby" : "alone", std::thread::hardware_concurrency(), seconds);
  printf("| callers | PgStore pairs/s | pgbench pairs/s | ratio |\n|---:|---:|---:|---:|\n");
  for (int callers : {1, 16, 64}) {
    PgStoreOptions o;
    o.dsn = pg.Dsn(0);
    o.connections = callers;
    std::unique_ptr<Store> store = OpenPgStore(o, &error);
    if (!store) {
      fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    double ours = StorePairsPerSecond(store.get(), callers, seconds);
    store->Close();
    double theirs = PgbenchPairsPerSecond(pg, callers, seconds);
    printf("| %d | %.0f | %.0f | %.2f |\n", callers, ours, theirs, theirs > 0 ? ours / theirs : 0);
    fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace idemgate

int main(int argc, char** argv) { return idemgate::Main(argc, argv); }

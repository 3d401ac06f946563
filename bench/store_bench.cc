// SPDX-License-Identifier: Apache-2.0
// Store benchmark: claim+complete pairs per second with N outstanding callers, sync on and off.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "store/rocks_store.h"

namespace idemgate {
namespace {

// One measured round: `callers` closed loops (claim a fresh key -> complete it -> next) until
// `pairs` pairs completed.
class Round {
 public:
  Round(Store* store, std::atomic<uint64_t>* next_key, int64_t pairs)
      : store_(store), next_key_(next_key), pairs_(pairs) {}

  void Run(int callers) {
    for (int c = 0; c < callers; ++c) StartOne();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return finished_ == pairs_; });
  }
  bool failed() const { return failed_.load(); }

 private:
  void StartOne() {
    if (started_.fetch_add(1) >= pairs_) return;
    ClaimRequest req;
    req.scope[0] = 1;
    req.key = "bench-" + std::to_string(next_key_->fetch_add(1));
    req.fingerprint[0] = 2;
    store_->Claim(std::move(req), [this](ClaimResult r) {
      if (!r.status.ok() || r.outcome != ClaimOutcome::kFresh) failed_ = true;
      StoredResponse resp;
      resp.status = 201;
      resp.reason = "Created";
      resp.headers = {{"Content-Type", "application/json"}};
      resp.body = R"({"id":"pay_123456789","amount":1000,"currency":"EUR","status":"ok"})";
      store_->Complete(std::move(r.token), std::move(resp), [this](StoreStatus s) {
        if (!s.ok()) failed_ = true;
        StartOne();
        std::lock_guard lock(mu_);
        if (++finished_ == pairs_) cv_.notify_one();
      });
    });
  }

  Store* store_;
  std::atomic<uint64_t>* next_key_;
  const int64_t pairs_;
  std::atomic<int64_t> started_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t finished_ = 0;
};

void BM_ClaimComplete(benchmark::State& state) {
  const int callers = static_cast<int>(state.range(0));
  const bool sync = state.range(1) != 0;
  const int64_t pairs_per_round = callers == 1 ? 200 : 100 * callers;
  std::string dir = (std::filesystem::temp_directory_path() / "idemgate-bench-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  SystemClock clock;
  RocksStoreOptions o;
  o.path = dir + "/db";
  o.clock = &clock;
  o.sync = sync;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(o, &error);
  if (!store) {
    state.SkipWithError(error.c_str());
    return;
  }
  std::atomic<uint64_t> next_key{0};
  for (auto _ : state) {
    Round round(store.get(), &next_key, pairs_per_round);
    round.Run(callers);
    if (round.failed()) {
      state.SkipWithError("a claim or complete failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * pairs_per_round);
  store->Close();
  store.reset();
  std::filesystem::remove_all(dir);
}

BENCHMARK(BM_ClaimComplete)
    ->ArgsProduct({{1, 16, 64}, {1, 0}})
    ->ArgNames({"callers", "sync"})
    ->UseRealTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMillisecond);

// The floor under any synced store on this disk: append `bytes` (one 64-caller batch averages
// ~11.6 KB of WAL: claims and completions) to a file in the same temp directory, fdatasync it.
void BM_RawFdatasync(benchmark::State& state) {
  const std::string block(static_cast<size_t>(state.range(0)), 'w');
  std::string path = (std::filesystem::temp_directory_path() / "idemgate-fsync-XXXXXX").string();
  int fd = mkstemp(path.data());
  if (fd < 0) {
    state.SkipWithError("mkstemp failed");
    return;
  }
  for (auto _ : state) {
    if (write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size()) ||
        fdatasync(fd) != 0) {
      state.SkipWithError("write or fdatasync failed");
      break;
    }
  }
  close(fd);
  unlink(path.c_str());
}

BENCHMARK(BM_RawFdatasync)
    ->Arg(12 << 10)
    ->ArgName("bytes")
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMicrosecond);

// Prints the runs as usual, then the ratio floor at 64 callers: one synced batch cannot take less
// than the CPU cycle of an unsynced batch (64 ops at the sync=false rate) plus a raw fdatasync,
// and splitting the callers to overlap the two halves the ops each sync carries.
class FloorReporter : public benchmark::ConsoleReporter {
 public:
  FloorReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Color : OO_None) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const std::string name = run.benchmark_name();
      auto items = run.counters.find("items_per_second");
      if (name.find("callers:64/sync:0") != std::string::npos && items != run.counters.end()) {
        nosync_pairs_ = items->second.value;
      } else if (name.find("callers:64/sync:1") != std::string::npos &&
                 items != run.counters.end()) {
        sync_pairs_ = items->second.value;
      } else if (name.find("RawFdatasync") != std::string::npos) {
        fsync_us_ = run.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    if (nosync_pairs_ <= 0 || sync_pairs_ <= 0 || fsync_us_ <= 0) return;
    const double cycle_us = 64.0 / (2.0 * nosync_pairs_) * 1e6;  // 64 ops, 2 ops per pair
    const double floor_ratio = (cycle_us + fsync_us_) / cycle_us;
    printf("64 callers: sync=false/sync=true = %.2fx; floor on this disk = %.2fx "
           "(unsynced 64-op cycle %.0f us + raw fdatasync %.0f us)\n",
           nosync_pairs_ / sync_pairs_, floor_ratio, cycle_us, fsync_us_);
  }

 private:
  double nosync_pairs_ = 0;
  double sync_pairs_ = 0;
  double fsync_us_ = 0;
};

}  // namespace
}  // namespace idemgate

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  idemgate::FloorReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

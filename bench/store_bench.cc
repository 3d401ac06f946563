// Store benchmark: claim+complete pairs per second with N outstanding callers, sync on and off.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>

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

}  // namespace
}  // namespace idemgate

BENCHMARK_MAIN();

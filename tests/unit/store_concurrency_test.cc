// Concurrent claims: of any number of claims for one key exactly one wins; later ones replay.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "store/rocks_store.h"
#include "tests/unit/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

constexpr int kThreads = 8;
constexpr int kClaimsPerThread = 1000;
constexpr int kKeys = 100;

std::string KeyName(int i) { return std::string("key-") + std::to_string(i % kKeys); }

// Counts down to zero; Wait() returns once it got there.
class Latch {
 public:
  explicit Latch(int n) : n_(n) {}
  void CountDown() {
    std::lock_guard lock(mu_);
    if (--n_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
};

// Runs kThreads threads, each issuing kClaimsPerThread async claims over kKeys keys, and calls
// on_result for every result (on the writer thread). Returns once every callback ran.
void ClaimStorm(Store& store, const std::function<void(int, ClaimResult)>& on_result) {
  Latch done(kThreads * kClaimsPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kClaimsPerThread; ++i) {
        int k = (i * 7 + t * 13) % kKeys;
        store.Claim(Req(KeyName(k)), [&, k](ClaimResult r) {
          on_result(k, std::move(r));
          done.CountDown();
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  done.Wait();
}

TEST(StoreConcurrency, ExactlyOneFreshPerKeyThenEveryoneReplays) {
  TempDir dir;
  FakeClock clock;
  RocksStoreOptions o;
  o.path = dir.path() + "/db";
  o.clock = &clock;
  o.max_batch = 64;  // force many group commits
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(o, &error);
  ASSERT_NE(store, nullptr) << error;

  std::mutex mu;
  std::map<int, ClaimToken> winners;
  std::map<ClaimOutcome, int> outcomes;
  int fresh_dupes = 0;
  ClaimStorm(*store, [&](int k, ClaimResult r) {
    std::lock_guard lock(mu);
    ASSERT_TRUE(r.status.ok());
    outcomes[r.outcome]++;
    if (r.outcome == ClaimOutcome::kFresh && !winners.emplace(k, r.token).second) ++fresh_dupes;
  });
  EXPECT_EQ(outcomes[ClaimOutcome::kFresh], kKeys);
  EXPECT_EQ(outcomes[ClaimOutcome::kInFlight], kThreads * kClaimsPerThread - kKeys);
  EXPECT_EQ(fresh_dupes, 0);
  ASSERT_EQ(winners.size(), static_cast<size_t>(kKeys));

  for (auto& [k, token] : winners) {
    ASSERT_TRUE(CompleteNow(*store, token, Resp(200, "body of " + KeyName(k))).ok());
  }

  std::atomic<int> replays{0}, wrong{0};
  ClaimStorm(*store, [&](int k, ClaimResult r) {
    if (r.status.ok() && r.outcome == ClaimOutcome::kReplay &&
        r.record.response.body == "body of " + KeyName(k)) {
      ++replays;
    } else {
      ++wrong;
    }
  });
  EXPECT_EQ(replays.load(), kThreads * kClaimsPerThread);
  EXPECT_EQ(wrong.load(), 0);
  // Lookups race nothing and see the same thing.
  for (int k = 0; k < kKeys; ++k) {
    LookupResult l = store->Lookup(Scope(7), KeyName(k));
    ASSERT_EQ(l.outcome, LookupOutcome::kFound);
    EXPECT_EQ(l.record.response.body, "body of " + KeyName(k));
  }
}

}  // namespace
}  // namespace idemgate

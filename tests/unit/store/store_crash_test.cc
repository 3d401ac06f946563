// Crash: a child completes records with sync=true and reports each; after SIGKILL all are there.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>

#include "store/rocks_store.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

constexpr int kChains = 8;           // concurrent claim+complete chains in the child
constexpr int kReportsBeforeKill = 400;

std::string Key(uint32_t i) { return std::string("crash-") + std::to_string(i); }

// The child: runs kChains closed loops of claim -> complete -> report on `fd` -> next claim.
[[noreturn]] void ChildMain(const std::string& path, int fd) {
  FakeClock clock;
  RocksStoreOptions o;
  o.path = path;
  o.clock = &clock;
  o.sync = true;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(o, &error);
  if (!store) _exit(2);
  std::atomic<uint32_t> next{0};
  std::function<void()> start = [&] {
    uint32_t i = next++;
    store->Claim(Req(Key(i)), [&, i](ClaimResult r) {
      if (!r.status.ok() || r.outcome != ClaimOutcome::kFresh) _exit(3);
      store->Complete(r.token, Resp(200, Key(i)), [&, i](StoreStatus s) {
        if (!s.ok()) _exit(4);
        if (write(fd, &i, sizeof i) != sizeof i) _exit(5);  // reported: must be durable
        start();
      });
    });
  };
  for (int c = 0; c < kChains; ++c) start();
  for (;;) pause();  // until killed
}

TEST(StoreCrash, EveryReportedCompletionSurvivesSigkill) {
  TempDir dir;
  std::string path = dir.path() + "/db";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    ChildMain(path, fds[1]);
  }
  close(fds[1]);
  std::set<uint32_t> reported;
  uint32_t i;
  while (reported.size() < kReportsBeforeKill && read(fds[0], &i, sizeof i) == sizeof i) {
    reported.insert(i);
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child exited by itself, status " << status;
  while (read(fds[0], &i, sizeof i) == sizeof i) reported.insert(i);  // reported before death
  close(fds[0]);
  ASSERT_GE(reported.size(), static_cast<size_t>(kReportsBeforeKill));

  FakeClock clock;
  RocksStoreOptions o;
  o.path = path;
  o.clock = &clock;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(o, &error);
  ASSERT_NE(store, nullptr) << error;
  int missing = 0;
  for (uint32_t k : reported) {
    LookupResult l = store->Lookup(Scope(7), Key(k));
    if (l.outcome != LookupOutcome::kFound || l.record.state != RecordState::kCompleted ||
        l.record.response.body != Key(k)) {
      ++missing;
    }
  }
  EXPECT_EQ(missing, 0) << "of " << reported.size() << " reported completions";
}

}  // namespace
}  // namespace idemgate

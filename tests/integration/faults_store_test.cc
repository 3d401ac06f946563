// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the store's disk fills up (a tiny tmpfs under store.path): guarded
// requests fail closed with 503 store_unavailable and nothing goes upstream (R3b), passthrough
// still works, and once space is back guarded requests work again without a restart.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/fill_disk.h"

namespace idemgate::test {
namespace {

class FaultsStoreTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    store_dir_ = dir_.Path("data");
    ASSERT_EQ(mkdir(store_dir_.c_str(), 0755), 0);
    if (mount("tmpfs", store_dir_.c_str(), "tmpfs", 0, "size=4m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs (needs root / CAP_SYS_ADMIN): " << strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (gateway_.running()) {
      gateway_.Kill(SIGKILL);
      gateway_.Wait();
    }
    if (mounted_) umount2(store_dir_.c_str(), MNT_DETACH);
  }
  std::string store_dir_;
  bool mounted_ = false;
};

TEST_F(FaultsStoreTest, DiskFullFailsClosedThenRecoversWithoutRestart) {
  // A short lease: a request whose claim still fit but whose completion does not (where the disk
  // runs out depends on the records' exact sizes) gives up within the client's timeout.
  Set("upstream", "connect_timeout", "\"500ms\"");
  Set("upstream", "response_timeout", "\"1s\"");
  Set("idempotency", "lease", "\"3s\"");
  StartGateway();
  ASSERT_EQ(Post("k-before", "{}").status, 201);
  ASSERT_EQ(upstream_.requests(), 1);

  const std::string filler = store_dir_ + "/filler";
  ASSERT_TRUE(FillUntilFull(filler));
  // Guarded requests with new keys: each either fails closed (503, nothing upstream) or, while
  // RocksDB still has preallocated WAL space, completes normally. One 503 must come soon.
  int executed = upstream_.requests();
  int failed = 0;
  std::string failed_key;
  for (int i = 0; i < 50 && failed == 0; ++i) {
    std::string key = "k-full-" + std::to_string(i);
    HttpResponse r = Post(key, "{}");
    if (r.status == 503) {
      ++failed;
      failed_key = key;
      EXPECT_EQ(ErrorCodeOf(r), "store_unavailable") << r.body;
      EXPECT_EQ(upstream_.requests(), executed) << "a 503 must mean nothing went upstream";
    } else if (r.status == 502 && ErrorCodeOf(r) == "upstream_failed") {
      ++executed;  // executed, but its result could not be stored before its lease (R4)
    } else {
      ASSERT_EQ(r.status, 201) << r.raw << "\ngateway running: " << gateway_.running() << "\n"
                               << gateway_.log();
      ++executed;
    }
  }
  ASSERT_EQ(failed, 1) << "the store never reported the full disk";
  // Still full: the next guarded request fails closed the same way (the store tries to recover
  // before each batch and must not take the process down doing so).
  HttpResponse still = Post(failed_key, "{}");
  EXPECT_EQ(still.status, 503) << still.raw << gateway_.log();
  EXPECT_EQ(upstream_.requests(), executed);
  // A replay of a stored key still reads (fail closed only for what needs a write).
  HttpResponse replay = Post("k-before", "{}");
  // (A read may succeed or the store may refuse it; a 201 must be the replay, never a re-run.)
  if (replay.status == 201) {
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true") << replay.raw;
  } else {
    EXPECT_EQ(ErrorCodeOf(replay), "store_unavailable") << replay.raw;
  }
  EXPECT_EQ(upstream_.requests(), executed);
  // Passthrough is unaffected.
  HttpResponse pass = Post("", "{}");
  EXPECT_EQ(pass.status, 201) << pass.raw;
  executed = upstream_.requests();

  ASSERT_EQ(unlink(filler.c_str()), 0);
  HttpResponse after = Post("k-after", "{}");
  EXPECT_EQ(after.status, 201) << after.raw << gateway_.log();
  EXPECT_EQ(upstream_.requests(), executed + 1);
  // The key refused with 503 left nothing behind: it executes now.
  HttpResponse refused = Post(failed_key, "{}");
  EXPECT_EQ(refused.status, 201) << refused.raw;
  EXPECT_FALSE(refused.Header("Idempotent-Replayed").has_value());
  executed = upstream_.requests();
  HttpResponse again = Post("k-after", "{}");
  EXPECT_EQ(again.Header("Idempotent-Replayed"), "true") << again.raw;
  EXPECT_EQ(upstream_.requests(), executed);
  HttpResponse old = Post("k-before", "{}");
  EXPECT_EQ(old.Header("Idempotent-Replayed"), "true") << old.raw;
}

// The upstream executed, then the disk filled before its result was made durable: the gateway
// keeps retrying the completion while the lease holds, so once space is back the client gets
// the upstream's answer and every retry replays it. No second execution.
TEST_F(FaultsStoreTest, CompletionRetriedUntilTheDiskRecovers) {
  // A large answer: the claim fits in the WAL space RocksDB preallocated, the completion cannot.
  const std::string body(1536 << 10, 'x');
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, body).WithDelay(400));
  StartGateway();
  ASSERT_EQ(Post("k-warm", "{}").status, 201);
  const std::string filler = store_dir_ + "/filler";
  HttpResponse answer;
  std::thread client([&] { answer = Post("k-late", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(2));  // claimed, durable, and sent upstream
  ASSERT_TRUE(FillUntilFull(filler));
  // Wait until the completion has failed at least once, then free the space.
  ASSERT_TRUE(gateway_.WaitForOutput(" store: rocksdb:")) << gateway_.log();
  ASSERT_EQ(unlink(filler.c_str()), 0);
  client.join();
  EXPECT_EQ(answer.status, 201) << answer.error << gateway_.log().substr(0, 2000);
  EXPECT_TRUE(answer.body == body) << "the answer's body is not the upstream's";
  HttpResponse retry = Post("k-late", "{}");
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true") << retry.error;
  EXPECT_TRUE(retry.body == body) << "the replay's body is not the upstream's";
  EXPECT_EQ(upstream_.requests(), 2);
}

}  // namespace
}  // namespace idemgate::test

// Online backups of the RocksDB store: a checkpoint taken while the writer commits holds every
// record completed before it, with the store's meta files, and a restore copies it into a new
// store that opens on its own.
#include "store/store_backup.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "store/rocks_store.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

TEST(StoreBackup, CheckpointWhileWritingThenRestoreHoldsEveryCompletedRecord) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<Store> store = OpenRocksAt(dir.path() + "/db", &clock);
  ASSERT_TRUE(store->PutMeta("signature", "sig-1").ok());
  constexpr int kKeys = 200;
  for (int i = 0; i < kKeys; ++i) {
    ClaimResult claimed = ClaimNow(*store, Req("k" + std::to_string(i)));
    ASSERT_EQ(claimed.outcome, ClaimOutcome::kFresh);
    ASSERT_TRUE(CompleteNow(*store, claimed.token, Resp(201, "body-" + std::to_string(i))).ok());
  }
  // The writer keeps committing while the checkpoint is taken.
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (ClaimNow(*store, Req("more" + std::to_string(i))).status.ok()) ++written;
    }
  });
  while (written.load() < 5) std::this_thread::yield();
  const std::string checkpoint = dir.path() + "/backups/one";
  std::filesystem::create_directories(dir.path() + "/backups");
  StoreStatus status = store->Checkpoint(checkpoint);
  stop = true;
  writer.join();
  ASSERT_TRUE(status.ok()) << status.message;
  EXPECT_FALSE(std::filesystem::exists(checkpoint + ".partial"));
  // Never over an existing directory.
  EXPECT_FALSE(store->Checkpoint(checkpoint).ok());
  store->Close();

  // Restored into a new directory: private, its own copies, and it opens with every record.
  const std::string restored = dir.path() + "/restored";
  ASSERT_EQ(RestoreCheckpoint(checkpoint, restored), "");
  struct stat st {};
  ASSERT_EQ(stat(restored.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& entry : std::filesystem::directory_iterator(restored)) {
    ASSERT_EQ(stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << entry.path();
    EXPECT_EQ(st.st_nlink, 1u) << entry.path();
  }
  EXPECT_NE(RestoreCheckpoint(checkpoint, restored), "");  // not over a store
  std::unique_ptr<Store> back = OpenRocksAt(restored, &clock);
  ASSERT_NE(back, nullptr);
  std::optional<std::string> signature;
  ASSERT_TRUE(back->GetMeta("signature", &signature).ok());
  EXPECT_EQ(signature, "sig-1");
  for (int i = 0; i < kKeys; ++i) {
    ClaimResult r = ClaimNow(*back, Req("k" + std::to_string(i)));
    ASSERT_EQ(r.outcome, ClaimOutcome::kReplay) << i;
    EXPECT_EQ(r.record.response.body, "body-" + std::to_string(i));
  }
  back->Close();
}

TEST(StoreBackup, RestoreRefusesWhatIsNoCheckpoint) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() + "/empty");
  EXPECT_NE(RestoreCheckpoint(dir.path() + "/empty", dir.path() + "/to").find("no CURRENT file"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/to"));
}

}  // namespace
}  // namespace idemgate

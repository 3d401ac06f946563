// SPDX-License-Identifier: Apache-2.0
// The WAL written over zeros: which files it writes zeros ahead of and the size it reports for
// them, where it is used, and a full ext4 disk under it (a small file system on a loop device):
// the store fails closed once the room runs out, recovers when space comes back, and every
// completion it acknowledged is there after a reopen.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/file_system.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "store/rocks_store.h"
#include "store/wal_prewrite.h"
#include "tests/support/fill_disk.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

// An ext4 file system of `mib` MiB in an image under `dir`, mounted at dir/disk.
class Ext4Disk {
 public:
  Ext4Disk(const std::string& dir, int mib) : image_(dir + "/disk.img"), mount_(dir + "/disk") {
    std::string make = "truncate -s " + std::to_string(mib) + "M " + image_ +
                       " && mkfs.ext4 -q -F " + image_ + " >/dev/null 2>&1 && mkdir -p " +
                       mount_ + " && mount -o loop " + image_ + " " + mount_ + " 2>/dev/null";
    mounted_ = std::system(make.c_str()) == 0;
  }
  ~Ext4Disk() {
    if (mounted_) umount2(mount_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return mount_; }

 private:
  std::string image_;
  std::string mount_;
  bool mounted_ = false;
};

// A 32 KiB answer naming its key: RocksDB preallocates the WAL as far as the disk lets it (most
// of this one), and big records use that room up in a few hundred completions.
std::string Body(const std::string& key) { return key + std::string(32 << 10, 'b'); }

// Claim + complete `key`; true when both were acknowledged.
bool Complete(Store& store, const std::string& key) {
  ClaimResult r = ClaimNow(store, Req(key));
  if (!r.status.ok() || r.outcome != ClaimOutcome::kFresh) return false;
  return CompleteNow(store, r.token, Resp(201, Body(key))).ok();
}

// Appends `bytes` to a new file `name` through `fs`; the open file in *out.
void AppendTo(rocksdb::FileSystem& fs, const std::string& name, size_t bytes,
              std::unique_ptr<rocksdb::FSWritableFile>* out) {
  ASSERT_TRUE(fs.NewWritableFile(name, rocksdb::FileOptions(), out, nullptr).ok()) << name;
  ASSERT_TRUE((*out)->Append(std::string(bytes, 'r'), rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE((*out)->Sync(rocksdb::IOOptions(), nullptr).ok());
}

uint64_t SizeOnDisk(const std::string& name) { return std::filesystem::file_size(name); }

uint64_t ReportedSize(rocksdb::FileSystem& fs, const std::string& name) {
  uint64_t size = 0;
  EXPECT_TRUE(fs.GetFileSize(name, rocksdb::IOOptions(), &size, nullptr).ok()) << name;
  return size;
}

TEST(StoreWalPrewrite, ZerosAheadOfTheDatabasesLogsOnlyAndTheirSizeIsTheRecords) {
  TempDir dir;
  const std::string db = dir.path() + "/db";
  ASSERT_TRUE(std::filesystem::create_directories(db + "/elsewhere"));
  std::unique_ptr<rocksdb::Env> env = NewWalPrewriteEnv(db, nullptr);
  rocksdb::FileSystem& fs = *env->GetFileSystem();

  std::unique_ptr<rocksdb::FSWritableFile> wal;
  AppendTo(fs, db + "/000007.log", 100, &wal);
  EXPECT_EQ(SizeOnDisk(db + "/000007.log"), kWalPrewriteChunkBytes) << "zeros ahead of it";
  EXPECT_EQ(ReportedSize(fs, db + "/000007.log"), 100u) << "a checkpoint copies this much";
  ASSERT_TRUE(wal->Close(rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(SizeOnDisk(db + "/000007.log"), 100u) << "Close trims the zeros";
  EXPECT_EQ(ReportedSize(fs, db + "/000007.log"), 100u);

  // Past half a chunk, the next chunk of zeros.
  AppendTo(fs, db + "/000008.log", kWalPrewriteChunkBytes / 2 + 1, &wal);
  EXPECT_EQ(SizeOnDisk(db + "/000008.log"), 2 * kWalPrewriteChunkBytes);
  wal.reset();

  // A truncation (never how RocksDB writes a WAL) stops the zeros; the size reported follows it.
  AppendTo(fs, db + "/000011.log", 100, &wal);
  ASSERT_TRUE(wal->Truncate(40, rocksdb::IOOptions(), nullptr).ok());
  EXPECT_EQ(ReportedSize(fs, db + "/000011.log"), 40u);
  EXPECT_EQ(SizeOnDisk(db + "/000011.log"), 40u);
  wal.reset();

  // Not a log of this database: a checkpoint's copy, the MANIFEST, a table.
  for (const std::string& name :
       {db + "/elsewhere/000009.log", db + "/MANIFEST-000005", db + "/000010.sst"}) {
    std::unique_ptr<rocksdb::FSWritableFile> other;
    AppendTo(fs, name, 100, &other);
    EXPECT_EQ(SizeOnDisk(name), 100u) << name << " is written as RocksDB writes it";
  }
}

TEST(StoreWalPrewrite, OnExt4AndXfsOnly) {
  TempDir dir;
  Ext4Disk disk(dir.path(), 16);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount an ext4 image (needs root and loop devices)";
  EXPECT_TRUE(WalPrewriteHelps(disk.path()));
  std::string shm = dir.path() + "/shm";
  ASSERT_EQ(mkdir(shm.c_str(), 0755), 0);
  if (mount("tmpfs", shm.c_str(), "tmpfs", 0, "size=1m") == 0) {
    EXPECT_FALSE(WalPrewriteHelps(shm)) << "a sync on tmpfs has nothing to spare";
    umount2(shm.c_str(), MNT_DETACH);
  }
  EXPECT_FALSE(WalPrewriteHelps(dir.path() + "/missing"));
}

TEST(StoreWalPrewrite, AFullExt4DiskFailsClosedRecoversAndLosesNothingAcknowledged) {
  TempDir dir;
  Ext4Disk disk(dir.path(), 32);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount an ext4 image (needs root and loop devices)";
  FakeClock clock;
  RocksStoreOptions o;
  o.path = disk.path() + "/db";
  o.clock = &clock;
  o.sync = true;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(o, &error);
  ASSERT_NE(store, nullptr) << error;
  std::vector<std::string> acked;
  for (int i = 0; i < 10; ++i) {
    acked.push_back("before-" + std::to_string(i));
    ASSERT_TRUE(Complete(*store, acked.back()));
  }
  // The prewrite is on: the live WAL ends on a chunk of zeros, not on its records.
  bool prewritten = false;
  for (const auto& e : std::filesystem::directory_iterator(o.path)) {
    if (e.path().extension() != ".log") continue;
    prewritten = prewritten || (e.file_size() > 0 && e.file_size() % kWalPrewriteChunkBytes == 0);
  }
  ASSERT_TRUE(prewritten) << "no WAL in " << o.path << " written over zeros";
  const std::string filler = disk.path() + "/filler";
  ASSERT_TRUE(test::FillUntilFull(filler));
  // New keys until the store says no: the WAL's room (prewritten or preallocated) runs out.
  bool refused = false;
  for (int i = 0; i < 5000 && !refused; ++i) {
    std::string key = "full-" + std::to_string(i);
    if (Complete(*store, key)) {
      acked.push_back(key);
    } else {
      refused = true;
    }
  }
  ASSERT_TRUE(refused) << "the store never reported the full disk (" << acked.size() << " acked)";
  // Space back: the store recovers by itself before a later batch.
  ASSERT_EQ(unlink(filler.c_str()), 0);
  bool recovered = false;
  for (int i = 0; i < 20 && !recovered; ++i) {
    std::string key = "after-" + std::to_string(i);
    recovered = Complete(*store, key);
    if (recovered) acked.push_back(key);
  }
  EXPECT_TRUE(recovered) << "no write succeeded after the disk had room again";
  store->Close();
  store.reset();
  store = OpenRocksStore(o, &error);
  ASSERT_NE(store, nullptr) << error;
  int missing = 0;
  for (const std::string& key : acked) {
    LookupResult l = store->Lookup(Scope(7), key);
    if (l.outcome != LookupOutcome::kFound || l.record.state != RecordState::kCompleted ||
        l.record.response.body != Body(key)) {
      ++missing;
    }
  }
  EXPECT_EQ(missing, 0) << "of " << acked.size() << " acknowledged completions";
}

}  // namespace
}  // namespace idemgate

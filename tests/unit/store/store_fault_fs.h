// A RocksDB FileSystem that injects disk faults in-process for the store's unit tests:
// failing appends and syncs, a WAL sync that fails after its bytes were appended, and a WAL sync
// that stalls until the test lets it go (no sleeps: the test waits for the stall to begin).
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate::testing {

struct DiskFaults {
  // Every append and sync of any writable file fails (nothing reaches the file).
  std::atomic<bool> failing{false};
  bool no_space = false;  // `failing` reports NoSpace instead of IOError
  // The next N syncs of a WAL file fail with IOError after their bytes were appended (the
  // fdatasync that fails: the bytes may or may not be on the disk).
  std::atomic<int> wal_sync_failures{0};

  rocksdb::IOStatus Error() const {
    return no_space ? rocksdb::IOStatus::NoSpace("injected")
                    : rocksdb::IOStatus::IOError("injected");
  }

  // The next WAL sync blocks until ReleaseStall(). WaitStalled() returns once it blocks.
  void ArmStall() {
    std::lock_guard lock(mu_);
    stall_armed_ = true;
    stalled_ = false;
    released_ = false;
  }
  bool WaitStalled(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return stalled_; });
  }
  void ReleaseStall() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  // Called by a WAL sync: blocks while a stall is armed for it.
  void MaybeStall() {
    std::unique_lock lock(mu_);
    if (!stall_armed_) return;
    stall_armed_ = false;
    stalled_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stall_armed_ = false;
  bool stalled_ = false;
  bool released_ = false;
};

class FaultyFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyFile(std::unique_ptr<rocksdb::FSWritableFile> f, DiskFaults* faults, bool wal)
      : FSWritableFileOwnerWrapper(std::move(f)), faults_(faults), wal_(wal) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    if (faults_->failing) return faults_->Error();
    return FSWritableFileOwnerWrapper::Append(data, o, d);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (rocksdb::IOStatus s = Fault(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::Sync(o, d);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (rocksdb::IOStatus s = Fault(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::Fsync(o, d);
  }

 private:
  rocksdb::IOStatus Fault() {
    if (faults_->failing) return faults_->Error();
    if (!wal_) return rocksdb::IOStatus::OK();
    faults_->MaybeStall();
    int left = faults_->wal_sync_failures.load();
    while (left > 0) {
      if (faults_->wal_sync_failures.compare_exchange_weak(left, left - 1)) {
        return rocksdb::IOStatus::IOError("injected WAL sync failure");
      }
    }
    return rocksdb::IOStatus::OK();
  }

  DiskFaults* faults_;
  bool wal_;
};

class FaultyFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultyFs(DiskFaults* faults)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), faults_(faults) {}
  const char* Name() const override { return "FaultyFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* out,
                                    rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    rocksdb::IOStatus s = target()->NewWritableFile(name, o, &f, d);
    bool wal = name.size() >= 4 && name.compare(name.size() - 4, 4, ".log") == 0;
    if (s.ok()) *out = std::make_unique<FaultyFile>(std::move(f), faults_, wal);
    return s;
  }

 private:
  DiskFaults* faults_;
};

// An Env whose files go through FaultyFs.
inline std::unique_ptr<rocksdb::Env> NewFaultyEnv(DiskFaults* faults) {
  return rocksdb::NewCompositeEnv(std::make_shared<FaultyFs>(faults));
}

// A RocksStore over the faulty Env in a temp dir, with a fake clock: the fixture the fault and
// timing tests share. TearDown releases any stall first, so a test that failed mid-stall does not
// hang closing the store.
class FaultyStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = NewFaultyEnv(&faults_);
    Open();
  }
  void TearDown() override {
    faults_.ReleaseStall();
    store_.reset();
  }
  void Open() {
    RocksStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    std::string error;
    store_ = OpenRocksStoreWithEnv(o, env_.get(), &error);
    ASSERT_NE(store_, nullptr) << error;
  }
  void Reopen() {
    store_->Close();
    store_.reset();
    Open();
  }

  TempDir dir_;
  FakeClock clock_;
  DiskFaults faults_;
  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<Store> store_;
};

}  // namespace idemgate::testing

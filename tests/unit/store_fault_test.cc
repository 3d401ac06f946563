// Disk faults: a failing WAL write reports an error for the whole batch, and the store recovers.
#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>

#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

// Makes every append and sync of a writable file fail with `error` while `failing` is set.
struct Fault {
  std::atomic<bool> failing{false};
  bool no_space = false;
  rocksdb::IOStatus Error() const {
    return no_space ? rocksdb::IOStatus::NoSpace("injected") : rocksdb::IOStatus::IOError("injected");
  }
};

class FlakyFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FlakyFile(std::unique_ptr<rocksdb::FSWritableFile> f, Fault* fault)
      : FSWritableFileOwnerWrapper(std::move(f)), fault_(fault) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    if (fault_->failing) return fault_->Error();
    return FSWritableFileOwnerWrapper::Append(data, o, d);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (fault_->failing) return fault_->Error();
    return FSWritableFileOwnerWrapper::Sync(o, d);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (fault_->failing) return fault_->Error();
    return FSWritableFileOwnerWrapper::Fsync(o, d);
  }

 private:
  Fault* fault_;
};

class FlakyFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FlakyFs(Fault* fault) : FileSystemWrapper(rocksdb::FileSystem::Default()), fault_(fault) {}
  const char* Name() const override { return "FlakyFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* out,
                                    rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    rocksdb::IOStatus s = target()->NewWritableFile(name, o, &f, d);
    if (s.ok()) *out = std::make_unique<FlakyFile>(std::move(f), fault_);
    return s;
  }

 private:
  Fault* fault_;
};

class StoreFaultTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    fault_.no_space = GetParam();
    env_ = rocksdb::NewCompositeEnv(std::make_shared<FlakyFs>(&fault_));
    RocksStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    std::string error;
    store_ = OpenRocksStoreWithEnv(o, env_.get(), &error);
    ASSERT_NE(store_, nullptr) << error;
  }
  void TearDown() override { store_.reset(); }

  TempDir dir_;
  FakeClock clock_;
  Fault fault_;
  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreFaultTest, WriteErrorIsReportedThenStoreRecovers) {
  ClaimResult first = ClaimNow(*store_, Req("a"));
  ASSERT_TRUE(first.status.ok()) << first.status.message;
  StoreCode expected = GetParam() ? StoreCode::kNoSpace : StoreCode::kIoError;

  fault_.failing = true;
  ClaimResult failed = ClaimNow(*store_, Req("b"));
  EXPECT_EQ(failed.status.code, expected) << failed.status.message;
  StoreStatus complete = CompleteNow(*store_, first.token, Resp(200, "x"));
  EXPECT_FALSE(complete.ok());
  EXPECT_NE(complete.code, StoreCode::kStaleClaim);
  // While the disk fails, a read may fail too (the DB may be closed for reopening), but it never
  // claims the record is absent.
  EXPECT_NE(store_->Lookup(Scope(7), "a").outcome, LookupOutcome::kMiss);

  fault_.failing = false;  // the disk is back: no restart needed
  ClaimResult again = ClaimNow(*store_, Req("b"));
  ASSERT_TRUE(again.status.ok()) << again.status.message;
  EXPECT_EQ(again.outcome, ClaimOutcome::kFresh);
  EXPECT_TRUE(CompleteNow(*store_, first.token, Resp(200, "x")).ok());
  EXPECT_EQ(store_->Lookup(Scope(7), "a").record.response.body, "x");
}

INSTANTIATE_TEST_SUITE_P(IoErrorAndNoSpace, StoreFaultTest, ::testing::Bool());

}  // namespace
}  // namespace idemgate

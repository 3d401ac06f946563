// The backends the store contract suite runs against: RocksDB in a temp dir with a FakeClock,
// and PostgreSQL (a real server started once per test binary) with a moved database clock.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "store/pg_store.h"
#include "store/rocks_store.h"
#include "tests/support/pg_cluster.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate::testing {

class Backend {
 public:
  virtual ~Backend() = default;
  // A store over the backend's records; `fresh`: empty them first.
  virtual std::unique_ptr<Store> Open(bool fresh) = 0;
  // Moves the store's clock forward (leases, expiry).
  virtual void Advance(TimeMs ms) = 0;
};

class RocksBackend final : public Backend {
 public:
  std::unique_ptr<Store> Open(bool fresh) override {
    RocksStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    o.max_batch = 64;  // many group commits under load
    std::string error;
    auto store = OpenRocksStore(o, &error);
    EXPECT_NE(store, nullptr) << error;
    return store;
  }
  void Advance(TimeMs ms) override { clock_.Advance(ms); }

 private:
  TempDir dir_;
  FakeClock clock_;
};

inline idemgate::test::PgCluster*& SharedPgSlot() {
  static idemgate::test::PgCluster* cluster = nullptr;
  return cluster;
}

// One PostgreSQL server for the whole test binary, started on first use. No server: the test
// fails (never skips).
inline idemgate::test::PgCluster& SharedPg() {
  idemgate::test::PgCluster*& cluster = SharedPgSlot();
  if (cluster == nullptr) {
    cluster = new idemgate::test::PgCluster();
    std::string error;
    if (!cluster->StartPrimary(&error)) ADD_FAILURE() << "cannot start PostgreSQL: " << error;
  }
  return *cluster;
}

// Stops the shared server when the binary's tests are done.
class PgEnvironment final : public ::testing::Environment {
 public:
  void TearDown() override {
    delete SharedPgSlot();
    SharedPgSlot() = nullptr;
  }
};

class PgBackend final : public Backend {
 public:
  std::unique_ptr<Store> Open(bool fresh) override {
    std::string error;
    idemgate::test::PgCluster& pg = SharedPg();
    if (fresh)
      pg.Exec(0, "DROP TABLE IF EXISTS idemgate_records, idemgate_schema, idemgate_fences", nullptr,
              &error);
    PgStoreOptions o;
    o.dsn = pg.Dsn(0);
    o.connections = 8;
    o.clock_offset_ms = &offset_;
    auto store = OpenPgStore(o, &error);
    EXPECT_NE(store, nullptr) << error;
    return store;
  }
  void Advance(TimeMs ms) override { offset_ += ms; }

 private:
  std::atomic<int64_t> offset_{0};
};

}  // namespace idemgate::testing

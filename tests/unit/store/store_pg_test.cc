// PgStore-only behaviour against a real PostgreSQL: the schema version, failing closed while the
// database is down and recovering by itself, the synchronous-replication warning counted as an
// unknown outcome and resolved with the same owner, background clean-up, stores sharing rows.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "tests/unit/store/store_backends.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;
using idemgate::test::PgCluster;

const auto* const kPgEnv = ::testing::AddGlobalTestEnvironment(new PgEnvironment);

// Polls a server-side condition (the database's own state, nothing to wait on) up to 30 s.
template <typename F>
bool Eventually(F condition) {
  for (int i = 0; i < 3000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string Sql(const std::string& sql) {
  std::string out, error;
  EXPECT_TRUE(SharedPg().Exec(0, sql, &out, &error)) << sql << ": " << error;
  return out;
}

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    SharedPg().Exec(0, "DROP TABLE IF EXISTS idemgate_records, idemgate_schema, idemgate_fences",
                    nullptr, &error);
  }
  std::unique_ptr<Store> Open(std::string* error, int64_t cleanup_ms = 60'000,
                              const std::string& app = "idemgate-test") {
    PgStoreOptions o;
    o.dsn = SharedPg().Dsn(0) + " application_name=" + app;
    o.connections = 2;
    o.cleanup_interval_ms = cleanup_ms;
    o.clock_offset_ms = &offset_;
    return OpenPgStore(o, error);
  }
  std::atomic<int64_t> offset_{0};
};

TEST_F(PgStoreTest, CreatesTheSchemaAndRefusesAnUnknownVersion) {
  std::string error;
  ASSERT_NE(Open(&error), nullptr) << error;
  EXPECT_EQ(Sql("SELECT version FROM idemgate_schema"), "2");
  Sql("UPDATE idemgate_schema SET version = 3");
  EXPECT_EQ(Open(&error), nullptr);
  EXPECT_NE(error.find("schema has version 3"), std::string::npos) << error;
  EXPECT_NE(error.find("knows only version 2"), std::string::npos) << error;
}

TEST_F(PgStoreTest, RefusesToOpenWhenTheDatabaseIsUnreachable) {
  PgStoreOptions o;
  o.dsn = "host=127.0.0.1 port=1 user=idemgate dbname=postgres connect_timeout=2";
  std::string error;
  EXPECT_EQ(OpenPgStore(o, &error), nullptr);
  EXPECT_NE(error.find("cannot connect to PostgreSQL"), std::string::npos) << error;
}

TEST_F(PgStoreTest, StoresSharingOneDatabaseShareRecords) {
  std::string error;
  auto a = Open(&error);
  auto b = Open(&error);
  ASSERT_TRUE(a && b) << error;
  ClaimResult won = ClaimNow(*a, Req("k"));
  ASSERT_EQ(won.outcome, ClaimOutcome::kFresh);
  EXPECT_EQ(ClaimNow(*b, Req("k")).outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(ClaimNow(*b, Req("k", 2)).outcome, ClaimOutcome::kMismatch);
  ASSERT_TRUE(CompleteNow(*a, won.token, Resp(201, "made")).ok());
  ClaimResult replay = ClaimNow(*b, Req("k"));
  EXPECT_EQ(replay.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(replay.record.response.body, "made");
  ASSERT_TRUE(DeleteNow(*b, Scope(7), "k").ok());
  EXPECT_EQ(a->Lookup(Scope(7), "k", LookupMode::kMayBlock).outcome, LookupOutcome::kMiss);
  EXPECT_EQ(a->Lookup(Scope(7), "k", LookupMode::kNoWait).outcome, LookupOutcome::kNotCached);
}

// R6: a completion stores when it was made (the database's clock); a table from before the
// column existed gains it at start-up, and rows without it still read (completed_ms 0).
TEST_F(PgStoreTest, CompletionTimeIsStoredAndAnOlderTableGainsItsColumn) {
  std::string error;
  ASSERT_NE(Open(&error), nullptr) << error;
  Sql("ALTER TABLE idemgate_records DROP COLUMN completed_ms");  // as an older gateway left it
  auto store = Open(&error);
  ASSERT_NE(store, nullptr) << error;
  ClaimResult won = ClaimNow(*store, Req("k"));
  ASSERT_EQ(won.outcome, ClaimOutcome::kFresh);
  offset_ += 5'000;
  ASSERT_TRUE(CompleteNow(*store, won.token, Resp(201, "made")).ok());
  LookupResult found = store->Lookup(Scope(7), "k", LookupMode::kMayBlock);
  ASSERT_EQ(found.outcome, LookupOutcome::kFound);
  EXPECT_GE(found.record.completed_ms - found.record.created_ms, 5'000);
  EXPECT_LE(found.record.completed_ms, found.now_ms);
  Sql("UPDATE idemgate_records SET completed_ms = NULL");  // completed by an older gateway
  found = store->Lookup(Scope(7), "k", LookupMode::kMayBlock);
  ASSERT_EQ(found.outcome, LookupOutcome::kFound);
  EXPECT_EQ(found.record.completed_ms, 0);
  EXPECT_EQ(found.record.response.body, "made");
}

// SPEC M5: a commit whose synchronous-replication wait was cancelled is committed locally but
// maybe not replicated; PostgreSQL only says so in a WARNING. The store must not report it, and
// must find the outcome out by sending the claim again with the same owner: it then wins (kFresh,
// attempt 1) instead of finding "someone's" claim in flight.
TEST_F(PgStoreTest, CancelledReplicationWaitIsUnknownAndResolvedWithTheSameOwner) {
  std::string error;
  auto store = Open(&error, 60'000, "idemgate-syncrep");
  ASSERT_NE(store, nullptr) << error;
  Sql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
  Sql("SELECT pg_reload_conf()");
  const std::string waiting =
      "SELECT pid || ' ' || query_start FROM pg_stat_activity WHERE application_name = "
      "'idemgate-syncrep' AND wait_event = 'SyncRep'";
  ASSERT_TRUE(Eventually([] {  // the reload reached new sessions
    return Sql("SHOW synchronous_standby_names") == "nobody";
  }));
  // A session already open takes the reload when it next reads a command, so under load a claim
  // can still commit without waiting: then it is over (kFresh, reported) and a new key is tried.
  std::future<ClaimResult> got;
  std::string first;
  for (int key = 0; key < 5 && first.empty(); ++key) {
    auto result = std::make_shared<std::promise<ClaimResult>>();
    got = result->get_future();
    store->Claim(Req("k" + std::to_string(key)),
                 [result](ClaimResult r) { result->set_value(std::move(r)); });
    ASSERT_TRUE(Eventually([&] {
      return !(first = Sql(waiting)).empty() ||
             got.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }));
  }
  ASSERT_FALSE(first.empty()) << "no claim waited for synchronous replication";
  Sql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = "
      "'idemgate-syncrep' AND wait_event = 'SyncRep'");
  // The store sends the claim again; it waits for replication too.
  std::string second;
  ASSERT_TRUE(Eventually([&] { return !(second = Sql(waiting)).empty() && second != first; }));
  EXPECT_EQ(got.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "a claim whose replication wait was cancelled was reported";
  Sql("ALTER SYSTEM RESET synchronous_standby_names");
  Sql("SELECT pg_reload_conf()");
  ClaimResult r = got.get();
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  EXPECT_EQ(r.outcome, ClaimOutcome::kFresh);
  EXPECT_EQ(r.token.attempt, 1u);
  EXPECT_TRUE(CompleteNow(*store, r.token, Resp(200, "once")).ok());
}

// SPEC R3b/M4: while the database is down every operation fails at once (503 upstream), and
// the store reconnects by itself once it is back, without being reopened.
TEST_F(PgStoreTest, FailsClosedWhileTheDatabaseIsDownAndRecoversByItself) {
  std::string error;
  auto store = Open(&error);
  ASSERT_NE(store, nullptr) << error;
  ClaimResult before = ClaimNow(*store, Req("before"));
  ASSERT_EQ(before.outcome, ClaimOutcome::kFresh);
  ASSERT_TRUE(SharedPg().Stop(0));
  ASSERT_TRUE(
      Eventually([&] { return ClaimNow(*store, Req("down")).status.code == StoreCode::kIoError; }));
  EXPECT_EQ(CompleteNow(*store, before.token, Resp(200, "x")).code, StoreCode::kIoError);
  EXPECT_EQ(store->Lookup(Scope(7), "before", LookupMode::kMayBlock).outcome,
            LookupOutcome::kError);
  ASSERT_TRUE(SharedPg().Start(0, &error)) << error;
  ASSERT_TRUE(Eventually([&] { return ClaimNow(*store, Req("after")).status.ok(); }));
  EXPECT_TRUE(CompleteNow(*store, before.token, Resp(200, "x")).ok());
  EXPECT_EQ(ClaimNow(*store, Req("before")).outcome, ClaimOutcome::kReplay);
}

// SPEC M6: expired rows go away in the background; live ones stay.
TEST_F(PgStoreTest, ExpiredRowsAreDeletedInTheBackground) {
  std::string error;
  auto store = Open(&error, /*cleanup_ms=*/50);
  ASSERT_NE(store, nullptr) << error;
  for (int i = 0; i < 20; ++i) {
    ClaimResult r = ClaimNow(*store, Req("short" + std::to_string(i), 1, 1'000, 10'000));
    ASSERT_TRUE(CompleteNow(*store, r.token, Resp(200, "x")).ok());
  }
  ClaimNow(*store, Req("long", 1, 1'000, 1'000'000));
  offset_ += 20'000;
  EXPECT_TRUE(Eventually([] { return Sql("SELECT count(*) FROM idemgate_records") == "1"; }));
  EXPECT_EQ(Sql("SELECT convert_from(idem_key, 'UTF8') FROM idemgate_records"), "long");
}

// The settings signature lives in the database, so every instance sees the one the first wrote.
TEST_F(PgStoreTest, MetaValuesAreSharedByEveryInstance) {
  std::string error;
  auto a = Open(&error);
  auto b = Open(&error);
  ASSERT_TRUE(a && b) << error;
  std::optional<std::string> value;
  ASSERT_TRUE(b->GetMeta("signature", &value).ok());
  EXPECT_FALSE(value.has_value());  // never written
  ASSERT_TRUE(a->PutMeta("signature", std::string("v1\nx=\0y", 7)).ok());
  ASSERT_TRUE(b->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, std::string("v1\nx=\0y", 7));
  ASSERT_TRUE(b->PutMeta("signature", "v2").ok());
  ASSERT_TRUE(a->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, "v2");
  EXPECT_FALSE(a->PutMeta("", "x").ok());
  EXPECT_FALSE(a->PutMeta(std::string(Store::kMaxMetaName + 1, 'n'), "x").ok());
  EXPECT_EQ(a->Lookup(Scope(7), "signature", LookupMode::kMayBlock).outcome, LookupOutcome::kMiss);
}

}  // namespace
}  // namespace idemgate

// Attempt fencing on PostgreSQL (SPEC §12 A2/A3), against a real server: a "backend" on its own
// libpq connection calls idemgate_fence inside its transaction, and the stores' claims see what
// it committed -- the interleavings of docs/fencing.md's table, one test each, and a race.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <openssl/evp.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "tests/unit/store/store_backends.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;
using namespace std::chrono_literals;

const auto* const kPgEnv = ::testing::AddGlobalTestEnvironment(new PgEnvironment);

std::string Sql(const std::string& sql) {
  std::string out, error;
  EXPECT_TRUE(SharedPg().Exec(0, sql, &out, &error)) << sql << ": " << error;
  return out;
}

// SPEC §12 A1's record id, computed here independently of the gateway's code.
std::string RecordId(const ScopeId& scope, std::string_view key) {
  std::string in("idemgate-record-v1", 18);
  in.push_back('\0');
  in.append(reinterpret_cast<const char*>(scope.data()), scope.size());
  in.append(key);
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(in.data(), in.size(), md, &len, EVP_sha256(), nullptr);
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", md[i]);
  return std::string(hex, 32);
}

// A backend's own connection and transaction: BEGIN, the fence (and its business write), then
// COMMIT or ROLLBACK. `Fence` returns the SQLSTATE ("" when it succeeded).
class Backend {
 public:
  explicit Backend(const char* isolation = "READ COMMITTED") {
    conn_ = PQconnectdb(SharedPg().Dsn(0).c_str());
    EXPECT_EQ(PQstatus(conn_), CONNECTION_OK) << PQerrorMessage(conn_);
    Exec("SELECT idemgate_fence(repeat('0', 32), 1)");  // compiles the function (fails: IG001)
    Exec(std::string("BEGIN ISOLATION LEVEL ") + isolation);
    Exec("SELECT 1");  // the snapshot of a REPEATABLE READ transaction is taken here
  }
  ~Backend() { PQfinish(conn_); }
  std::string Fence(const std::string& record, int64_t attempt) {
    std::string a = std::to_string(attempt);
    const char* values[2] = {record.c_str(), a.c_str()};
    PGresult* r = PQexecParams(conn_, "SELECT idemgate_fence($1, $2)", 2, nullptr, values, nullptr,
                               nullptr, 0);
    std::string state;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
      const char* s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      state = s != nullptr ? s : "?";
      message_ = PQresultErrorMessage(r);
    }
    PQclear(r);
    return state;
  }
  bool Exec(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    return ok;
  }
  bool Commit() { return Exec("COMMIT"); }
  void Rollback() { Exec("ROLLBACK"); }
  const std::string& message() const { return message_; }

 private:
  PGconn* conn_ = nullptr;
  std::string message_;
};

class PgFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    SharedPg().Exec(0, "DROP TABLE IF EXISTS idemgate_records, idemgate_schema, idemgate_fences",
                    nullptr, &error);
    a_ = Open(&error);
    b_ = Open(&error);
    ASSERT_TRUE(a_ && b_) << error;
  }
  std::unique_ptr<Store> Open(std::string* error) {
    PgStoreOptions o;
    o.dsn = SharedPg().Dsn(0);
    o.connections = 2;
    o.clock_offset_ms = &offset_;
    return OpenPgStore(o, error);
  }
  // A fresh claim with a 1 s lease, and its record id.
  ClaimResult Fresh(const std::string& key, std::string* rid) {
    ClaimResult won = ClaimNow(*a_, Req(key, 1, 1'000));
    EXPECT_EQ(won.outcome, ClaimOutcome::kFresh);
    *rid = RecordId(Scope(7), key);
    return won;
  }
  ClaimResult AfterLease(Store& store, const std::string& key) {
    offset_ += 1'500;
    return ClaimNow(store, Req(key, 1, 1'000));
  }
  std::atomic<int64_t> offset_{0};
  std::unique_ptr<Store> a_, b_;
};

TEST_F(PgFenceTest, SucceedsOnlyWhileInFlightAtItsAttemptAndOncePerRecord) {
  std::string rid;
  ClaimResult won = Fresh("k", &rid);
  {
    Backend tx;
    EXPECT_EQ(tx.Fence(rid, 2), "IG001");  // not this attempt
    EXPECT_NE(tx.message().find("is at attempt 1"), std::string::npos) << tx.message();
  }
  {
    Backend tx;
    EXPECT_EQ(tx.Fence(RecordId(Scope(7), "other"), 1), "IG001");  // no such record
  }
  for (const char* bad : {"ABCDEF0123456789abcdef0123456789", "abc", ""}) {
    Backend tx;
    EXPECT_EQ(tx.Fence(bad, 1), "IG002") << bad;
  }
  {
    Backend tx;
    EXPECT_EQ(tx.Fence(rid, 0), "IG002");
  }
  {
    Backend tx;
    EXPECT_EQ(tx.Fence(rid, 1), "");
    EXPECT_TRUE(tx.Commit());
  }
  {
    Backend tx;  // the same attempt again (a second side effect, a retry inside the backend)
    EXPECT_EQ(tx.Fence(rid, 1), "IG001");
    EXPECT_NE(tx.message().find("already fenced"), std::string::npos) << tx.message();
  }
  ASSERT_TRUE(CompleteNow(*a_, won.token, Resp(201, "made")).ok());
  {
    Backend tx;
    EXPECT_EQ(tx.Fence(rid, 1), "IG001");
    EXPECT_NE(tx.message().find("completed"), std::string::npos) << tx.message();
  }
  EXPECT_EQ(ClaimNow(*b_, Req("k", 1, 1'000)).outcome, ClaimOutcome::kReplay);
}

// The gateway died after the backend committed: the takeover on the other instance owns the key
// but learns that attempt 1 executed (its new owner stores the 502); if that owner dies too,
// the next one learns it again.
TEST_F(PgFenceTest, CommittedFenceIsReportedToEveryLaterTakeover) {
  std::string rid;
  Fresh("k", &rid);
  {
    Backend tx;
    ASSERT_EQ(tx.Fence(rid, 1), "");
    ASSERT_TRUE(tx.Commit());
  }
  ClaimResult next = AfterLease(*b_, "k");
  ASSERT_EQ(next.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(next.token.attempt, 2u);
  EXPECT_EQ(next.fenced_attempt, 1u);
  ClaimResult again = AfterLease(*a_, "k");  // that owner died before storing its 502
  ASSERT_EQ(again.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(again.token.attempt, 3u);
  EXPECT_EQ(again.fenced_attempt, 1u);
  ASSERT_TRUE(CompleteNow(*a_, again.token, Resp(502, "lost")).ok());
  EXPECT_EQ(ClaimNow(*b_, Req("k", 1, 1'000)).outcome, ClaimOutcome::kReplay);
}

// No fence (the backend never got the request, or rolled back): a takeover, unfenced, and the
// stale attempt's fence fails afterwards while the new attempt's succeeds.
TEST_F(PgFenceTest, UnfencedAttemptIsTakenOverAndItsLateFenceFails) {
  std::string rid;
  Fresh("k", &rid);
  {
    Backend tx;
    ASSERT_EQ(tx.Fence(rid, 1), "");
    tx.Rollback();
  }
  ClaimResult next = AfterLease(*b_, "k");
  ASSERT_EQ(next.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(next.token.attempt, 2u);
  EXPECT_EQ(next.fenced_attempt, 0u);
  Backend stale;
  EXPECT_EQ(stale.Fence(rid, 1), "IG001");
  stale.Rollback();
  Backend current;
  EXPECT_EQ(current.Fence(rid, 2), "");
  EXPECT_TRUE(current.Commit());
}

// A fence's transaction still open when the lease ends: the record is in flight (no takeover,
// no store connection waiting on it -- complete, release, delete and lookups all answer at once);
// after its commit the takeover learns it executed, after its rollback it is a plain takeover.
TEST_F(PgFenceTest, OpenFenceKeepsTheRecordInFlightAndBlocksNothing) {
  std::string rid;
  ClaimResult won = Fresh("k", &rid);
  Backend tx;
  ASSERT_EQ(tx.Fence(rid, 1), "");
  auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    ClaimResult busy = AfterLease(i % 2 == 0 ? *b_ : *a_, "k");
    EXPECT_EQ(busy.outcome, ClaimOutcome::kInFlight);
    EXPECT_EQ(busy.retry_after_s, 1);
  }
  EXPECT_EQ(a_->Lookup(Scope(7), "k", LookupMode::kMayBlock).outcome, LookupOutcome::kFound);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);  // nothing waited for the backend
  ASSERT_TRUE(tx.Commit());
  ClaimResult next = AfterLease(*b_, "k");
  ASSERT_EQ(next.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(next.fenced_attempt, 1u);
  EXPECT_EQ(CompleteNow(*a_, won.token, Resp(201, "late")).code, StoreCode::kStaleClaim);

  // The same with a rollback, and the original owner completing while the fence is open.
  std::string rid2;
  ClaimResult won2 = Fresh("k2", &rid2);
  Backend tx2;
  ASSERT_EQ(tx2.Fence(rid2, 1), "");
  EXPECT_EQ(AfterLease(*b_, "k2").outcome, ClaimOutcome::kInFlight);
  started = std::chrono::steady_clock::now();
  ASSERT_TRUE(CompleteNow(*a_, won2.token, Resp(201, "made")).ok());  // no row lock to wait on
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  tx2.Rollback();
  EXPECT_EQ(ClaimNow(*b_, Req("k2", 1, 1'000)).outcome, ClaimOutcome::kReplay);

  std::string rid3;
  Fresh("k3", &rid3);
  Backend tx3;
  ASSERT_EQ(tx3.Fence(rid3, 1), "");
  started = std::chrono::steady_clock::now();
  EXPECT_TRUE(DeleteNow(*b_, Scope(7), "k3").ok());  // admin unblock: does not wait either
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  tx3.Rollback();
}

// The race the advisory lock and the post-lock snapshot exist for: a fence committing while a
// takeover runs. Whatever the order, never both "the fence committed" and "the takeover was told
// nothing" -- that would execute the key twice. Under REPEATABLE READ a stale snapshot may let
// the fence commit after the takeover; then the new attempt's fence must fail.
void Race(Store& store, std::atomic<int64_t>& offset, const char* isolation, const char* tag,
          int rounds) {
  int fenced_first = 0, taken_first = 0, stale = 0;
  for (int i = 0; i < rounds; ++i) {
    std::string key = std::string("race-") + tag + std::to_string(i);
    auto jitter = std::chrono::microseconds(200 * (i % 8));  // moves the fence across the claim
    std::string rid = RecordId(Scope(7), key);
    ASSERT_EQ(ClaimNow(store, Req(key, 1, 1)).outcome, ClaimOutcome::kFresh);
    offset += 5;  // the 1 ms lease is over
    std::promise<void> go;
    std::shared_future<void> start = go.get_future().share();
    Backend tx(isolation);  // connected and in its transaction before the start
    auto fence = std::async(std::launch::async, [&, start] {
      start.wait();
      if (i % 2 == 0) std::this_thread::sleep_for(jitter);
      bool ok = tx.Fence(rid, 1).empty() && tx.Commit();
      return ok;
    });
    auto claim = std::async(std::launch::async, [&, start] {
      start.wait();
      if (i % 2 == 1) std::this_thread::sleep_for(jitter);
      return ClaimNow(store, Req(key, 1, 60'000));
    });
    go.set_value();
    bool committed = fence.get();
    ClaimResult c = claim.get();
    if (c.outcome == ClaimOutcome::kInFlight) continue;  // the fence held the lock: try later
    ASSERT_EQ(c.outcome, ClaimOutcome::kTakeover) << i;
    if (committed && c.fenced_attempt == 1) ++fenced_first;
    if (!committed) ++taken_first;
    if (committed && c.fenced_attempt == 0) {
      // Only a stale snapshot gets here; attempt 2 must then never execute.
      ++stale;
      Backend next;
      EXPECT_NE(next.Fence(rid, 2), "") << "attempt 1 committed and attempt 2 may run: " << key;
    }
  }
  std::printf("%s: fence first %d, takeover first %d, stale fence %d of %d\n", isolation,
              fenced_first, taken_first, stale, rounds);
  EXPECT_GT(fenced_first + stale, 0);  // the fence won some rounds
  if (std::string_view(isolation) == "READ COMMITTED") {
    EXPECT_GT(taken_first, 0);  // and lost some
    EXPECT_EQ(stale, 0);        // a fresh snapshot after the lock: never stale
  }
}

TEST_F(PgFenceTest, FenceRacingATakeoverNeverLetsBothExecute) {
  Race(*b_, offset_, "READ COMMITTED", "rc", 150);
  Race(*b_, offset_, "REPEATABLE READ", "rr", 100);
}

// Schema version 1 (a gateway from before fencing) is upgraded in place, its records kept.
TEST_F(PgFenceTest, VersionOneDatabaseIsUpgradedInPlace) {
  std::string rid;
  Fresh("old", &rid);
  a_.reset();
  b_.reset();
  Sql("DROP TABLE idemgate_fences; DROP INDEX idemgate_records_record_id;"
      " DROP FUNCTION idemgate_fence(text, bigint);"
      " DROP FUNCTION idemgate_take_over(bytea, bytea, bytea, bigint, bigint, bigint, bigint);"
      " UPDATE idemgate_schema SET version = 1");
  std::string error;
  a_ = Open(&error);
  ASSERT_NE(a_, nullptr) << error;
  EXPECT_EQ(Sql("SELECT version FROM idemgate_schema"), "2");
  // The fence finds its record through the index (the table may hold millions).
  EXPECT_NE(Sql("SET enable_seqscan = off; EXPLAIN (FORMAT JSON) SELECT 1 FROM idemgate_records t"
                " WHERE idemgate_record_id(t.scope_id, t.idem_key) = '\\x00'")
                .find("idemgate_records_record_id"),
            std::string::npos);
  Backend tx;
  EXPECT_EQ(tx.Fence(rid, 1), "");
  EXPECT_TRUE(tx.Commit());
  ClaimResult next = AfterLease(*a_, "old");
  EXPECT_EQ(next.fenced_attempt, 1u);
}

// Marks go with their records: once a record expired (and no later life of it is live), the
// background clean-up deletes its mark.
TEST_F(PgFenceTest, CleanupDeletesTheMarksOfExpiredRecords) {
  PgStoreOptions o;
  o.dsn = SharedPg().Dsn(0);
  o.connections = 1;
  o.cleanup_interval_ms = 50;
  o.clock_offset_ms = &offset_;
  std::string error;
  auto store = OpenPgStore(o, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_EQ(ClaimNow(*store, Req("gone", 1, 1'000, 2'000)).outcome, ClaimOutcome::kFresh);
  ASSERT_EQ(ClaimNow(*store, Req("kept", 1, 1'000, 600'000)).outcome, ClaimOutcome::kFresh);
  for (const char* key : {"gone", "kept"}) {
    Backend tx;
    ASSERT_EQ(tx.Fence(RecordId(Scope(7), key), 1), "");
    ASSERT_TRUE(tx.Commit());
  }
  EXPECT_EQ(Sql("SELECT count(*) FROM idemgate_fences"), "2");
  offset_ += 5'000;
  bool cleaned = false;
  for (int i = 0; i < 200 && !cleaned; ++i) {
    std::this_thread::sleep_for(20ms);
    cleaned = Sql("SELECT count(*) FROM idemgate_fences") == "1";
  }
  EXPECT_TRUE(cleaned);
  EXPECT_EQ(Sql("SELECT count(*) FROM idemgate_fences f WHERE f.record_id = decode('" +
                RecordId(Scope(7), "kept") + "', 'hex')"),
            "1");
}

}  // namespace
}  // namespace idemgate

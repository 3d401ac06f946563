// SPDX-License-Identifier: Apache-2.0
// Through the real binary on a real PostgreSQL: the admin's lookup by the access log's key_hash
// answers as on the embedded store, from any gateway sharing the database, through an index the
// start-up builds (and builds again when a broken build left it invalid).
#include <regex>

#include "tests/integration/pg_fixture.h"

namespace idemgate::test {
namespace {

constexpr char kToken[] = "admin-token-pg-31";

class PgAdminTest : public PgGatewaysTest {
 protected:
  void SetUp() override {
    PgGatewaysTest::SetUp();
    Set("admin", "address", "\"127.0.0.1:0\"");
    Set("admin", "token", std::string("\"") + kToken + "\"");
    Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  }
  uint16_t AdminPort(size_t i) { return gateways_.at(i)->WaitForPort("admin listening on "); }
  HttpResponse Admin(size_t i, const std::string& target) {
    TestClient client(AdminPort(i));
    return client.Request("GET", target, {{"Authorization", std::string("Bearer ") + kToken}});
  }
  std::string LoggedKeyHash() {
    static const std::regex kHash("\"key_hash\":\"([0-9a-f]{16})\"");
    std::smatch m;
    std::string log;
    for (int i = 0; i < 500 && !std::regex_search(log, m, kHash); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      log = dir_.ReadFile("access.log");
    }
    return std::regex_search(log, m, kHash) ? m[1].str() : "";
  }
  std::string Sql(const std::string& sql) {
    std::string out, error;
    EXPECT_TRUE(pg_.Exec(0, sql, &out, &error)) << sql << ": " << error;
    return out;
  }
  static constexpr char kIndexValid[] =
      "SELECT coalesce((SELECT indisvalid::text FROM pg_index WHERE indexrelid ="
      " to_regclass('idemgate_records_key_hash')), 'absent')";
};

TEST_F(PgAdminTest, RecordByTheAccessLogKeyHashFromEveryGateway) {
  StartGateway(0);
  ASSERT_EQ(Post(0, "kh-pg-1", R"({"amount":"5"})").status, 201);
  const std::string key_hash = LoggedKeyHash();
  ASSERT_FALSE(key_hash.empty());
  StartGateway(1);  // shares the database: the record is found there too
  for (size_t i : {0, 1}) {
    HttpResponse found = Admin(i, "/records?key_hash=" + key_hash);
    EXPECT_EQ(found.status, 200) << found.raw;
    EXPECT_EQ(found.Header("Content-Type"), "application/json");
    EXPECT_NE(found.body.find("\"key_hash\":\"" + key_hash + "\""), std::string::npos);
    EXPECT_NE(found.body.find("\"key\":\"kh-pg-1\""), std::string::npos) << found.body;
    EXPECT_NE(found.body.find("\"state\":\"completed\",\"attempt\":1"), std::string::npos)
        << found.body;
    EXPECT_NE(found.body.find("\"status\":201"), std::string::npos) << found.body;
  }
  HttpResponse none = Admin(0, "/records?key_hash=0123456789abcdef");
  EXPECT_EQ(none.status, 404) << none.raw;
  EXPECT_NE(none.body.find("\"error\":\"not_found\""), std::string::npos) << none.body;
  EXPECT_EQ(Admin(0, "/records?key_hash=xyz").status, 400);
  // An expired record is not live: gone from the lookup (the row is still in the table).
  Sql("UPDATE idemgate_records SET expires_ms = 1");
  EXPECT_EQ(Admin(1, "/records?key_hash=" + key_hash).status, 404);
  EXPECT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(Sql(kIndexValid), "true");
}

TEST_F(PgAdminTest, AnIndexLeftInvalidIsBuiltAgain) {
  StartGateway(0);
  ASSERT_EQ(Sql(kIndexValid), "true");
  // What an interrupted CREATE INDEX CONCURRENTLY leaves behind.
  Sql("UPDATE pg_index SET indisvalid = false WHERE indexrelid ="
      " 'idemgate_records_key_hash'::regclass");
  ASSERT_EQ(Sql(kIndexValid), "false");
  gateways_[0]->Kill(SIGKILL);
  gateways_[0]->Wait();
  StartGateway(0);
  EXPECT_EQ(Sql(kIndexValid), "true");
  ASSERT_EQ(Post(0, "kh-pg-2", "{}").status, 201);
  const std::string key_hash = LoggedKeyHash();
  EXPECT_EQ(Admin(0, "/records?key_hash=" + key_hash).status, 200);
}

}  // namespace
}  // namespace idemgate::test

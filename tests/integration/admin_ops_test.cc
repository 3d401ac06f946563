// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the admin port's operator conveniences. A record found by the
// access log's key_hash (no merchant credential needed), and JSON (never evhttp's HTML page) for
// a method the admin API does not take.
#include <regex>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

constexpr char kToken[] = "admin-token-77aa";

class AdminOpsTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("admin", "token", std::string("\"") + kToken + "\"");
    Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
    StartWithAdmin();
  }
  HttpResponse Admin(std::string_view method, const std::string& target) {
    TestClient client(admin_port_);
    return client.Request(method, target, {{"Authorization", std::string("Bearer ") + kToken}});
  }
  // The key_hash of the access log's first guarded line.
  std::string LoggedKeyHash() {
    static const std::regex kHash("\"key_hash\":\"([0-9a-f]{16})\"");
    std::smatch m;
    std::string log = AccessLogWhen(
        [](const std::string& text) { return text.find("\"key_hash\"") != std::string::npos; });
    return std::regex_search(log, m, kHash) ? m[1].str() : "";
  }
};

TEST_F(AdminOpsTest, RecordByTheAccessLogKeyHash) {
  ASSERT_EQ(Post("kh-1", R"({"amount":"5"})").status, 201);
  const std::string key_hash = LoggedKeyHash();
  ASSERT_FALSE(key_hash.empty());
  HttpResponse found = Admin("GET", "/records?key_hash=" + key_hash);
  EXPECT_EQ(found.status, 200) << found.raw;
  EXPECT_EQ(found.Header("Content-Type"), "application/json");
  EXPECT_NE(found.body.find("\"key\":\"kh-1\""), std::string::npos) << found.body;
  EXPECT_NE(found.body.find("\"state\":\"completed\",\"attempt\":1"), std::string::npos)
      << found.body;
  EXPECT_NE(found.body.find("\"status\":201"), std::string::npos) << found.body;

  HttpResponse none = Admin("GET", "/records?key_hash=0123456789abcdef");
  EXPECT_EQ(none.status, 404) << none.raw;
  EXPECT_NE(none.body.find("\"error\":\"not_found\""), std::string::npos) << none.body;
  HttpResponse bad = Admin("GET", "/records?key_hash=xyz");
  EXPECT_EQ(bad.status, 400) << bad.raw;
  EXPECT_NE(bad.body.find("\"error\":\"bad_request\""), std::string::npos) << bad.body;
  // Without the admin token, nothing.
  TestClient client(admin_port_);
  EXPECT_EQ(client.Request("GET", "/records?key_hash=" + key_hash).status, 401);
  // A delete still needs the key and the credential.
  EXPECT_EQ(Admin("DELETE", "/records?key_hash=" + key_hash).status, 400);
  EXPECT_EQ(Post("kh-1", R"({"amount":"5"})").Header("Idempotent-Replayed"), "true");
}

TEST_F(AdminOpsTest, EveryMethodGetsAJsonAnswer) {
  for (const char* method : {"PUT", "PATCH", "OPTIONS", "TRACE"}) {
    for (const char* path : {"/metrics", "/healthz", "/records?key=x", "/nowhere"}) {
      HttpResponse r = Admin(method, path);
      EXPECT_NE(r.status, 501) << method << " " << path << "\n" << r.raw;
      EXPECT_TRUE(r.status == 405 || r.status == 404 || r.status == 400)
          << method << " " << path << "\n"
          << r.raw;
      EXPECT_EQ(r.Header("Content-Type"), "application/json") << method << " " << path;
      EXPECT_NE(r.body.find("\"error\":\""), std::string::npos) << r.body;
    }
  }
}

}  // namespace
}  // namespace idemgate::test

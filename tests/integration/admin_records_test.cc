// Through the real binary: the support-staff record API (token, lookup, delete unblocks a key).
#include <regex>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

constexpr char kToken[] = "admin-token-4b1d";
constexpr char kCredential[] = "Bearer merchant-demo";  // kMerchant's Authorization value

class RecordApiTest : public GatewayTest {
 protected:
  void StartWithAdmin(const std::string& token) {
    Set("admin", "address", "\"127.0.0.1:0\"");
    if (!token.empty()) Set("admin", "token", "\"" + token + "\"");
    StartGateway();
    admin_port_ = gateway_.WaitForPort("admin listening on ");
    ASSERT_NE(admin_port_, 0) << gateway_.log();
  }

  HttpResponse Records(std::string_view method, const std::string& query,
                       const HeaderList& headers) {
    TestClient client(admin_port_);
    return client.Request(method, "/records?" + query, headers);
  }

  static HeaderList Auth(const std::string& token) {
    return {{"Authorization", "Bearer " + token}, {"X-Idemgate-Credential", kCredential}};
  }

  uint16_t admin_port_ = 0;
};

TEST_F(RecordApiTest, OffWithoutAToken) {
  StartWithAdmin("");
  ASSERT_EQ(Post("r-off", "{}").status, 201);
  HttpResponse get = Records("GET", "key=r-off", Auth("anything"));
  EXPECT_EQ(get.status, 404) << get.raw;
  EXPECT_NE(get.body.find("\"error\":\"not_found\""), std::string::npos);
  EXPECT_EQ(Records("DELETE", "key=r-off", Auth("anything")).status, 404);
  EXPECT_EQ(Post("r-off", "{}").Header("Idempotent-Replayed"), "true");  // not deleted
}

TEST_F(RecordApiTest, RefusesAMissingOrWrongToken) {
  StartWithAdmin(kToken);
  ASSERT_EQ(Post("r-auth", "{}").status, 201);
  for (const HeaderList& headers :
       {HeaderList{{"X-Idemgate-Credential", kCredential}}, Auth("wrong-token"),
        Auth(std::string(kToken) + "x"), HeaderList{{"Authorization", kToken}}}) {
    for (const char* method : {"GET", "DELETE"}) {
      HttpResponse r = Records(method, "key=r-auth", headers);
      EXPECT_EQ(r.status, 401) << method << " " << r.raw;
      EXPECT_EQ(r.Header("Content-Type"), "application/json");
      EXPECT_NE(r.body.find("\"error\":\"unauthorized\""), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(Post("r-auth", "{}").Header("Idempotent-Replayed"), "true");  // still there
}

TEST_F(RecordApiTest, ReturnsTheRecordForTheRightToken) {
  StartWithAdmin(kToken);
  const std::string body = R"({"amount":"42"})";
  ASSERT_EQ(Post("r-get", body).status, 201);
  std::string fp = ExpectedFingerprintPrefix("POST", "/v1/payment_intents", body);

  // The credential as a header, and as a query parameter; the key quoted or bare (K1).
  for (const auto& [query, headers] : std::vector<std::pair<std::string, HeaderList>>{
           {"key=r-get", Auth(kToken)},
           {"key=%22r-get%22", Auth(kToken)},
           {"key=r-get&credential=Bearer%20merchant-demo",
            {{"Authorization", std::string("Bearer ") + kToken}}}}) {
    HttpResponse r = Records("GET", query, headers);
    ASSERT_EQ(r.status, 200) << query << " " << r.raw;
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
    static const std::regex kShape(
        R"re(\{"state":"completed","attempt":1,"created":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",)re"
        R"re("expires":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","fingerprint":"([0-9a-f]{16})",)re"
        R"re("status":201\}\n)re");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(r.body, m, kShape)) << r.body;
    EXPECT_EQ(m[1], fp);
  }
  // Another caller's scope, and an unknown key: 404.
  HeaderList other = {{"Authorization", std::string("Bearer ") + kToken},
                      {"X-Idemgate-Credential", "Bearer someone-else"}};
  EXPECT_EQ(Records("GET", "key=r-get", other).status, 404);
  EXPECT_EQ(Records("GET", "key=r-unknown", Auth(kToken)).status, 404);
  EXPECT_EQ(Records("GET", "credential=x", Auth(kToken)).status, 400);  // no key
}

TEST_F(RecordApiTest, DeleteUnblocksAnInFlightKey) {
  Set("upstream", "response_timeout", "\"3s\"");
  StartWithAdmin(kToken);
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  HttpResponse stuck_answer;
  std::thread stuck([&] { stuck_answer = Post("r-stuck", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  ASSERT_EQ(Post("r-stuck", "{}").status, 409);

  HttpResponse found = Records("GET", "key=r-stuck", Auth(kToken));
  ASSERT_EQ(found.status, 200) << found.raw;
  EXPECT_NE(found.body.find("\"state\":\"in_flight\""), std::string::npos) << found.body;

  HttpResponse deleted = Records("DELETE", "key=r-stuck", Auth(kToken));
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  EXPECT_NE(deleted.body.find("\"deleted\":true"), std::string::npos);
  EXPECT_EQ(Records("GET", "key=r-stuck", Auth(kToken)).status, 404);

  HttpResponse again = Post("r-stuck", "{}");  // executes again
  EXPECT_EQ(again.status, 201) << again.raw;
  EXPECT_FALSE(again.Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(upstream_.requests(), 2);
  stuck.join();
  // C3: the superseded attempt's result (its 504) is refused by the compare-and-set, and its
  // client gets 409, not a second, different answer for the same key.
  EXPECT_EQ(stuck_answer.status, 409) << stuck_answer.raw;
  EXPECT_EQ(ErrorCodeOf(stuck_answer), "idempotency_key_in_use");
  // The new attempt's result is the one kept; the stuck attempt cannot overwrite it.
  HttpResponse replay = Post("r-stuck", "{}");
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Records("DELETE", "key=r-stuck-never", Auth(kToken)).status, 404);
}

}  // namespace
}  // namespace idemgate::test

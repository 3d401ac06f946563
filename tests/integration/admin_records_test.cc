// SPDX-License-Identifier: Apache-2.0
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
    if (!token.empty()) Set("admin", "token", "\"" + token + "\"");
    GatewayTest::StartWithAdmin();
  }

  HttpResponse Records(std::string_view method, const std::string& query,
                       const HeaderList& headers) {
    TestClient client(admin_port_);
    return client.Request(method, "/records?" + query, headers);
  }

  static HeaderList Auth(const std::string& token) {
    return {{"Authorization", "Bearer " + token}, {"X-Idemgate-Credential", kCredential}};
  }

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

// As on the data plane (S3), a credential or token given twice is refused, not read as its
// first: the admin port never picks one of two scopes for the caller.
TEST_F(RecordApiTest, RefusesATokenOrCredentialGivenTwice) {
  StartWithAdmin(kToken);
  ASSERT_EQ(Post("r-twice", "{}").status, 201);
  HeaderList two_credentials = Auth(kToken);
  two_credentials.emplace_back("X-Idemgate-Credential", "Bearer someone-else");
  HeaderList two_tokens = Auth(kToken);
  two_tokens.emplace_back("Authorization", "Bearer wrong-token");
  for (const HeaderList& headers : {two_credentials, two_tokens}) {
    for (const char* method : {"GET", "DELETE"}) {
      HttpResponse r = Records(method, "key=r-twice", headers);
      EXPECT_EQ(r.status, 400) << method << " " << r.raw;
      EXPECT_NE(r.body.find("\"error\":\"bad_request\""), std::string::npos) << r.body;
      EXPECT_NE(r.body.find("more than once"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(Post("r-twice", "{}").Header("Idempotent-Replayed"), "true");  // not deleted
}

TEST_F(RecordApiTest, ReturnsTheRecordForTheRightToken) {
  StartWithAdmin(kToken);
  const std::string body = R"({"amount":"42"})";
  ASSERT_EQ(Post("r-get", body).status, 201);
  std::string fp = ExpectedFingerprintPrefix("POST", "/v1/payment_intents", body);

  // The key quoted or bare (K1).
  for (const std::string query : {"key=r-get", "key=%22r-get%22"}) {
    HttpResponse r = Records("GET", query, Auth(kToken));
    ASSERT_EQ(r.status, 200) << query << " " << r.raw;
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
    static const std::regex kShape(
        R"re(\{"record_id":"([0-9a-f]{32})","state":"completed","attempt":1,)re"
        R"re("created":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",)re"
        R"re("expires":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","fingerprint":"([0-9a-f]{16})",)re"
        R"re("status":201\}\n)re");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(r.body, m, kShape)) << r.body;
    // SPEC §12 A1: the record id is what the upstream was sent in Idempotency-Record.
    ASSERT_TRUE(upstream_.last_request().has_value());
    EXPECT_EQ(m[1], upstream_.last_request()->Header("Idempotency-Record").value_or("?"));
    EXPECT_EQ(upstream_.last_request()->Header("Idempotency-Attempt"), "1");
    EXPECT_EQ(m[2], fp);
  }
  // Another caller's scope, and an unknown key: 404.
  HeaderList other = {{"Authorization", std::string("Bearer ") + kToken},
                      {"X-Idemgate-Credential", "Bearer someone-else"}};
  EXPECT_EQ(Records("GET", "key=r-get", other).status, 404);
  EXPECT_EQ(Records("GET", "key=r-unknown", Auth(kToken)).status, 404);
  EXPECT_EQ(Records("GET", "force=true", Auth(kToken)).status, 400);  // no key
}

// A base64 credential ('+', '/', '=') names its own scope. It is taken from the
// X-Idemgate-Credential header only: the credential= query parameter (where form decoding turns
// '+' into a space, naming another scope) is refused with a message saying where it belongs.
TEST_F(RecordApiTest, Base64CredentialFindsItsRecordThroughTheHeaderOnly) {
  StartWithAdmin(kToken);
  const std::string credential = "Basic YWxp+ZTpz/ZWNy==";
  ASSERT_EQ(Post("r-b64", "{}", "/v1/payment_intents", {{"Authorization", credential}}).status,
            201);
  HeaderList by_header = {{"Authorization", std::string("Bearer ") + kToken},
                          {"X-Idemgate-Credential", credential}};
  HttpResponse found = Records("GET", "key=r-b64", by_header);
  ASSERT_EQ(found.status, 200) << found.raw;
  EXPECT_NE(found.body.find("\"state\":\"completed\""), std::string::npos) << found.body;

  HeaderList token_only = {{"Authorization", std::string("Bearer ") + kToken}};
  for (const char* method : {"GET", "DELETE"}) {
    for (const std::string query : {"key=r-b64&credential=Basic%20YWxp+ZTpz/ZWNy==",
                                    "key=r-b64&credential=Basic%20YWxp%2BZTpz%2FZWNy%3D%3D"}) {
      HttpResponse r = Records(method, query, token_only);
      EXPECT_EQ(r.status, 400) << method << " " << query << " " << r.raw;
      EXPECT_NE(r.body.find("\"error\":\"bad_request\""), std::string::npos) << r.body;
      EXPECT_NE(r.body.find("X-Idemgate-Credential"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(Post("r-b64", "{}", "/v1/payment_intents", {{"Authorization", credential}})
                .Header("Idempotent-Replayed"),
            "true");  // nothing was deleted
}

// A live in-flight record is not deleted unless the request says force=true (the
// answer says what forcing risks); every admin delete is logged with who, which record, which
// state, and whether it was forced.
TEST_F(RecordApiTest, DeleteOfALiveAttemptNeedsForce) {
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

  HttpResponse refused = Records("DELETE", "key=r-stuck", Auth(kToken));
  ASSERT_EQ(refused.status, 409) << refused.raw;
  EXPECT_NE(refused.body.find("{\"error\":\"record_in_flight\",\"detail\":"), std::string::npos)
      << refused.body;
  EXPECT_NE(refused.body.find("force=true"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("second time"), std::string::npos) << refused.body;
  EXPECT_TRUE(refused.Header("Retry-After").has_value());
  EXPECT_TRUE(gateway_.WaitForOutput("forced=false result=refused")) << gateway_.log();
  // Still guarded: the retry is told to wait, and nothing else went upstream.
  EXPECT_EQ(ErrorCodeOf(Post("r-stuck", "{}")), "idempotency_key_in_use");
  EXPECT_EQ(upstream_.requests(), 1);
  EXPECT_EQ(Records("DELETE", "key=r-stuck&force=maybe", Auth(kToken)).status, 400);

  HttpResponse deleted = Records("DELETE", "key=r-stuck&force=true", Auth(kToken));
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  EXPECT_NE(deleted.body.find("\"deleted\":true,\"forced\":true"), std::string::npos);
  EXPECT_EQ(Records("GET", "key=r-stuck", Auth(kToken)).status, 404);
  static const std::regex kLogLine(
      R"re(INFO admin: delete: client=127\.0\.0\.1 record=[0-9a-f]{16} state=in_flight )re"
      R"re(forced=true result=deleted)re");
  EXPECT_TRUE(gateway_.WaitForOutput("forced=true result=deleted"));
  EXPECT_TRUE(std::regex_search(gateway_.log(), kLogLine)) << gateway_.log();
  EXPECT_EQ(gateway_.log().find("r-stuck"), std::string::npos);  // the key itself is not logged

  HttpResponse again = Post("r-stuck", "{}");  // executes again: the risk force accepted
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
  EXPECT_TRUE(gateway_.WaitForOutput("state=none forced=false result=not_found"));
}

// An in-flight record whose lease ran out (the gateway crashed mid-attempt) is not deleted without
// force either: a retry may take it over at any moment, and the delete would then remove the
// live attempt's record. The retry itself needs no delete.
TEST_F(RecordApiTest, DeleteOfAnExpiredAttemptNeedsForceToo) {
  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"400ms\"");
  Set("idempotency", "lease", "\"1s\"");
  StartWithAdmin(kToken);
  upstream_.EnqueueBehavior(UpstreamBehavior::Act(UpstreamAction::kHang));
  std::thread cut([&] { Post("r-crash", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  RestartGateway();  // kill -9 while the attempt runs upstream
  cut.join();
  admin_port_ = gateway_.WaitForPort("admin listening on ");
  ASSERT_NE(admin_port_, 0) << gateway_.log();

  HttpResponse refused;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {  // 409 while the lease lives, then 409 saying it ran out
    refused = Records("DELETE", "key=r-crash", Auth(kToken));
    ASSERT_EQ(refused.status, 409) << refused.raw;
    if (refused.body.find("ended without a stored result") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_NE(refused.body.find("force=true"), std::string::npos) << refused.body;
  EXPECT_FALSE(refused.Header("Retry-After").has_value());
  EXPECT_TRUE(gateway_.WaitForOutput("state=in_flight_expired forced=false result=refused"));

  HttpResponse retry = Post("r-crash", "{}");  // takes the attempt over: executes once more
  EXPECT_EQ(retry.status, 201) << retry.raw;
  EXPECT_EQ(upstream_.requests(), 2);
  EXPECT_EQ(Post("r-crash", "{}").Header("Idempotent-Replayed"), "true");
}

// A completed record (nothing upstream any more) is deleted without force, and logged.
TEST_F(RecordApiTest, DeleteOfACompletedRecordNeedsNoForce) {
  StartWithAdmin(kToken);
  ASSERT_EQ(Post("r-done", "{}").status, 201);
  HttpResponse deleted = Records("DELETE", "key=r-done", Auth(kToken));
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  EXPECT_NE(deleted.body.find("\"state\":\"completed\""), std::string::npos) << deleted.body;
  EXPECT_TRUE(gateway_.WaitForOutput("state=completed forced=false result=deleted"))
      << gateway_.log();
  EXPECT_FALSE(Post("r-done", "{}").Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(upstream_.requests(), 2);
}

// A lookup that finds nothing says where it looked: the scope (16 hex digits of the scope id)
// and the key_hash the access log shows for this key in that scope. The bare token (without
// "Bearer ") names another scope, and the answer shows it.
TEST_F(RecordApiTest, ALookupThatFindsNothingNamesItsScopeAndKeyHash) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  StartWithAdmin(kToken);
  ASSERT_EQ(Post("r-miss", "{}").status, 201);
  std::string log = AccessLogWhen(
      [](const std::string& text) { return text.find("key_hash") != std::string::npos; });
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"re("key_hash":"([0-9a-f]{16})")re"))) << log;
  const std::string logged = m[1].str();

  static const std::regex kMiss(
      R"re(^\{"error":"not_found","detail":"No live record for this key in scope ([0-9a-f]{16}) )re"
      R"re(\(key_hash ([0-9a-f]{16}) in the access log\)\. .*whole credential header value)re"
      R"re((?:[^"\\]|\\.)*","scope":"([0-9a-f]{16})","key_hash":"([0-9a-f]{16})"\}$)re");
  HeaderList bare = {{"Authorization", std::string("Bearer ") + kToken},
                     {"X-Idemgate-Credential", "merchant-demo"}};  // the scheme left out
  HttpResponse wrong = Records("GET", "key=r-miss", bare);
  ASSERT_EQ(wrong.status, 404) << wrong.raw;
  std::string body = wrong.body.substr(0, wrong.body.find_last_not_of('\n') + 1);
  ASSERT_TRUE(std::regex_match(body, m, kMiss)) << body;
  EXPECT_EQ(m[1].str(), m[3].str());
  EXPECT_EQ(m[2].str(), m[4].str());
  EXPECT_NE(m[4].str(), logged);  // not the scope the request was stored under
  const std::string wrong_scope = m[3].str();

  // With the whole header value the record is found; once deleted, the miss names the logged
  // key_hash.
  ASSERT_EQ(Records("GET", "key=r-miss", Auth(kToken)).status, 200);
  ASSERT_EQ(Records("DELETE", "key=r-miss", Auth(kToken)).status, 200);
  HttpResponse gone = Records("GET", "key=r-miss", Auth(kToken));
  ASSERT_EQ(gone.status, 404) << gone.raw;
  body = gone.body.substr(0, gone.body.find_last_not_of('\n') + 1);
  ASSERT_TRUE(std::regex_match(body, m, kMiss)) << body;
  EXPECT_EQ(m[4].str(), logged);
  EXPECT_NE(m[3].str(), wrong_scope);
}

}  // namespace
}  // namespace idemgate::test

// SPDX-License-Identifier: Apache-2.0
// Encryption at rest on PostgreSQL (SPEC §13 E6): a marker the upstream puts in a body and a
// header is not in a pg_dump of the database with encryption on, and is with it off; a sealed
// row's bytes copied onto another key's row (SQL, as someone with database access would) answer
// 503, not the other caller's answer.
#include <sys/stat.h>

#include <cstdio>

#include "tests/integration/pg_fixture.h"

namespace idemgate::test {
namespace {

// No 4 bytes repeat inside it: a compressed table of the control still holds it literally.
constexpr char kMarker[] = "MARKER-4929381373652047";

class PgEncryptionTest : public PgGatewaysTest {
 protected:
  void SetUp() override {
    PgGatewaysTest::SetUp();
    upstream_.SetBehavior(UpstreamBehavior::Respond(
        201, std::string(R"({"id":"pi_1","card":")") + kMarker + "\"}",
        {{"Content-Type", "application/json"}, {"X-Card-Echo", kMarker}}));
    Set("scope", "secret_file", "\"" + Private("scope.secret", std::string(40, 's')) + "\"");
  }
  std::string Private(const std::string& name, const std::string& text) {
    const std::string path = dir_.WriteFile(name, text);
    chmod(path.c_str(), 0600);
    return path;
  }
  void Encrypt() {
    const std::string key = Private("k1.key", std::string(64, '1') + "\n");
    Set("store.encryption", "active", "\"k1\"");
    Set("store.encryption", "keys", "{ \"k1\" = \"" + key + "\" }");
  }
  // pg_dump of the whole database, as text.
  std::string Dump() {
    const std::string command =
        PgCluster::BinDir() + "/pg_dump --data-only -d '" + pg_.Dsn(0) + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr) << command;
    std::string out;
    char buf[4096];
    while (pipe != nullptr && fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
    if (pipe != nullptr) {
      EXPECT_EQ(pclose(pipe), 0) << out;
    }
    EXPECT_NE(out.find("idemgate_records"), std::string::npos) << out;
    return out;
  }
  // The stored answers with `n` keys; a replay of one of them gives the answer.
  void Store(int n) {
    StartGateway(0);
    for (int i = 0; i < n; ++i) ASSERT_EQ(Post(0, "m-" + std::to_string(i), "{}").status, 201);
    HttpResponse replay = Post(0, "m-1", "{}");
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true") << replay.raw;
    EXPECT_EQ(replay.Header("X-Card-Echo"), kMarker) << replay.raw;
    EXPECT_NE(replay.body.find(kMarker), std::string::npos) << replay.body;
  }
};

// pg_dump writes bytea as hex: the marker is looked for both as text and as hex digits.
std::string Hex(std::string_view text) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

TEST_F(PgEncryptionTest, TheAnswerIsNotInADumpOfTheDatabase) {
  Encrypt();
  Store(10);
  const std::string dump = Dump();
  EXPECT_EQ(dump.find(kMarker), std::string::npos);
  EXPECT_EQ(dump.find(Hex(kMarker)), std::string::npos);
  EXPECT_EQ(upstream_.requests(), 10);
}

TEST_F(PgEncryptionTest, WithEncryptionOffTheAnswerIsInADumpOfTheDatabase) {
  Store(10);
  EXPECT_NE(Dump().find(Hex(kMarker)), std::string::npos);
}

TEST_F(PgEncryptionTest, ASealedRowCopiedOntoAnotherKeyAnswers503) {
  Encrypt();
  Store(2);
  std::string error;
  ASSERT_TRUE(pg_.Exec(0,
                       "UPDATE idemgate_records SET resp_body = (SELECT resp_body FROM "
                       "idemgate_records WHERE idem_key = 'm-0'::bytea) WHERE idem_key = "
                       "'m-1'::bytea RETURNING 1",
                       nullptr, &error))
      << error;
  HttpResponse copied = Post(0, "m-1", "{}");
  EXPECT_EQ(copied.status, 503) << copied.raw;
  EXPECT_EQ(ErrorCodeOf(copied), "store_unavailable") << copied.body;
  EXPECT_EQ(copied.body.find(kMarker), std::string::npos) << copied.body;
  EXPECT_EQ(Post(0, "m-0", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);
}

}  // namespace
}  // namespace idemgate::test

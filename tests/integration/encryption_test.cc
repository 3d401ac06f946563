// SPDX-License-Identifier: Apache-2.0
// Encryption at rest through the real binary (SPEC §13): a marker the upstream puts in a body
// and a header is in no file of store.path nor of a backup with encryption on, and in both with
// it off; key files refused; a key taken away (SIGHUP) answers 503 naming it without executing
// again, and replays once it is back; clear records from before replay; the keyed fingerprint.
#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

// No 4 bytes repeat inside it: a compressed table of the control still holds it literally.
constexpr char kMarker[] = "MARKER-4929381373652047";
constexpr char kToken[] = "admin-secret";

int CountOf(const std::string& text, std::string_view needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The files under `dir` whose bytes hold `needle`, and how many files there were.
std::vector<std::string> FilesHolding(const std::string& dir, std::string_view needle, int* files) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    ++*files;
    if (bytes.str().find(needle) != std::string::npos) found.push_back(e.path().string());
  }
  return found;
}

class EncryptionTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    upstream_.SetBehavior(UpstreamBehavior::Respond(
        201, std::string(R"({"id":"pi_1","card":")") + kMarker + "\"}",
        {{"Content-Type", "application/json"}, {"X-Card-Echo", kMarker}}));
    Set("scope", "secret_file", "\"" + Key("scope.secret", std::string(40, 's')) + "\"");
    k1_ = Key("k1.key", std::string(64, '1') + "\n");
    k2_ = Key("k2.key", std::string(64, '2') + "\n");
  }

  std::string Key(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_.WriteFile(name, text);
    chmod(path.c_str(), mode);
    return path;
  }

  // [store.encryption] with `keys` (id = path) and `active`.
  void Encrypt(const std::string& active, const std::map<std::string, std::string>& keys) {
    std::string table = "{";
    for (const auto& [id, path] : keys) {
      table += (table.size() > 1 ? ", " : " ") + ("\"" + id + "\" = \"" + path + "\"");
    }
    Set("store.encryption", "active", "\"" + active + "\"");
    Set("store.encryption", "keys", table + (table.size() > 1 ? " }" : "}"));
  }

  void Reload() {
    const int before = CountOf(gateway_.log(), "reload");
    dir_.WriteFile("idemgate.toml", ConfigText());
    ASSERT_TRUE(gateway_.Kill(SIGHUP));
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (CountOf(gateway_.log(), "reload") <= before) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << gateway_.log();
      std::this_thread::sleep_for(10ms);
    }
  }

  void ExpectTheAnswer(const HttpResponse& r, bool replayed) {
    EXPECT_EQ(r.status, 201) << r.raw;
    EXPECT_EQ(r.Header("X-Card-Echo"), kMarker) << r.raw;
    EXPECT_NE(r.body.find(kMarker), std::string::npos) << r.body;
    EXPECT_EQ(r.Header("Idempotent-Replayed").value_or(""), replayed ? "true" : "") << r.raw;
  }

  // Answers stored, replayed, a backup written, the gateway killed and started again (its log
  // replayed into a table); then which files of the store and of the backup hold the marker.
  void StoreBackupRestart(std::vector<std::string>* store_hits,
                          std::vector<std::string>* backup_hits) {
    Set("admin", "token", std::string("\"") + kToken + "\"");
    Set("admin", "backup_dir", "\"" + dir_.Path("backups") + "\"");
    StartWithAdmin();
    for (int i = 0; i < 20; ++i) ExpectTheAnswer(Post("m-" + std::to_string(i), "{}"), false);
    ExpectTheAnswer(Post("m-3", "{}"), true);
    int files = 0;
    *store_hits = FilesHolding(dir_.Path("data"), kMarker, &files);  // the write-ahead log
    TestClient admin(admin_port_);
    HttpResponse backup = admin.Request(
        "POST", "/backup", {{"Authorization", std::string("Bearer ") + kToken}}, "", 30s);
    ASSERT_EQ(backup.status, 200) << backup.raw;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(backup.body, m, std::regex(R"re("backup":"([^"]+)")re")));
    checkpoint_ = m[1].str();
    RestartGateway();
    admin_port_ = gateway_.WaitForPort("admin listening on ");
    ExpectTheAnswer(Post("m-5", "{}"), true);
    for (const std::string& f : FilesHolding(dir_.Path("data"), kMarker, &files)) {
      store_hits->push_back(f);
    }
    *backup_hits = FilesHolding(dir_.Path("backups"), kMarker, &files);
    EXPECT_GT(files, 10);
    EXPECT_EQ(upstream_.requests(), 20);
  }

  std::string k1_, k2_;
  std::string checkpoint_;  // the backup StoreBackupRestart wrote
};

TEST_F(EncryptionTest, TheAnswerIsInNoFileOfTheStoreNorOfABackup) {
  Encrypt("k1", {{"k1", k1_}});
  std::vector<std::string> store_hits, backup_hits;
  StoreBackupRestart(&store_hits, &backup_hits);
  EXPECT_TRUE(store_hits.empty()) << store_hits.front();
  EXPECT_TRUE(backup_hits.empty()) << backup_hits.front();
  bool table = false;  // the restart replayed the log into a table: it was checked too
  for (const auto& e : std::filesystem::directory_iterator(dir_.Path("data"))) {
    table = table || e.path().extension() == ".sst";
  }
  EXPECT_TRUE(table);
  EXPECT_EQ(Metric("idemgate_store_key_active{key=\"k1\"}"), 1);
  EXPECT_GE(Metric("idemgate_store_key_opens_total{key=\"k1\"}"), 1);
}

// A backup restored into a new store.path replays with the key listed, and without it answers
// 503 naming it: the backup holds the sealed bytes, not the answers.
TEST_F(EncryptionTest, ARestoredBackupReplaysWithItsKeyAndRefusesWithoutIt) {
  Encrypt("k1", {{"k1", k1_}});
  std::vector<std::string> store_hits, backup_hits;
  StoreBackupRestart(&store_hits, &backup_hits);
  gateway_.Kill(SIGKILL);
  gateway_.Wait();
  Set("store", "path", "\"" + dir_.Path("restored") + "\"");
  const std::string config = dir_.WriteFile("idemgate.toml", ConfigText());
  RunResult restore = RunGateway({"--restore", checkpoint_, "--config", config});
  ASSERT_EQ(restore.code, 0) << restore.output;
  StartGateway();
  ExpectTheAnswer(Post("m-7", "{}"), true);
  gateway_.Kill(SIGKILL);
  gateway_.Wait();
  Encrypt("k2", {{"k2", k2_}});
  StartGateway();
  HttpResponse refused = Post("m-8", "{}");
  EXPECT_EQ(refused.status, 503) << refused.raw;
  EXPECT_NE(refused.body.find("\\\"k1\\\""), std::string::npos) << refused.body;
  EXPECT_EQ(upstream_.requests(), 20);
}

// The control: the same run with encryption off finds the marker in both.
TEST_F(EncryptionTest, WithEncryptionOffTheAnswerIsInTheStoreAndTheBackup) {
  std::vector<std::string> store_hits, backup_hits;
  StoreBackupRestart(&store_hits, &backup_hits);
  EXPECT_FALSE(store_hits.empty());
  EXPECT_FALSE(backup_hits.empty());
}

TEST_F(EncryptionTest, KeyFilesOthersCanReadOrThatAreNotKeysAreRefusedByName) {
  const std::string open_key = Key("open.key", std::string(64, '3'), 0644);
  Encrypt("k1", {{"k1", k1_}, {"open", open_key}});
  const std::string config = dir_.WriteFile("idemgate.toml", ConfigText());
  RunResult check = RunGateway({"--check-config", "--config", config});
  EXPECT_EQ(check.code, 1) << check.output;
  EXPECT_NE(check.output.find(open_key), std::string::npos) << check.output;
  EXPECT_NE(check.output.find("mode 0644"), std::string::npos) << check.output;
  RunResult start = RunGateway({"--config", config});
  EXPECT_EQ(start.code, 1) << start.output;
  EXPECT_NE(start.output.find(open_key), std::string::npos) << start.output;

  Encrypt("k2", {{"k1", k1_}, {"k2", k2_}});
  RunResult ok =
      RunGateway({"--check-config", "--config", dir_.WriteFile("idemgate.toml", ConfigText())});
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("key \"k2\" (" + k2_ + "): ok, seals new records"), std::string::npos)
      << ok.output;
  EXPECT_NE(ok.output.find("key \"k1\" (" + k1_ + "): ok, opens only"), std::string::npos)
      << ok.output;

  Set("scope", "secret_file", "\"\"");  // the fingerprint key is derived from it
  RunResult no_secret =
      RunGateway({"--check-config", "--config", dir_.WriteFile("idemgate.toml", ConfigText())});
  EXPECT_EQ(no_secret.code, 1) << no_secret.output;
  EXPECT_NE(no_secret.output.find("needs scope.secret_file"), std::string::npos)
      << no_secret.output;
}

// E5: k1 taken away by a reload: its record answers 503 naming it, nothing is executed again;
// other keys still serve; with k1 back the record replays. E6: rotation to k2 on the way.
TEST_F(EncryptionTest, AKeyTakenAwayAnswers503NamingItAndTheRecordReplaysOnceItIsBack) {
  Encrypt("k1", {{"k1", k1_}});
  StartWithAdmin();
  ExpectTheAnswer(Post("a", "{}"), false);
  Encrypt("k2", {{"k1", k1_}, {"k2", k2_}});  // rotation: k2 seals, k1 still opens
  Reload();
  ExpectTheAnswer(Post("b", "{}"), false);
  ExpectTheAnswer(Post("a", "{}"), true);
  Encrypt("k2", {{"k2", k2_}});  // k1 retired
  Reload();
  // The replay cache holds what it opened; a restart empties it, as a new process would be.
  RestartGateway();
  admin_port_ = gateway_.WaitForPort("admin listening on ");
  HttpResponse refused = Post("a", "{}");
  EXPECT_EQ(refused.status, 503) << refused.raw;
  EXPECT_EQ(ErrorCodeOf(refused), "store_unavailable") << refused.body;
  EXPECT_NE(refused.body.find("\\\"k1\\\""), std::string::npos) << refused.body;
  EXPECT_EQ(refused.body.find(kMarker), std::string::npos) << refused.body;
  EXPECT_TRUE(gateway_.WaitForOutput("ERROR store: a stored answer is sealed with key \"k1\""))
      << gateway_.log();
  EXPECT_EQ(Metric("idemgate_store_key_open_failures_total{key=\"k1\"}"), 1);
  ExpectTheAnswer(Post("b", "{}"), true);
  EXPECT_EQ(upstream_.requests(), 2);
  Encrypt("k2", {{"k1", k1_}, {"k2", k2_}});
  Reload();
  ExpectTheAnswer(Post("a", "{}"), true);
  EXPECT_EQ(upstream_.requests(), 2);
  // A key file refused on reload (here: made readable by others) fails the whole reload; the
  // running keys stay.
  chmod(k1_.c_str(), 0644);
  Reload();
  EXPECT_NE(gateway_.log().find("keeping the running config and keys: key file \"" + k1_ +
                                "\": mode 0644"),
            std::string::npos)
      << gateway_.log();
  ExpectTheAnswer(Post("c", "{}"), false);
  EXPECT_EQ(Metric("idemgate_store_key_seals_total{key=\"k2\"}"), 1);  // c, since the restart
}

// E3, E6: records stored before encryption was turned on replay, and a different request on
// their key is still refused; new records get the keyed fingerprint (the 422 shows its prefix).
TEST_F(EncryptionTest, TurnedOnOverClearRecordsTheyReplayAndKeepTheirFingerprints) {
  StartGateway();
  ExpectTheAnswer(Post("before", R"({"n":1})"), false);
  gateway_.Kill(SIGTERM);
  gateway_.Wait();
  Encrypt("k1", {{"k1", k1_}});
  StartGateway();
  ExpectTheAnswer(Post("before", R"({"n":1})"), true);
  HttpResponse other = Post("before", R"({"n":2})");
  EXPECT_EQ(other.status, 422) << other.raw;
  EXPECT_NE(other.body.find(ExpectedFingerprintPrefix("POST", "/v1/payment_intents", R"({"n":1})")),
            std::string::npos)
      << other.body;  // the stored, plain one
  ExpectTheAnswer(Post("after", R"({"n":1})"), false);
  HttpResponse reused = Post("after", R"({"n":2})");
  EXPECT_EQ(reused.status, 422) << reused.raw;
  // Keyed: neither the plain digest of the first request nor of the second.
  EXPECT_EQ(
      reused.body.find(ExpectedFingerprintPrefix("POST", "/v1/payment_intents", R"({"n":1})")),
      std::string::npos)
      << reused.body;
  ExpectTheAnswer(Post("after", R"({"n":1})"), true);
  EXPECT_EQ(upstream_.requests(), 2);
}

// E3 from the replay cache: its replays compare the request without an HMAC, and still replay
// only the same request. A different one on a cached key gets 422 showing keyed fingerprints.
TEST_F(EncryptionTest, ReplaysFromMemoryTellRequestsApartAsTheStoreDoes) {
  Encrypt("k1", {{"k1", k1_}});
  StartGateway();
  ExpectTheAnswer(Post("cached", R"({"n":1})"), false);
  for (int i = 0; i < 3; ++i) ExpectTheAnswer(Post("cached", R"({"n":1})"), true);  // cached
  HttpResponse other = Post("cached", R"({"n":2})");
  EXPECT_EQ(other.status, 422) << other.raw;
  for (const char* body : {R"({"n":1})", R"({"n":2})"}) {
    EXPECT_EQ(other.body.find(ExpectedFingerprintPrefix("POST", "/v1/payment_intents", body)),
              std::string::npos)
        << other.body;  // neither plain digest: the stored one and the request's are keyed
  }
  ExpectTheAnswer(Post("cached", R"({"n":1})"), true);
  EXPECT_EQ(upstream_.requests(), 1);
}

}  // namespace
}  // namespace idemgate::test

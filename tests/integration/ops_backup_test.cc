// Backup and restore through the real binary: POST /backup on the admin port writes a RocksDB
// checkpoint while the gateway serves; after a kill -9, `idemgate --restore` copies it into a new
// store directory, and every key completed before the backup replays its bytes from there.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "admin-secret";

class BackupTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    ASSERT_TRUE(demo_.Start());
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(demo_.port()) + "\"");
    Set("admin", "address", "\"127.0.0.1:0\"");
    Set("admin", "token", std::string("\"") + kToken + "\"");
    Set("admin", "backup_dir", "\"" + dir_.Path("backups") + "\"");
  }

  HttpResponse Admin(std::string_view method, const HeaderList& headers) {
    TestClient client(admin_port_);
    return client.Request(method, "/backup", headers, "", 30s);
  }

  static HeaderList Auth() { return {{"Authorization", std::string("Bearer ") + kToken}}; }

  DemoApi demo_;
};

std::string Body(int i) { return "{\"amount\":\"" + std::to_string(100 + i) + "\"}"; }

TEST_F(BackupTest, BackupWhileServingThenKillRestoreAndEveryKeyReplays) {
  StartWithAdmin();
  constexpr int kKeys = 40;
  std::vector<HttpResponse> first(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    first[i] = Post("bk-" + std::to_string(i), Body(i));
    ASSERT_EQ(first[i].status, 201) << first[i].raw;
  }

  // Load while the checkpoint is written: new keys (writes) and replays.
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::thread load([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (Post("load-" + std::to_string(i), Body(i)).status == 201) ++answered;
      if (Post("bk-" + std::to_string(i % kKeys), Body(i % kKeys)).status == 201) ++answered;
    }
  });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (answered.load() < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const int before_backup = answered.load();
  HttpResponse backup = Admin("POST", Auth());
  stop = true;
  load.join();
  ASSERT_EQ(backup.status, 200) << backup.raw << "\n" << gateway_.log();
  EXPECT_GE(before_backup, 10);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(backup.body, m, std::regex(R"re("backup":"([^"]+)")re")))
      << backup.body;
  const std::string checkpoint = m[1].str();
  EXPECT_EQ(checkpoint.rfind(dir_.Path("backups") + "/idemgate-", 0), 0u) << checkpoint;
  EXPECT_TRUE(gateway_.WaitForOutput("INFO admin: backup: client=127.0.0.1 path=" + checkpoint +
                                     " result=written"))
      << gateway_.log();
  EXPECT_EQ(gateway_.log().find("WARN store"), std::string::npos) << gateway_.log();
  std::string metrics = Scrape();
  EXPECT_EQ(MetricValue(metrics, "idemgate_backups_total{result=\"written\"}"), 1) << metrics;
  EXPECT_EQ(MetricValue(metrics, "idemgate_backups_total{result=\"failed\"}"), 0);
  EXPECT_TRUE(std::regex_search(
      metrics, std::regex("\nidemgate_backup_last_written_timestamp_seconds [1-9][0-9]{9}\n")))
      << metrics;

  gateway_.Kill(SIGKILL);
  gateway_.Wait();

  // Restore into a new directory; the old store stays as the crash left it.
  Set("store", "path", "\"" + dir_.Path("restored") + "\"");
  std::string config = dir_.WriteFile("restore.toml", ConfigText());
  RunResult restored = RunGateway({"--restore", checkpoint, "--config", config});
  ASSERT_EQ(restored.code, 0) << restored.output;
  EXPECT_NE(restored.output.find("restored " + checkpoint), std::string::npos) << restored.output;
  struct stat st {};
  ASSERT_EQ(stat(dir_.Path("restored").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& entry : std::filesystem::directory_iterator(dir_.Path("restored"))) {
    ASSERT_EQ(stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_nlink, 1u) << entry.path() << ": shares its data with the backup";
  }
  // Never over a store: a second restore into the same (now non-empty) directory is refused.
  RunResult again = RunGateway({"--restore", checkpoint, "--config", config});
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_NE(again.output.find("is not empty"), std::string::npos) << again.output;

  StartWithAdmin();
  const int64_t executions = demo_.executions();
  for (int i = 0; i < kKeys; ++i) {
    HttpResponse r = Post("bk-" + std::to_string(i), Body(i));
    ASSERT_EQ(r.status, 201) << i << " " << r.raw;
    EXPECT_EQ(r.Header("Idempotent-Replayed"), "true") << i;
    EXPECT_EQ(r.body, first[i].body) << i;
    EXPECT_EQ(WithoutReplayedHeader(r.raw), WithoutRequestId(first[i].raw)) << i;
  }
  EXPECT_EQ(demo_.executions(), executions);  // nothing executed again
}

// Backups run one at a time off the admin loop: two asked at once are both written, each into
// its own directory (the second waits its turn; /healthz is asked while it may still run).
TEST_F(BackupTest, TwoAtOnceAreBothWritten) {
  StartWithAdmin();
  ASSERT_EQ(Post("two-0", Body(0)).status, 201);
  HttpResponse results[2];
  std::thread other([&] { results[1] = Admin("POST", Auth()); });
  results[0] = Admin("POST", Auth());
  EXPECT_EQ(TestClient(admin_port_).Request("GET", "/healthz").status, 200);
  other.join();
  std::set<std::string> dirs;
  for (const HttpResponse& r : results) {
    ASSERT_EQ(r.status, 200) << r.raw << "\n" << gateway_.log();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.body, m, std::regex(R"re("backup":"([^"]+)")re"))) << r.body;
    EXPECT_TRUE(std::filesystem::exists(m[1].str() + "/CURRENT")) << m[1].str();
    dirs.insert(m[1].str());
  }
  EXPECT_EQ(dirs.size(), 2u);
  HttpResponse metrics = TestClient(admin_port_).Request("GET", "/metrics");
  EXPECT_NE(metrics.body.find("\nidemgate_backups_total{result=\"written\"} 2\n"),
            std::string::npos)
      << metrics.body;
}

TEST_F(BackupTest, NeedsTheTokenAndPost) {
  StartWithAdmin();
  HttpResponse none = Admin("POST", {});
  EXPECT_EQ(none.status, 401) << none.raw;
  HttpResponse wrong = Admin("POST", {{"Authorization", "Bearer nope"}});
  EXPECT_EQ(wrong.status, 401) << wrong.raw;
  HttpResponse get = Admin("GET", Auth());
  EXPECT_EQ(get.status, 405) << get.raw;
  EXPECT_EQ(get.Header("Allow"), "POST");
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("backups")));
}

TEST_F(BackupTest, AFailedBackupIsAnErrorAndCounted) {
  dir_.WriteFile("not-a-dir", "x");  // backup_dir below a file: it cannot be created
  Set("admin", "backup_dir", "\"" + dir_.Path("not-a-dir") + "/backups\"");
  StartWithAdmin();
  HttpResponse r = Admin("POST", Auth());
  EXPECT_EQ(r.status, 500) << r.raw;
  EXPECT_NE(r.body.find("\"error\":\"backup_failed\""), std::string::npos) << r.body;
  EXPECT_TRUE(gateway_.WaitForOutput("ERROR admin: backup: client=127.0.0.1")) << gateway_.log();
  std::string metrics = Scrape();
  EXPECT_EQ(MetricValue(metrics, "idemgate_backups_total{result=\"failed\"}"), 1) << metrics;
  EXPECT_EQ(MetricValue(metrics, "idemgate_backup_last_written_timestamp_seconds"), 0);
}

TEST_F(BackupTest, OffWithoutABackupDir) {
  Set("admin", "backup_dir", "\"\"");
  StartWithAdmin();
  HttpResponse r = Admin("POST", Auth());
  EXPECT_EQ(r.status, 404) << r.raw;
  EXPECT_NE(r.body.find("backup_dir"), std::string::npos) << r.body;
}

TEST_F(BackupTest, RestoreRefusesADirectoryThatIsNoCheckpoint) {
  Set("store", "path", "\"" + dir_.Path("restored") + "\"");
  std::string config = dir_.WriteFile("restore.toml", ConfigText());
  dir_.WriteFile("not-a-backup/readme", "x");
  RunResult r = RunGateway({"--restore", dir_.Path("not-a-backup"), "--config", config});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("is not a store checkpoint"), std::string::npos) << r.output;
}

// A backup is written as NAME.partial and renamed once complete: what a crash left under the
// .partial name is not restored, and nothing is copied into store.path.
TEST_F(BackupTest, RestoreRefusesAnUnfinishedPartialBackup) {
  Set("store", "path", "\"" + dir_.Path("restored") + "\"");
  std::string config = dir_.WriteFile("restore.toml", ConfigText());
  dir_.WriteFile("backup-1.partial/CURRENT", "MANIFEST-000001\n");
  for (const std::string& from : {dir_.Path("backup-1.partial"), dir_.Path("backup-1.partial/")}) {
    RunResult r = RunGateway({"--restore", from, "--config", config});
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("unfinished backup"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("restored")));
}

}  // namespace
}  // namespace idemgate::test

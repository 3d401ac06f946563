// SPDX-License-Identifier: Apache-2.0
// Through the real binary: the files the gateway creates are private whatever the umask it is
// started with: the store directory 0700 and its files 0600 (stored responses are payment data),
// the access log 0640.
#include <sys/stat.h>

#include <filesystem>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

namespace fs = std::filesystem;

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

class OpsFilesTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    old_umask_ = umask(022);  // the child inherits it: the common default, not a private one
  }
  void TearDown() override { umask(old_umask_); }

  // Starts, stores one response, stops cleanly (every store file written and closed).
  void RunOnce() {
    StartGateway();
    EXPECT_EQ(Post("files-1", "{}").status, 201);
    gateway_.Kill(SIGTERM);
    std::optional<ExitStatus> status = gateway_.Wait();
    ASSERT_TRUE(status && status->exited() && status->code() == 0) << gateway_.log();
  }

  mode_t old_umask_ = 0;
};

TEST_F(OpsFilesTest, StoreIsPrivateAndAccessLogGroupReadable) {
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  RunOnce();
  EXPECT_EQ(ModeOf(dir_.Path("data")), 0700u);
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir_.Path("data"))) {
    unsigned mode = ModeOf(entry.path());
    EXPECT_EQ(mode & 077, 0u) << entry.path() << " is " << std::oct << mode;
    ++files;
  }
  EXPECT_GT(files, 3);  // CURRENT, MANIFEST, the WAL, OPTIONS, LOCK...
  EXPECT_EQ(ModeOf(dir_.Path("access.log")), 0640u);
}

TEST_F(OpsFilesTest, ExistingStoreDirectoryAndLogAreTightened) {
  fs::create_directories(dir_.Path("data"));
  fs::permissions(dir_.Path("data"), fs::perms(0755));
  dir_.WriteFile("access.log", "");
  fs::permissions(dir_.Path("access.log"), fs::perms(0666));
  Set("log", "access", "\"" + dir_.Path("access.log") + "\"");
  RunOnce();
  EXPECT_EQ(ModeOf(dir_.Path("data")), 0700u);
  EXPECT_EQ(ModeOf(dir_.Path("access.log")), 0640u);
}

}  // namespace
}  // namespace idemgate::test

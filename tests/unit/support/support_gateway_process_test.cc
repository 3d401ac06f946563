// GatewayProcess and TempDir, driven with small shell scripts as the child program.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/gateway_process.h"
#include "tests/support/temp_dir.h"

namespace idemgate::test {
namespace {

using std::chrono::milliseconds;

// A script that prints its lines, then waits for a signal (TERM exits 0).
std::string WriteScript(const TempDir& dir, const std::string& body) {
  std::string path = dir.WriteFile("child.sh", "#!/bin/sh\n" + body);
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

TEST(TempDir, WritesReadsAndRemovesItself) {
  std::string root;
  {
    TempDir dir;
    root = dir.path();
    std::string cfg = dir.WriteFile("conf/idemgate.toml", "[listen]\naddress = \"127.0.0.1:0\"\n");
    EXPECT_EQ(cfg, root + "/conf/idemgate.toml");
    EXPECT_EQ(dir.ReadFile("conf/idemgate.toml"), "[listen]\naddress = \"127.0.0.1:0\"\n");
    EXPECT_EQ(dir.Path("data"), root + "/data");
    EXPECT_TRUE(std::filesystem::is_directory(root));
  }
  EXPECT_FALSE(std::filesystem::exists(root));
}

TEST(GatewayProcess, FindsEachListeningPortByPrefixAndCapturesStderr) {
  TempDir dir;
  std::string script = WriteScript(
      dir,
      "trap 'echo bye; exit 0' TERM\n"  // before the port lines: the test signals after them
      "echo 'starting' >&2\n"
      "echo 'admin listening on 127.0.0.1:9901'\n"
      "echo 'listening on 0.0.0.0:18080'\n"
      "while true; do sleep 1 & wait $!; done\n");
  GatewayProcess proc;
  ASSERT_TRUE(proc.Start(script, {}));
  EXPECT_EQ(proc.WaitForPort(), 18080) << proc.log();
  EXPECT_EQ(proc.WaitForPort("admin listening on "), 9901) << proc.log();
  EXPECT_NE(proc.log().find("starting\n"), std::string::npos);
  EXPECT_TRUE(proc.running());
  ASSERT_TRUE(proc.Kill(SIGTERM));
  std::optional<ExitStatus> st = proc.Wait();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited());
  EXPECT_EQ(st->code(), 0) << st->ToString();
  EXPECT_TRUE(proc.log().ends_with("bye\n")) << proc.log();
  EXPECT_FALSE(proc.running());
}

TEST(GatewayProcess, SigkillIsReportedAsASignal) {
  TempDir dir;
  GatewayProcess proc;
  ASSERT_TRUE(proc.Start(WriteScript(dir, "echo 'listening on [::1]:4444'\nexec sleep 600\n"), {}));
  EXPECT_EQ(proc.WaitForPort(), 4444);
  EXPECT_EQ(proc.Wait(milliseconds(20)), std::nullopt);  // still running
  ASSERT_TRUE(proc.Kill(SIGKILL));
  std::optional<ExitStatus> st = proc.Wait();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->signaled());
  EXPECT_EQ(st->signal(), SIGKILL);
  EXPECT_FALSE(proc.Kill(SIGTERM));  // reaped: nothing to signal
}

TEST(GatewayProcess, PassesArgumentsAndEnvironment) {
  TempDir dir;
  GatewayProcess proc;
  ASSERT_TRUE(proc.Start(WriteScript(dir, "echo \"args=$1,$2 env=$IDEMGATE_X\"\nexit 3\n"),
                         {"--config", "a b"}, {"IDEMGATE_X=42"}));
  std::optional<ExitStatus> st = proc.Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->code(), 3);
  EXPECT_EQ(proc.log(), "args=--config,a b env=42\n");
}

TEST(GatewayProcess, ExitingWithoutAPortYieldsZeroQuickly) {
  TempDir dir;
  GatewayProcess proc;
  ASSERT_TRUE(proc.Start(WriteScript(dir, "echo 'config error: bad key' >&2\nexit 1\n"), {}));
  EXPECT_EQ(proc.WaitForPort("listening on ", std::chrono::seconds(60)), 0);
  EXPECT_EQ(proc.Wait()->code(), 1);
  EXPECT_TRUE(proc.WaitForOutput("bad key"));
}

TEST(GatewayProcess, ExecFailureIsAnError) {
  GatewayProcess proc;
  EXPECT_FALSE(proc.Start("/nonexistent/idemgate", {}));
  EXPECT_NE(proc.error().find("No such file"), std::string::npos) << proc.error();
  EXPECT_FALSE(proc.running());
}

TEST(GatewayProcess, DestructorKillsAndReaps) {
  TempDir dir;
  pid_t pid;
  {
    GatewayProcess proc;
    ASSERT_TRUE(proc.Start(WriteScript(dir, "exec sleep 600\n"), {}));
    pid = proc.pid();
  }
  EXPECT_NE(kill(pid, 0), 0);  // gone (and reaped, so not a zombie we could still signal)
}

}  // namespace
}  // namespace idemgate::test

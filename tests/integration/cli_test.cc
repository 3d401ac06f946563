// SPDX-License-Identifier: Apache-2.0
// Through the real binary: --check-config, --version, --help, and refusing bad configurations.
#include <gtest/gtest.h>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/temp_dir.h"

namespace idemgate::test {
namespace {

TEST(Cli, VersionAndHelp) {
  RunResult version = RunGateway({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_NE(version.output.find("idemgate "), std::string::npos);
  RunResult help = RunGateway({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.output.find("--check-config"), std::string::npos);
  EXPECT_NE(RunGateway({"--bogus"}).code, 0);
  EXPECT_NE(RunGateway({}).code, 0);  // --config is required
}

TEST(Cli, ShippedConfigsPassCheck) {
  for (const char* file : {"/packaging/idemgate.toml", "/packaging/demo.toml"}) {
    RunResult r = RunGateway({"--check-config", "--config", std::string(SOURCE_DIR) + file});
    EXPECT_EQ(r.code, 0) << file << ": " << r.output;
  }
}

struct BadConfig {
  const char* toml;
  const char* must_mention;  // the key the message names
};
void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.must_mention; }

class CheckConfigRefuses : public ::testing::TestWithParam<BadConfig> {};

TEST_P(CheckConfigRefuses, WithFileAndKey) {
  TempDir dir;
  std::string path = dir.WriteFile("bad.toml", GetParam().toml);
  RunResult r = RunGateway({"--check-config", "--config", path});
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("bad.toml"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(GetParam().must_mention), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Spec9AndC4, CheckConfigRefuses,
    ::testing::Values(
        BadConfig{"[listen]\nadress = \"0.0.0.0:1\"\n", "listen.adress"},
        BadConfig{"[nosuch]\nx = 1\n", "nosuch"},
        // SPEC §10: wait <= max_wait <= lease.
        BadConfig{"[idempotency]\nmax_wait = \"5s\"\nwait = \"6s\"\n",
                  "idempotency.wait': (6s) must not be longer than idempotency.max_wait"},
        BadConfig{"[idempotency]\nlease = \"30s\"\nmax_wait = \"31s\"\n",
                  "idempotency.max_wait': (31s) must not be longer than idempotency.lease"},
        BadConfig{"[upstream]\nconnect_timeout = 5\n", "upstream.connect_timeout"},
        BadConfig{"[upstream]\nresponse_timeout = \"fast\"\n", "upstream.response_timeout"},
        BadConfig{"[upstream]\nurl = \"ftp://x\"\n", "upstream.url"},
        BadConfig{"[listen]\naddress = \"nohostport\"\n", "listen.address"},
        BadConfig{"[limits]\nmax_request_body = \"lots\"\n", "limits.max_request_body"},
        BadConfig{"[idempotency]\nmethods = [\"POST\", \"GET\"]\n", "idempotency.methods"},
        BadConfig{"[idempotency]\nlease = \"10s\"\n", "idempotency.lease"},  // C4: < 5s + 20s
        BadConfig{"[idempotency]\nttl = \"20s\"\n", "idempotency.ttl"},      // C4: < lease
        BadConfig{"[scope]\nsecret_file = \"/nonexistent/secret\"\n", "scope.secret_file"},
        BadConfig{"[store]\nsync = \"yes\"\n", "store.sync"},
        BadConfig{"[listen\n", "bad.toml"},
        // Values near INT64_MAX are refused with their bound, not left to overflow.
        BadConfig{"[idempotency]\nttl = \"106751991167d\"\n",
                  "idempotency.ttl': must be at most 365d"},
        BadConfig{"[idempotency]\nlease = \"106751991167d\"\n",
                  "idempotency.lease': must be at most 7d"},
        BadConfig{"[limits]\nmax_request_body = 9223372036854775807\n",
                  "limits.max_request_body': must be at most 1GiB"}));

TEST(Cli, GatewayRefusesToStartWithBadConfig) {
  TempDir dir;
  std::string path = dir.WriteFile("bad.toml", "[idempotency]\nlease = \"1s\"\n");
  RunResult r = RunGateway({"--config", path});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("idempotency.lease"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace idemgate::test

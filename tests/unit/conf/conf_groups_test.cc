// Upstream groups in the configuration: [upstream] with url or servers, the group keys, and the
// named groups [upstreams.NAME] that routes select.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "conf/config.h"

namespace idemgate {
namespace {

Config Parse(const std::string& text) {
  ConfigResult r = ParseConfig(text, "groups.toml");
  EXPECT_TRUE(r.ok()) << r.error;
  return r.ok() ? *r.config : Config{};
}

// The file is refused, with an error that holds `message`.
void ExpectRefused(const std::string& text, const std::string& message) {
  ConfigResult r = ParseConfig(text, "groups.toml");
  EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
  EXPECT_NE(r.error.find(message), std::string::npos) << r.error;
}

TEST(ConfigGroups, UrlAloneIsAGroupOfOne) {
  Config c = Parse("[upstream]\nurl = \"http://api.internal:8000\"\n");
  ASSERT_EQ(c.upstream.addrs.size(), 1u);
  EXPECT_EQ(c.upstream.addrs[0], (HostPort{"api.internal", 8000}));
  EXPECT_EQ(c.upstream.addr, (HostPort{"api.internal", 8000}));
  EXPECT_EQ(c.upstream.balance, "round_robin");
  EXPECT_EQ(c.upstream.resolve_interval_ms, 0);
  EXPECT_TRUE(c.upstream_groups.empty());
}

// The sample file shipped before upstream groups (conf/idemgate.toml at 8cfaf5f) still loads:
// its url is a group of one server, with the new keys at their defaults.
TEST(ConfigGroups, ConfigFromBeforeGroupsStillLoads) {
  const std::string path = std::string(std::filesystem::path(__FILE__).parent_path()) +
                           "/testdata/idemgate-before-groups.toml";
  ConfigResult r = LoadConfig(path);
  ASSERT_TRUE(r.ok()) << r.error;
  const Config::Upstream& up = r.config->upstream;
  EXPECT_EQ(up.addrs, std::vector<HostPort>{(HostPort{"127.0.0.1", 9000})});
  EXPECT_TRUE(up.servers.empty());
  Config::Upstream defaults = Config{}.upstream;
  defaults.addr = up.addr;
  defaults.addrs = up.addrs;
  EXPECT_TRUE(up == defaults);
  EXPECT_TRUE(r.config->upstream_groups.empty());
}

TEST(ConfigGroups, ServersAndTheirKeys) {
  Config c = Parse(
      "[upstream]\nservers = [\"http://a:81\", \"http://b\"]\nbalance = \"least_conn\"\n"
      "health_path = \"/healthz\"\nhealth_interval = \"2s\"\nfail_timeout = \"30s\"\n"
      "resolve_interval = \"1m\"\nhost = \"api.example.com\"\n");
  ASSERT_EQ(c.upstream.addrs.size(), 2u);
  EXPECT_EQ(c.upstream.addrs[0], (HostPort{"a", 81}));
  EXPECT_EQ(c.upstream.addrs[1], (HostPort{"b", 80}));
  EXPECT_EQ(c.upstream.addr, (HostPort{"a", 81}));
  EXPECT_FALSE(c.upstream.tls);
  EXPECT_EQ(c.upstream.balance, "least_conn");
  EXPECT_EQ(c.upstream.health_path, "/healthz");
  EXPECT_EQ(c.upstream.health_interval_ms, 2'000);
  EXPECT_EQ(c.upstream.fail_timeout_ms, 30'000);
  EXPECT_EQ(c.upstream.resolve_interval_ms, 60'000);
  EXPECT_EQ(c.upstream.host, "api.example.com");
  Config off = Parse("[upstream]\nresolve_interval = \"0s\"\n");
  EXPECT_EQ(off.upstream.resolve_interval_ms, 0);
}

TEST(ConfigGroups, BadGroupsAreRefused) {
  ExpectRefused("[upstream]\nurl = \"http://a\"\nservers = [\"http://b\"]\n",
                "groups.toml:3: key 'upstream.servers': set url (one server) or servers");
  ExpectRefused("[upstream]\nservers = [\"http://a\", \"https://b\"]\n", "one scheme");
  ExpectRefused("[upstream]\nservers = [\"http://a\", \"http://a:80\"]\n", "listed more than once");
  ExpectRefused("[upstream]\nservers = [\"http://a/x\"]\n", "bad url");
  ExpectRefused("[upstream]\nbalance = \"random\"\n", "\"round_robin\" or \"least_conn\"");
  ExpectRefused("[upstream]\nhealth_path = \"healthz\"\n", "starting with '/'");
  ExpectRefused("[upstream]\nhost = \"a b\"\n", "upstream.host");
  ExpectRefused("[upstream]\nhealth_interval = \"0s\"\n", "longer than 0");
  ExpectRefused("[upstream]\nservers = [\"http://a\"]\nca_file = \"/etc/passwd\"\n",
                "not https://");
}

TEST(ConfigGroups, NamedGroupsAreFoundByName) {
  Config c = Parse(
      "[upstream]\nurl = \"http://main:8000\"\n"
      "[upstreams.internal]\nservers = [\"http://i1:9000\", \"http://i2:9000\"]\n"
      "connect_timeout = \"1s\"\n"
      "[upstreams.reports-v2]\nurl = \"https://reports\"\n");
  ASSERT_EQ(c.upstream_groups.size(), 2u);
  EXPECT_EQ(c.FindUpstream(""), &c.upstream);
  EXPECT_EQ(c.FindUpstream("default"), &c.upstream);
  const Config::Upstream* internal = c.FindUpstream("internal");
  ASSERT_NE(internal, nullptr);
  EXPECT_EQ(internal->addrs.size(), 2u);
  EXPECT_EQ(internal->connect_timeout_ms, 1'000);
  EXPECT_EQ(internal->response_timeout_ms, Config{}.upstream.response_timeout_ms);
  const Config::Upstream* reports = c.FindUpstream("reports-v2");
  ASSERT_NE(reports, nullptr);
  EXPECT_TRUE(reports->tls);
  EXPECT_EQ(reports->addr, (HostPort{"reports", 443}));
  EXPECT_TRUE(c.HasUpstream("internal"));
  EXPECT_FALSE(c.HasUpstream("missing"));
}

TEST(ConfigGroups, BadNamedGroupsAreRefused) {
  ExpectRefused("[upstreams.internal]\nconnect_timeout = \"1s\"\n",
                "key 'upstreams.internal.servers': a named group needs url or servers");
  ExpectRefused("[upstreams.default]\nurl = \"http://a\"\n", "not \"default\"");
  ExpectRefused("[upstreams.\"a b\"]\nurl = \"http://a\"\n", "group name");
  ExpectRefused("[upstreams.internal]\nurl = \"http://a\"\nurll = \"x\"\n",
                "groups.toml:3: key 'upstreams.internal.urll': unknown key");
  ExpectRefused("[upstreams.internal]\nurl = \"ftp://a\"\n", "upstreams.internal.url");
}

}  // namespace
}  // namespace idemgate

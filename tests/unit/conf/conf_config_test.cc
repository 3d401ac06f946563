// SPDX-License-Identifier: Apache-2.0
// Parsing whole configurations: defaults, the shipped files, and every key of a full file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "conf/config.h"
#include "conf/config_keys.h"

namespace idemgate {
namespace {

namespace fs = std::filesystem;

// The sample configs ship with the package (packaging/).
fs::path SampleDir() {
  return fs::path(__FILE__).parent_path() / ".." / ".." / ".." / "packaging";
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Every field equal to the documented default (config.h and SPEC §9).
void ExpectDefaults(const Config& c) {
  EXPECT_EQ(c.listen.address, "0.0.0.0:8080");
  EXPECT_EQ(c.listen.addr.host, "0.0.0.0");
  EXPECT_EQ(c.listen.addr.port, 8080);
  EXPECT_EQ(c.listen.tls_cert, "");
  EXPECT_EQ(c.listen.tls_key, "");
  EXPECT_TRUE(c.listen.http2);
  EXPECT_EQ(c.upstream.url, "http://127.0.0.1:9000");
  EXPECT_FALSE(c.upstream.tls);
  EXPECT_EQ(c.upstream.addr.host, "127.0.0.1");
  EXPECT_EQ(c.upstream.addr.port, 9000);
  EXPECT_EQ(c.upstream.ca_file, "");
  EXPECT_EQ(c.upstream.connect_timeout_ms, 5'000);
  EXPECT_EQ(c.upstream.response_timeout_ms, 20'000);
  EXPECT_EQ(c.upstream.idle_timeout_ms, 1'000);
  EXPECT_EQ(c.idempotency.header, "Idempotency-Key");
  EXPECT_EQ(c.idempotency.methods, (std::vector<std::string>{"POST", "PATCH"}));
  EXPECT_EQ(c.idempotency.ttl_ms, 86'400'000);
  EXPECT_EQ(c.idempotency.lease_ms, 30'000);
  EXPECT_TRUE(c.idempotency.require_key.empty());
  EXPECT_TRUE(c.idempotency.fingerprint_headers.empty());
  EXPECT_EQ(c.scope.header, "Authorization");
  EXPECT_EQ(c.scope.secret_file, "");
  EXPECT_EQ(c.scope.secret, "");
  EXPECT_EQ(c.store.path, "./data");
  EXPECT_TRUE(c.store.sync);
  EXPECT_EQ(c.limits.max_request_body, 1u << 20);
  EXPECT_EQ(c.limits.max_response_body, 8u << 20);
  EXPECT_EQ(c.limits.max_header_bytes, 64u << 10);
  EXPECT_EQ(c.limits.client_timeout_ms, 10'000);
  EXPECT_EQ(c.limits.idle_timeout_ms, 60'000);
  EXPECT_EQ(c.limits.max_connections, 10'000);
  EXPECT_EQ(c.limits.max_unsent_bytes, 256u << 20);
  EXPECT_EQ(c.limits.http2_max_streams, 100);
  EXPECT_EQ(c.server.workers, 0);
  EXPECT_EQ(c.server.busy_poll_us, 0);
  EXPECT_EQ(c.server.shutdown_grace_ms, 10'000);
  EXPECT_EQ(c.admin.address, "127.0.0.1:9901");
  EXPECT_EQ(c.admin.addr.host, "127.0.0.1");
  EXPECT_EQ(c.admin.addr.port, 9901);
  EXPECT_EQ(c.admin.token, "");
  EXPECT_EQ(c.log.access, "stdout");
}

TEST(ParseConfig, EmptyFileGivesEveryDefault) {
  ConfigResult r = ParseConfig("", "empty.toml");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.error.empty());
  ExpectDefaults(*r.config);
}

TEST(ShippedFiles, IdemgateTomlHoldsEveryDefault) {
  ConfigResult r = LoadConfig((SampleDir() / "idemgate.toml").string());
  ASSERT_TRUE(r.ok()) << r.error;
  ExpectDefaults(*r.config);
}

// Every key appears in packaging/idemgate.toml under its section, a comment line just above it.
TEST(ShippedFiles, IdemgateTomlDocumentsEveryKey) {
  const std::vector<std::string> keys = {"listen.address",
                                         "listen.tls_cert",
                                         "listen.tls_key",
                                         "listen.http2",
                                         "listen.proxy_protocol",
                                         "listen.trusted_proxies",
                                         "upstream.url",
                                         "upstream.servers",
                                         "upstream.ca_file",
                                         "upstream.connect_timeout",
                                         "upstream.response_timeout",
                                         "upstream.idle_timeout",
                                         "upstream.balance",
                                         "upstream.health_path",
                                         "upstream.health_interval",
                                         "upstream.fail_timeout",
                                         "upstream.resolve_interval",
                                         "upstream.host",
                                         "idempotency.header",
                                         "idempotency.methods",
                                         "idempotency.ttl",
                                         "idempotency.lease",
                                         "idempotency.require_key",
                                         "idempotency.fingerprint_headers",
                                         "idempotency.takeover",
                                         "idempotency.wait",
                                         "idempotency.max_wait",
                                         "scope.header",
                                         "scope.secret_file",
                                         "store.backend",
                                         "store.path",
                                         "store.sync",
                                         "store.confirm_timeout",
                                         "store.postgres.dsn",
                                         "store.postgres.connections",
                                         "store.encryption.active",
                                         "store.encryption.keys",
                                         "limits.max_request_body",
                                         "limits.max_response_body",
                                         "limits.max_header_bytes",
                                         "limits.client_timeout",
                                         "limits.idle_timeout",
                                         "limits.max_connections",
                                         "limits.max_unsent_bytes",
                                         "limits.max_waiters",
                                         "limits.http2_max_streams",
                                         "server.workers",
                                         "server.busy_poll",
                                         "server.shutdown_grace",
                                         "server.handover_socket",
                                         "admin.address",
                                         "admin.token",
                                         "admin.backup_dir",
                                         "log.access"};
  std::istringstream in(ReadText(SampleDir() / "idemgate.toml"));
  std::vector<std::string> found;
  std::string section, line, previous;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos && line.front() != '#') {
      found.push_back(section + "." + line.substr(0, eq));
      EXPECT_EQ(previous.rfind("# ", 0), 0u) << "no comment above " << found.back();
    }
    previous = line;
  }
  EXPECT_EQ(found, keys);
}

// The key table is the one declaration of each key: packaging/idemgate.toml lists exactly its keys,
// in its order, each with the table's doc line just above and its default value.
TEST(ShippedFiles, IdemgateTomlMatchesTheKeyTable) {
  std::istringstream in(ReadText(SampleDir() / "idemgate.toml"));
  std::vector<std::string> found;
  std::string section, line, previous;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos || line.front() == '#') {
      previous = line;
      continue;
    }
    const size_t index = found.size();
    found.push_back(section + "." + line.substr(0, eq));
    ASSERT_LT(index, conf::ConfigKeys().size()) << found.back() << " is not in the key table";
    const conf::KeySpec& key = conf::ConfigKeys()[index];
    EXPECT_EQ(found.back(), key.Qualified()) << "the sample's order differs from the table's";
    EXPECT_EQ(previous, "# " + std::string(key.doc)) << key.Qualified();
    // The sample's value, alone in its section, gives the field's default ("24h" == "1d").
    ConfigResult alone = ParseConfig("[" + section + "]\n" + line + "\n", "alone.toml");
    ASSERT_TRUE(alone.ok()) << alone.error;
    EXPECT_TRUE(conf::SameValue(key.field, *alone.config, Config{}))
        << key.Qualified() << ": sample " << line.substr(eq + 3) << ", default "
        << conf::FormatDefault(key);
    previous = line;
  }
  EXPECT_EQ(found.size(), conf::ConfigKeys().size());
}

TEST(ShippedFiles, DemoTomlRunsTheDemo) {
  ConfigResult r = LoadConfig((SampleDir() / "demo.toml").string());
  ASSERT_TRUE(r.ok()) << r.error;
  const Config& c = *r.config;
  EXPECT_EQ(c.listen.addr.port, 8080);
  EXPECT_EQ(c.upstream.addr.host, "127.0.0.1");
  EXPECT_EQ(c.upstream.addr.port, 9000);
  EXPECT_FALSE(c.upstream.tls);
  EXPECT_EQ(c.store.path, "./data/demo");
  EXPECT_EQ(c.log.access, "stdout");
  EXPECT_GT(c.idempotency.lease_ms, c.upstream.connect_timeout_ms + c.upstream.response_timeout_ms);
}

class FullFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("conf_full_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(dir_ / "tls");
    WriteText(dir_ / "tls" / "cert.pem", "CERT");
    WriteText(dir_ / "tls" / "key.pem", "KEY");
    WriteText(dir_ / "ca.pem", "CA");
    WriteText(dir_ / "scope.secret", std::string("s3cr\0t\n", 7));
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// A file setting every key to a value other than its default: each one must arrive in Config.
TEST_F(FullFileTest, EveryKeyIsParsed) {
  const std::string text = R"(
[listen]
address = "[::1]:0"
tls_cert = "tls/cert.pem"
tls_key = "tls/key.pem"
[upstream]
url = "https://payments.internal:8443/"
ca_file = "ca.pem"
connect_timeout = "250ms"
response_timeout = "1m"
[idempotency]
header = "X-Request-Key"
methods = ["post", "Put", "DELETE"]
ttl = "2d"
lease = "90s"
require_key = ["/v1/payments", "/v2/"]
fingerprint_headers = ["X-Account-Id", "Stripe-Account"]
[scope]
header = "X-Api-Key"
secret_file = "scope.secret"
[store]
path = "/var/lib/idemgate"
sync = false
[limits]
max_request_body = 4096
max_response_body = "2MB"
max_header_bytes = "16KiB"
client_timeout = "3s"
idle_timeout = "5m"
[server]
workers = 4
busy_poll = "250us"
shutdown_grace = "1500ms"
[admin]
address = "127.0.0.1:0"
token = "admin-token"
[log]
access = "/var/log/idemgate/access.log"
)";
  WriteText(dir_ / "full.toml", text);
  ConfigResult r = LoadConfig((dir_ / "full.toml").string());
  ASSERT_TRUE(r.ok()) << r.error;
  const Config& c = *r.config;
  EXPECT_EQ(c.listen.address, "[::1]:0");
  EXPECT_EQ(c.listen.addr.host, "::1");
  EXPECT_EQ(c.listen.addr.port, 0);
  EXPECT_EQ(fs::path(c.listen.tls_cert), dir_ / "tls" / "cert.pem");
  EXPECT_EQ(fs::path(c.listen.tls_key), dir_ / "tls" / "key.pem");
  EXPECT_EQ(c.upstream.url, "https://payments.internal:8443/");
  EXPECT_TRUE(c.upstream.tls);
  EXPECT_EQ(c.upstream.addr.host, "payments.internal");
  EXPECT_EQ(c.upstream.addr.port, 8443);
  EXPECT_EQ(fs::path(c.upstream.ca_file), dir_ / "ca.pem");
  EXPECT_EQ(c.upstream.connect_timeout_ms, 250);
  EXPECT_EQ(c.upstream.response_timeout_ms, 60'000);
  EXPECT_EQ(c.idempotency.header, "X-Request-Key");
  EXPECT_EQ(c.idempotency.methods, (std::vector<std::string>{"POST", "PUT", "DELETE"}));
  EXPECT_EQ(c.idempotency.ttl_ms, 2 * 86'400'000LL);
  EXPECT_EQ(c.idempotency.lease_ms, 90'000);
  EXPECT_EQ(c.idempotency.require_key, (std::vector<std::string>{"/v1/payments", "/v2/"}));
  EXPECT_EQ(c.idempotency.fingerprint_headers,
            (std::vector<std::string>{"x-account-id", "stripe-account"}));
  EXPECT_EQ(c.scope.header, "X-Api-Key");
  EXPECT_EQ(fs::path(c.scope.secret_file), dir_ / "scope.secret");
  EXPECT_EQ(c.scope.secret, std::string("s3cr\0t\n", 7));
  EXPECT_EQ(c.store.path, "/var/lib/idemgate");
  EXPECT_FALSE(c.store.sync);
  EXPECT_EQ(c.limits.max_request_body, 4096u);
  EXPECT_EQ(c.limits.max_response_body, 2'000'000u);
  EXPECT_EQ(c.limits.max_header_bytes, 16u * 1024);
  EXPECT_EQ(c.limits.client_timeout_ms, 3'000);
  EXPECT_EQ(c.limits.idle_timeout_ms, 300'000);
  EXPECT_EQ(c.server.workers, 4);
  EXPECT_EQ(c.server.busy_poll_us, 250);
  EXPECT_EQ(c.server.shutdown_grace_ms, 1'500);
  EXPECT_EQ(c.admin.addr.port, 0);
  EXPECT_EQ(c.admin.token, "admin-token");
  EXPECT_EQ(c.log.access, "/var/log/idemgate/access.log");
}

TEST(ParseConfig, SmallerThingsParse) {
  ConfigResult r = ParseConfig(R"(
[admin]
address = ""
[server]
workers = 64
[log]
access = "off"
[upstream]
url = "http://[::1]"
)",
                               "small.toml");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.config->admin.address, "");
  EXPECT_EQ(r.config->server.workers, 64);
  EXPECT_EQ(r.config->log.access, "off");
  EXPECT_EQ(r.config->upstream.addr.host, "::1");
  EXPECT_EQ(r.config->upstream.addr.port, 80);
}

// SPEC §14: HTTP/2 can be turned off, and its stream limit set.
TEST(ParseConfig, Http2KeysParse) {
  ConfigResult r = ParseConfig("[listen]\nhttp2 = false\n[limits]\nhttp2_max_streams = 7\n", "h2.toml");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.config->listen.http2);
  EXPECT_EQ(r.config->limits.http2_max_streams, 7);
}

// A dotted key at the top level names the same key as the section form.
TEST(ParseConfig, DottedKeysAreTheSameKeys) {
  ConfigResult r = ParseConfig("upstream.response_timeout = \"10s\"\n", "dotted.toml");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.config->upstream.response_timeout_ms, 10'000);
}

}  // namespace
}  // namespace idemgate

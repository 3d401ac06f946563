// SPDX-License-Identifier: Apache-2.0
// Bad configurations are refused with the file, the line, the key and what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "conf/config.h"

namespace idemgate {
namespace {

namespace fs = std::filesystem;

// Parses `text` as "bad.toml"; the error must start "bad.toml:LINE: key 'KEY': " and contain
// `what` (no ":LINE" when line is 0).
void ExpectRefused(const std::string& text, int line, const std::string& key,
                   const std::string& what) {
  ConfigResult r = ParseConfig(text, "bad.toml");
  ASSERT_FALSE(r.ok()) << "accepted:\n" << text;
  EXPECT_EQ(r.config, nullptr);
  std::string prefix = "bad.toml";
  if (line > 0) {
    prefix += ':';
    prefix += std::to_string(line);
  }
  prefix += ": key '" + key + "': ";
  EXPECT_EQ(r.error.rfind(prefix, 0), 0u) << "error: " << r.error << "\nwanted prefix: " << prefix;
  EXPECT_NE(r.error.find(what), std::string::npos) << "error: " << r.error << "\nwanted: " << what;
}

TEST(ConfigErrors, Http2KeysAreChecked) {
  ExpectRefused("[limits]\nhttp2_max_streams = 0\n", 2, "limits.http2_max_streams", "");
  ExpectRefused("[limits]\nhttp2_max_streams = 10001\n", 2, "limits.http2_max_streams", "");
  ExpectRefused("[listen]\nhttp2 = \"yes\"\n", 2, "listen.http2", "");
}

TEST(ConfigErrors, UnknownKeyIsNamed) {
  ExpectRefused("[listen]\naddress = \"127.0.0.1:1\"\n\nadress = \"x\"\n", 4, "listen.adress",
                "unknown key");
}

TEST(ConfigErrors, UnknownSectionIsNamed) {
  ExpectRefused("[listen]\n[upstrem]\nurl = \"http://a:1\"\n", 2, "upstrem", "unknown section");
  // [upstreams] is the table of named groups: a key of [upstream] in it is pointed there.
  ExpectRefused("[listen]\n[upstreams]\nurl = \"http://a:1\"\n", 3, "upstreams.url",
                "the default group's keys go in [upstream]");
  ExpectRefused("workers = 4\n", 1, "workers", "unknown section");
}

TEST(ConfigErrors, SectionThatIsNotATable) {
  ExpectRefused("listen = \"0.0.0.0:80\"\n", 1, "listen", "got string");
}

TEST(ConfigErrors, WrongTypes) {
  ExpectRefused("\n[upstream]\nconnect_timeout = 5\n", 3, "upstream.connect_timeout",
                "expected a duration string like \"5s\", got integer");
  ExpectRefused("[store]\nsync = \"yes\"\n", 2, "store.sync", "got string");
  ExpectRefused("[server]\nworkers = \"4\"\n", 2, "server.workers", "expected an integer");
  ExpectRefused("[idempotency]\nmethods = \"POST\"\n", 2, "idempotency.methods",
                "expected an array of strings, got string");
  ExpectRefused("[idempotency]\nmethods = [\"POST\", 1]\n", 2, "idempotency.methods", "integer");
  ExpectRefused("[limits]\nmax_request_body = 1.5\n", 2, "limits.max_request_body", "got float");
  ExpectRefused("[listen]\naddress = 8080\n", 2, "listen.address", "expected a string");
}

TEST(ConfigErrors, StoreBackendAndPostgres) {
  ExpectRefused("[store]\nbackend = \"redis\"\n", 2, "store.backend",
                "must be \"rocksdb\" or \"postgres\"");
  ExpectRefused("[store]\nbackend = \"postgres\"\n", 0, "store.postgres.dsn",
                "must be set when store.backend is \"postgres\"");
  ExpectRefused("[store.postgres]\ndsn = \"host=db password=hunter2\"\n", 2, "store.postgres.dsn",
                "must not hold the password");
  ExpectRefused("[store.postgres]\ndsn = \"postgresql://u:hunter2@db/x\"\n", 2,
                "store.postgres.dsn", "must not hold the password");
  ExpectRefused("[store.postgres]\nconnections = 0\n", 2, "store.postgres.connections",
                "must be between 1 and 256");
  ExpectRefused("[store]\n[store.postgres]\nhost = \"db\"\n", 3, "store.postgres.host",
                "unknown key");
  ConfigResult ok = ParseConfig(
      "[store]\nbackend = \"postgres\"\n[store.postgres]\ndsn = \"host=a,b "
      "target_session_attrs=read-write\"\nconnections = 32\n",
      "good.toml");
  ASSERT_TRUE(ok.ok()) << ok.error;
  EXPECT_EQ(ok.config->store.backend, "postgres");
  EXPECT_EQ(ok.config->store.postgres.connections, 32);
}

TEST(ConfigErrors, BadDurations) {
  ExpectRefused("[limits]\nclient_timeout = \"10 s\"\n", 2, "limits.client_timeout",
                "bad duration \"10 s\"");
  ExpectRefused("[limits]\nidle_timeout = \"1.5s\"\n", 2, "limits.idle_timeout", "bad duration");
  ExpectRefused("[limits]\nidle_timeout = \"-5s\"\n", 2, "limits.idle_timeout", "bad duration");
  ExpectRefused("[server]\nshutdown_grace = \"0s\"\n", 2, "server.shutdown_grace",
                "must be longer than 0");
  ExpectRefused("[idempotency]\nttl = \"99999999999999999d\"\n", 2, "idempotency.ttl",
                "bad duration");
  ExpectRefused("[server]\nbusy_poll = \"200\"\n", 2, "server.busy_poll",
                "bad duration \"200\": expected a whole number and a unit (us, ms, s)");
  ExpectRefused("[server]\nbusy_poll = \"1m\"\n", 2, "server.busy_poll", "bad duration \"1m\"");
  ExpectRefused("[server]\nbusy_poll = \"10001us\"\n", 2, "server.busy_poll",
                "must be at most 10ms, got \"10001us\"");
  ExpectRefused("[server]\nbusy_poll = 200\n", 2, "server.busy_poll", "expected a string");
  ConfigResult at_bound = ParseConfig("[server]\nbusy_poll = \"10ms\"\n", "ok.toml");
  ASSERT_TRUE(at_bound.ok()) << at_bound.error;
  EXPECT_EQ(at_bound.config->server.busy_poll_us, 10'000);
}

// A duration or size near the integer limits is refused with its bound, never
// accepted to overflow later (a ttl of 106751991167d made now + ttl wrap: every record was born
// expired). Each bound is accepted exactly and refused one unit above.
TEST(ConfigErrors, DurationsAndSizesHaveSaneMaximums) {
  ExpectRefused("[idempotency]\nttl = \"106751991167d\"\n", 2, "idempotency.ttl",
                "must be at most 365d, got \"106751991167d\"");
  ExpectRefused("[idempotency]\nttl = \"366d\"\n", 2, "idempotency.ttl", "at most 365d");
  ExpectRefused("[idempotency]\nlease = \"9223372036854775807ms\"\n", 2, "idempotency.lease",
                "at most 7d");
  ExpectRefused("[idempotency]\nlease = \"9999999999999999999ms\"\n", 2, "idempotency.lease",
                "too large (at most 7d)");
  ExpectRefused("[upstream]\nconnect_timeout = \"11m\"\n", 2, "upstream.connect_timeout",
                "at most 10m");
  ExpectRefused("[upstream]\nresponse_timeout = \"25h\"\n", 2, "upstream.response_timeout",
                "at most 1d");
  ExpectRefused("[limits]\nclient_timeout = \"61m\"\n", 2, "limits.client_timeout", "at most 1h");
  ExpectRefused("[limits]\nidle_timeout = \"2d\"\n", 2, "limits.idle_timeout", "at most 1d");
  ExpectRefused("[server]\nshutdown_grace = \"2h\"\n", 2, "server.shutdown_grace", "at most 1h");
  ExpectRefused("[limits]\nmax_request_body = \"2GiB\"\n", 2, "limits.max_request_body",
                "must be at most 1GiB, got \"2GiB\"");
  ExpectRefused("[limits]\nmax_request_body = 9223372036854775807\n", 2, "limits.max_request_body",
                "at most 1GiB");
  ExpectRefused("[limits]\nmax_header_bytes = \"1025KiB\"\n", 2, "limits.max_header_bytes",
                "at most 1MiB");
  ConfigResult at_bounds = ParseConfig(R"(
[upstream]
connect_timeout = "10m"
response_timeout = "1d"
[idempotency]
lease = "7d"
ttl = "365d"
[limits]
max_request_body = "1GiB"
max_response_body = "1GiB"
max_header_bytes = "1MiB"
client_timeout = "1h"
idle_timeout = "1d"
[server]
shutdown_grace = "1h"
)",
                                       "bounds.toml");
  ASSERT_TRUE(at_bounds.ok()) << at_bounds.error;
  EXPECT_EQ(at_bounds.config->idempotency.ttl_ms, 365 * 86'400'000LL);
}

TEST(ConfigErrors, BadSizes) {
  ExpectRefused("[limits]\nmax_request_body = \"1XB\"\n", 2, "limits.max_request_body",
                "bad size \"1XB\"");
  ExpectRefused("[limits]\nmax_response_body = \"0\"\n", 2, "limits.max_response_body",
                "at least 1 byte");
  ExpectRefused("[limits]\nmax_header_bytes = 0\n", 2, "limits.max_header_bytes",
                "at least 1 byte");
  ExpectRefused("[limits]\nmax_header_bytes = -5\n", 2, "limits.max_header_bytes",
                "at least 1 byte");
  ExpectRefused("[limits]\nmax_request_body = \"99999999999GiB\"\n", 2, "limits.max_request_body",
                "bad size");
  // A stored response is one record: its body size is encoded in 32 bits, held in memory.
  ExpectRefused("[limits]\nmax_response_body = \"5GiB\"\n", 2, "limits.max_response_body",
                "at most 1GiB");
}

TEST(ConfigErrors, BadAddresses) {
  ExpectRefused("[listen]\naddress = \"0.0.0.0\"\n", 2, "listen.address", "missing port");
  ExpectRefused("[listen]\naddress = \"0.0.0.0:70000\"\n", 2, "listen.address", "bad port");
  ExpectRefused("[listen]\naddress = \"::1:8080\"\n", 2, "listen.address", "brackets");
  ExpectRefused("[admin]\naddress = \"localhost\"\n", 2, "admin.address", "missing port");
}

TEST(ConfigErrors, BadUpstreamUrls) {
  ExpectRefused("[upstream]\nurl = \"ftp://127.0.0.1:9000\"\n", 2, "upstream.url",
                "http:// or https://");
  ExpectRefused("[upstream]\nurl = \"http://127.0.0.1:9000/v1\"\n", 2, "upstream.url", "no path");
  ExpectRefused("[upstream]\nurl = \"127.0.0.1:9000\"\n", 2, "upstream.url", "http://");
  ExpectRefused("[upstream]\nurl = \"http://127.0.0.1:0\"\n", 2, "upstream.url", "port 0");
}

TEST(ConfigErrors, SafeMethodsCannotBeGuarded) {
  ExpectRefused("[idempotency]\nmethods = [\"POST\", \"GET\"]\n", 2, "idempotency.methods",
                "GET is a safe method");
  ExpectRefused("[idempotency]\nmethods = [\"head\"]\n", 2, "idempotency.methods",
                "HEAD is a safe method");
  ExpectRefused("[idempotency]\nmethods = [\"OPTIONS\"]\n", 2, "idempotency.methods", "safe");
  ExpectRefused("[idempotency]\nmethods = [\"TRACE\"]\n", 2, "idempotency.methods", "safe");
  ExpectRefused("[idempotency]\nmethods = []\n", 2, "idempotency.methods", "at least one");
  ExpectRefused("[idempotency]\nmethods = [\"POST\", \"post\"]\n", 2, "idempotency.methods",
                "more than once");
  ExpectRefused("[idempotency]\nmethods = [\"PO ST\"]\n", 2, "idempotency.methods", "not a valid");
}

TEST(ConfigErrors, HeaderNamesAndPrefixes) {
  ExpectRefused("[idempotency]\nheader = \"\"\n", 2, "idempotency.header", "must not be empty");
  ExpectRefused("[idempotency]\nheader = \"Idempotency Key\"\n", 2, "idempotency.header",
                "not a valid header name");
  ExpectRefused("[scope]\nheader = \"Authorization:\"\n", 2, "scope.header", "not a valid");
  ExpectRefused("[idempotency]\nfingerprint_headers = [\"X-A\", \"x-a\"]\n", 2,
                "idempotency.fingerprint_headers", "more than once");
  ExpectRefused("[idempotency]\nfingerprint_headers = [\"\"]\n", 2,
                "idempotency.fingerprint_headers", "not a valid header name");
  ExpectRefused("[idempotency]\nrequire_key = [\"v1/payments\"]\n", 2, "idempotency.require_key",
                "starting with '/'");
}

TEST(ConfigErrors, LeaseMustOutliveTheUpstreamTimeouts) {
  ExpectRefused("[upstream]\nresponse_timeout = \"30s\"\n\n[idempotency]\nlease = \"30s\"\n", 5,
                "idempotency.lease",
                "(30s) must be longer than upstream.connect_timeout + upstream.response_timeout "
                "(5s + 30s = 35s)");
  // The lease left at its default: the line is that of the timeout that made it too short.
  ExpectRefused("[upstream]\nconnect_timeout = \"1s\"\nresponse_timeout = \"29s\"\n", 3,
                "idempotency.lease", "(1s + 29s = 30s)");
  // Equal is not longer.
  ExpectRefused("[idempotency]\nlease = \"25s\"\n", 2, "idempotency.lease", "(5s + 20s = 25s)");
}

TEST(ConfigErrors, TtlMustOutliveTheLease) {
  ExpectRefused("[idempotency]\nlease = \"2m\"\nttl = \"1m\"\n", 3, "idempotency.ttl",
                "(1m) must be longer than idempotency.lease (2m)");
  ExpectRefused("[idempotency]\nttl = \"30s\"\n", 2, "idempotency.ttl",
                "must be longer than idempotency.lease (30s)");
}

// SPEC §10: wait <= max_wait <= lease; an unset max_wait follows a shorter lease.
TEST(ConfigErrors, WaitIsCappedByMaxWaitAndMaxWaitByTheLease) {
  ExpectRefused("[idempotency]\nmax_wait = \"5s\"\nwait = \"10s\"\n", 3, "idempotency.wait",
                "(10s) must not be longer than idempotency.max_wait (5s)");
  ExpectRefused("[idempotency]\nlease = \"1m\"\nmax_wait = \"2m\"\n", 3, "idempotency.max_wait",
                "(2m) must not be longer than idempotency.lease (1m)");
  ExpectRefused("[idempotency]\nmax_wait = \"0s\"\nwait = \"1s\"\n", 3, "idempotency.wait",
                "must not be longer than idempotency.max_wait (0ms)");
  ExpectRefused("[idempotency]\nwait = \"-1s\"\n", 2, "idempotency.wait", "bad duration");
  ConfigResult ok = ParseConfig(
      "[upstream]\nconnect_timeout = \"1s\"\nresponse_timeout = \"3s\"\n"
      "[idempotency]\nlease = \"10s\"\nwait = \"2s\"\n",
      "ok.toml");
  ASSERT_TRUE(ok.ok()) << ok.error;
  EXPECT_EQ(ok.config->idempotency.max_wait_ms, 10'000);  // the default 30s, held to the lease
  EXPECT_EQ(ok.config->idempotency.wait_ms, 2'000);
  ConfigResult off = ParseConfig("[idempotency]\nmax_wait = \"0s\"\nwait = \"0s\"\n", "off.toml");
  ASSERT_TRUE(off.ok()) << off.error;
  EXPECT_EQ(off.config->idempotency.max_wait_ms, 0);
}

TEST(ConfigErrors, TlsCertAndKeyGoTogether) {
  const fs::path cert = fs::temp_directory_path() / "conf_errors_cert.pem";
  std::ofstream(cert) << "CERT";
  ExpectRefused("[listen]\n\ntls_cert = \"" + cert.string() + "\"\n", 3, "listen.tls_cert",
                "listen.tls_key is not");
  ExpectRefused("[listen]\ntls_key = \"" + cert.string() + "\"\n", 2, "listen.tls_key",
                "listen.tls_cert is not");
  fs::remove(cert);
  ExpectRefused("[listen]\ntls_cert = \"/nonexistent/cert.pem\"\ntls_key = \"/nonexistent/k\"\n", 2,
                "listen.tls_cert", "cannot read \"/nonexistent/cert.pem\"");
}

TEST(ConfigErrors, SecretFileMustBeReadableAndNotEmpty) {
  ExpectRefused("[scope]\nsecret_file = \"/nonexistent/scope.secret\"\n", 2, "scope.secret_file",
                "cannot read \"/nonexistent/scope.secret\": No such file");
  const fs::path empty = fs::temp_directory_path() / "conf_errors_empty.secret";
  std::ofstream(empty).flush();
  ExpectRefused("[scope]\nsecret_file = \"" + empty.string() + "\"\n", 2, "scope.secret_file",
                "is empty");
  fs::remove(empty);
  ExpectRefused("[scope]\nsecret_file = \"" + fs::temp_directory_path().string() + "\"\n", 2,
                "scope.secret_file", "cannot read");
}

TEST(ConfigErrors, CaFileOnlyForHttps) {
  const fs::path ca = fs::temp_directory_path() / "conf_errors_ca.pem";
  std::ofstream(ca) << "CA";
  ExpectRefused("[upstream]\nca_file = \"" + ca.string() + "\"\n", 2, "upstream.ca_file",
                "not https://");
  fs::remove(ca);
}

TEST(ConfigErrors, WorkersLogAndStore) {
  ExpectRefused("[server]\nworkers = 65\n", 2, "server.workers", "between 0");
  ExpectRefused("[server]\nworkers = -1\n", 2, "server.workers", "got -1");
  ExpectRefused("[log]\naccess = \"\"\n", 2, "log.access", "must not be empty");
  ExpectRefused("[store]\npath = \"\"\n", 2, "store.path", "must not be empty");
}

TEST(ConfigErrors, SyntaxErrorHasLineAndColumn) {
  ConfigResult r = ParseConfig("[listen]\naddress = \"0.0.0.0:8080\n", "syntax.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.rfind("syntax.toml:2:", 0), 0u) << r.error;
  EXPECT_NE(r.error.find("syntax error"), std::string::npos) << r.error;
  ConfigResult dup = ParseConfig("[store]\nsync = true\nsync = false\n", "dup.toml");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error.rfind("dup.toml:3:", 0), 0u) << dup.error;
}

TEST(ConfigErrors, MissingConfigFile) {
  ConfigResult r = LoadConfig("/nonexistent/idemgate.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.rfind("/nonexistent/idemgate.toml: ", 0), 0u) << r.error;
}

// A secret_file relative to the config file is found next to it, not in the working directory.
TEST(ConfigErrors, RelativeSecretFileIsRelativeToTheConfig) {
  const fs::path dir = fs::temp_directory_path() / "conf_errors_rel";
  fs::create_directories(dir);
  std::ofstream(dir / "k.secret") << "key-bytes";
  std::ofstream(dir / "c.toml") << "[scope]\nsecret_file = \"k.secret\"\n";
  ConfigResult r = LoadConfig((dir / "c.toml").string());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.config->scope.secret, "key-bytes");
  fs::remove(dir / "k.secret");
  ConfigResult gone = LoadConfig((dir / "c.toml").string());
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error.rfind((dir / "c.toml").string() + ":2: key 'scope.secret_file'", 0), 0u)
      << gone.error;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Through the real binary: [[routes]]. Each override a route may set, route
// order (first match wins), Host matching, statuses answered but not stored, the per-route C4
// check of --check-config, reload of routes, and old config files still accepted.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class RoutesTest : public GatewayTest {
 protected:
  // The fixture's sections, then `routes` ([[routes]] tables).
  void StartWithRoutes(const std::string& routes) {
    std::string path = dir_.WriteFile("idemgate.toml", ConfigText() + routes);
    ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path})) << gateway_.error();
    port_ = gateway_.WaitForPort();
    ASSERT_NE(port_, 0) << gateway_.log();
  }

  HttpResponse Send(const std::string& method, const std::string& target, const std::string& key,
                    const std::string& body, HeaderList headers = kMerchant) {
    if (!key.empty()) headers.emplace_back("Idempotency-Key", key);
    TestClient client(port_);
    return client.Request(method, target, headers, body);
  }

  // Sends a keyed POST to `target` on `client` and returns once the upstream has it: the key is
  // in flight until the upstream answers (its delay set by the caller).
  void SendInFlight(TestClient& client, const std::string& target, const std::string& key) {
    const int before = upstream_.requests();
    HeaderList headers = kMerchant;
    headers.emplace_back("Idempotency-Key", key);
    ASSERT_TRUE(client.SendRaw(TestClient::BuildRequest({"POST", target, headers, "{}"})));
    ASSERT_TRUE(upstream_.WaitForRequests(before + 1));
  }

  // Rewrites the config with `routes`, sends SIGHUP, waits for the reload's log line.
  void ReloadWithRoutes(const std::string& routes) {
    const std::string needle = "config reloaded from ";
    auto count = [&] {
      size_t n = 0;
      const std::string log = gateway_.log();
      for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) {
        ++n;
      }
      return n;
    };
    const size_t before = count();
    dir_.WriteFile("idemgate.toml", ConfigText() + routes);
    ASSERT_TRUE(gateway_.Kill(SIGHUP));
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (count() <= before) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << gateway_.log();
      std::this_thread::sleep_for(10ms);
    }
  }
};

TEST_F(RoutesTest, RequireKeyPerRouteAndFirstMatchWins) {
  StartWithRoutes(R"([[routes]]
prefix = "/v1/payments/quotes"
[[routes]]
prefix = "/v1/payments"
idempotency = { require_key = ["/"] }
)");
  HttpResponse missing = Send("POST", "/v1/payments", "", "{}");
  EXPECT_EQ(missing.status, 400) << missing.raw;
  EXPECT_EQ(ErrorCodeOf(missing), "idempotency_key_missing");
  // routes[1] matches first: the top level's (empty) require_key applies there.
  EXPECT_EQ(Send("POST", "/v1/payments/quotes", "", "{}").status, 201);
  EXPECT_EQ(Send("POST", "/v1/other", "", "{}").status, 201);  // no route: the top level
  // The path is matched as require_key matches it: case and dot segments do not escape a route.
  EXPECT_EQ(Send("POST", "/V1/x/../Payments", "", "{}").status, 400);
  EXPECT_EQ(upstream_.requests(), 2);
}

TEST_F(RoutesTest, HostMatchesWithoutPortAndCase) {
  StartWithRoutes(R"([[routes]]
prefix = "/"
host = "api.example.com"
idempotency = { require_key = ["/"] }
)");
  HeaderList api = kMerchant;
  api.emplace_back("Host", "API.Example.com:8443");
  EXPECT_EQ(Send("POST", "/v1/payments", "", "{}", api).status, 400);
  HeaderList other = kMerchant;
  other.emplace_back("Host", "internal.example.com");
  EXPECT_EQ(Send("POST", "/v1/payments", "", "{}", other).status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(RoutesTest, MethodsPerRoute) {
  StartWithRoutes(R"([[routes]]
prefix = "/v1/orders"
[routes.idempotency]
methods = ["put"]
)");
  // PUT is guarded under the route: executed once, replayed.
  EXPECT_EQ(Send("PUT", "/v1/orders/1", "k-put", "{}").status, 201);
  HttpResponse replay = Send("PUT", "/v1/orders/1", "k-put", "{}");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
  // POST is not, under the route; and PUT is not, outside it (top-level methods).
  Send("POST", "/v1/orders/1", "k-post", "{}");
  Send("POST", "/v1/orders/1", "k-post", "{}");
  Send("PUT", "/v1/other", "k-put2", "{}");
  Send("PUT", "/v1/other", "k-put2", "{}");
  EXPECT_EQ(upstream_.requests(), 5);
}

TEST_F(RoutesTest, FingerprintHeadersPerRoute) {
  StartWithRoutes(R"([[routes]]
prefix = "/v1/transfers"
idempotency = { fingerprint_headers = ["X-Account"] }
)");
  HeaderList a = kMerchant, b = kMerchant;
  a.emplace_back("X-Account", "acct_a");
  b.emplace_back("X-Account", "acct_b");
  EXPECT_EQ(Send("POST", "/v1/transfers", "k1", "{}", a).status, 201);
  HttpResponse reused = Send("POST", "/v1/transfers", "k1", "{}", b);
  EXPECT_EQ(reused.status, 422) << reused.raw;
  // Outside the route the header is not fingerprinted: the retry replays.
  EXPECT_EQ(Send("POST", "/v1/other", "k2", "{}", a).status, 201);
  EXPECT_EQ(Send("POST", "/v1/other", "k2", "{}", b).Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);
}

// The lease shows in a concurrent retry's Retry-After (the lease left of the attempt in flight).
TEST_F(RoutesTest, LeasePerRoute) {
  StartWithRoutes(R"([[routes]]
prefix = "/v1/slow"
idempotency = { lease = "300s" }
)");
  auto retry_after = [&](const std::string& target, const std::string& key) {
    upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "{}").WithDelay(1'500));
    TestClient first(port_);
    SendInFlight(first, target, key);
    HttpResponse busy = Send("POST", target, key, "{}");
    EXPECT_EQ(busy.status, 409) << busy.raw;
    EXPECT_EQ(first.ReadResponse().status, 201);
    return std::stoi(busy.Header("Retry-After").value_or("0"));
  };
  EXPECT_GT(retry_after("/v1/slow", "k-slow"), 60);
  EXPECT_LE(retry_after("/v1/other", "k-fast"), 30);
}

// Waiting on a route (docs/behaviour.md "Waiting instead of 409"): its lease (2s) is shorter than
// the top level's max_wait (30s), so a duplicate's Prefer: wait=20 is capped at the lease, and it
// still gets the first answer.
TEST_F(RoutesTest, ARouteLeaseCapsTheWait) {
  Set("upstream", "connect_timeout", "\"200ms\"");
  Set("upstream", "response_timeout", "\"1500ms\"");
  StartWithRoutes(R"([[routes]]
prefix = "/v1/quick"
idempotency = { lease = "2s" }
)");
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "{\"id\":1}").WithDelay(300));
  TestClient first(port_);
  SendInFlight(first, "/v1/quick", "k-quick");
  HeaderList prefer = kMerchant;
  prefer.emplace_back("Prefer", "wait=20");
  HttpResponse waited = Send("POST", "/v1/quick", "k-quick", "{}", prefer);
  EXPECT_EQ(waited.status, 201) << waited.raw;
  EXPECT_EQ(waited.Header("Preference-Applied"), "wait=2");
  EXPECT_EQ(waited.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(first.ReadResponse().status, 201);
  EXPECT_EQ(upstream_.requests(), 1);
}

// Records under the route expire after its ttl; the top level's (24h) still replay.
TEST_F(RoutesTest, TtlPerRoute) {
  Set("upstream", "connect_timeout", "\"200ms\"");
  Set("upstream", "response_timeout", "\"300ms\"");
  StartWithRoutes(R"([[routes]]
prefix = "/v1/short"
idempotency = { ttl = "1s", lease = "600ms" }
)");
  EXPECT_EQ(Send("POST", "/v1/short", "k1", "{}").status, 201);
  EXPECT_EQ(Send("POST", "/v1/other", "k2", "{}").status, 201);
  EXPECT_EQ(Send("POST", "/v1/short", "k1", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);
  // Retried until the record is gone: the route's key executes a second time.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (Send("POST", "/v1/short", "k1", "{}").Header("Idempotent-Replayed").has_value()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(upstream_.requests(), 3);
  EXPECT_EQ(Send("POST", "/v1/other", "k2", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 3);
}

TEST_F(RoutesTest, BodyLimitsPerRoute) {
  Set("limits", "max_request_body", "\"1KiB\"");
  Set("limits", "max_response_body", "\"1KiB\"");
  StartWithRoutes(R"([[routes]]
prefix = "/v1/uploads"
limits = { max_request_body = "64KiB" }
[[routes]]
prefix = "/v1/tiny"
limits = { max_request_body = 100 }
[[routes]]
prefix = "/v1/exports"
limits = { max_response_body = "1MiB" }
)");
  const std::string body(10 << 10, 'x');
  EXPECT_EQ(Send("POST", "/v1/uploads", "k1", body).status, 201);
  HttpResponse big = Send("POST", "/v1/other", "k2", body);
  EXPECT_EQ(big.status, 413);
  HttpResponse tiny = Send("POST", "/v1/tiny", "k3", std::string(500, 'x'));
  EXPECT_EQ(tiny.status, 413) << tiny.raw;
  EXPECT_EQ(ErrorCodeOf(tiny), "request_too_large");
  EXPECT_EQ(upstream_.requests(), 1);

  upstream_.SetBehavior(UpstreamBehavior::BigBody(100 << 10));
  HttpResponse exported = Send("POST", "/v1/exports", "k4", "{}");
  EXPECT_EQ(exported.status, 200);
  EXPECT_EQ(exported.body.size(), 100u << 10);
  EXPECT_EQ(Send("POST", "/v1/exports", "k4", "{}").body.size(), 100u << 10);  // replayed
  EXPECT_EQ(Send("POST", "/v1/other", "k5", "{}").status, 502);
}

// A 429 under the route is answered, not stored: the retry executes again, and its 201 is stored.
// Without the route the 429 is the stored result (R1) and replays.
TEST_F(RoutesTest, NoStoreStatusIsAnsweredAndTheRetryExecutesAgain) {
  StartWithRoutes(R"([[routes]]
prefix = "/v1/payments"
no_store_statuses = [429, 503]
)");
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(429, R"({"error":"slow down"})"));
  HttpResponse limited = Send("POST", "/v1/payments", "k1", "{}");
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.body, R"({"error":"slow down"})");
  HttpResponse retried = Send("POST", "/v1/payments", "k1", "{}");
  EXPECT_EQ(retried.status, 201);
  EXPECT_FALSE(retried.Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(Send("POST", "/v1/payments", "k1", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);

  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(429, "{}"));
  EXPECT_EQ(Send("POST", "/v1/other", "k2", "{}").status, 429);
  HttpResponse stored = Send("POST", "/v1/other", "k2", "{}");
  EXPECT_EQ(stored.status, 429);
  EXPECT_EQ(stored.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 3);
}

TEST_F(RoutesTest, CheckConfigRefusesARouteWhoseLeaseDoesNotCoverTheTimeouts) {
  const std::string path = dir_.WriteFile("c4.toml", ConfigText() + R"(
[[routes]]
prefix = "/v1/payments"
[[routes]]
prefix = "/v1/exports"
idempotency = { lease = "10s" }
)");
  RunResult r = RunGateway({"--check-config", "--config", path});
  EXPECT_NE(r.code, 0);
  for (const char* part : {"c4.toml:", "routes[2].idempotency.lease", "prefix \"/v1/exports\"",
                           "upstream.connect_timeout + upstream.response_timeout"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " in: " << r.output;
  }
  // Inherited: a route's ttl is checked against its own lease.
  const std::string ttl = dir_.WriteFile("ttl.toml", ConfigText() + R"(
[[routes]]
prefix = "/v1/refunds"
[routes.idempotency]
lease = "2m"
)");
  r = RunGateway({"--check-config", "--config", ttl});
  EXPECT_EQ(r.code, 0) << r.output;  // 24h > 2m
  dir_.WriteFile("ttl.toml", ConfigText() + R"(
[[routes]]
prefix = "/v1/refunds"
[routes.idempotency]
lease = "2m"
ttl = "1m"
)");
  r = RunGateway({"--check-config", "--config", ttl});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("routes[1].idempotency.ttl"), std::string::npos) << r.output;
}

// A route sends to a named group: its requests reach that group's server, the others the default.
TEST_F(RoutesTest, RouteSendsToItsUpstreamGroup) {
  FakeUpstream internal;
  ASSERT_TRUE(internal.Start());
  internal.SetBehavior(UpstreamBehavior::Respond(202, R"({"internal":true})"));
  Set("upstreams.internal", "url", "\"http://127.0.0.1:" + std::to_string(internal.port()) + "\"");
  StartWithRoutes(R"([[routes]]
prefix = "/internal"
upstream = "internal"
)");
  HttpResponse first = Send("POST", "/internal/jobs", "k1", "{}");
  EXPECT_EQ(first.status, 202) << first.raw;
  EXPECT_EQ(first.body, R"({"internal":true})");
  EXPECT_EQ(Send("POST", "/internal/jobs", "k1", "{}").Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(Send("GET", "/internal/status", "", "").status, 202);
  EXPECT_EQ(Send("POST", "/v1/payments", "k2", "{}").status, 201);
  EXPECT_EQ(internal.requests(), 2);
  EXPECT_EQ(upstream_.requests(), 1);
}

// C4 per route uses the timeouts of the route's group.
TEST_F(RoutesTest, CheckConfigRefusesARouteWhoseGroupOutlastsItsLease) {
  Set("upstreams.reports", "url", "\"http://127.0.0.1:" + std::to_string(upstream_.port()) + "\"");
  Set("upstreams.reports", "response_timeout", "\"60s\"");
  const std::string path = dir_.WriteFile("group.toml", ConfigText() + R"(
[[routes]]
prefix = "/v1/reports"
upstream = "reports"
)");
  RunResult r = RunGateway({"--check-config", "--config", path});
  EXPECT_NE(r.code, 0);
  for (const char* part : {"routes[1].idempotency.lease", "from idempotency.lease",
                           "upstreams.reports.response_timeout", "= 65s"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " in: " << r.output;
  }
  dir_.WriteFile("group.toml", ConfigText() + R"(
[[routes]]
prefix = "/v1/reports"
upstream = "reports"
idempotency = { lease = "2m" }
)");
  r = RunGateway({"--check-config", "--config", path});
  EXPECT_EQ(r.code, 0) << r.output;
}

// The store remembers a route's own fingerprint_headers: a restart that adds one is refused
// unless accepted; a store written without routes keeps its signature when routes are added.
TEST_F(RoutesTest, ARoutesFingerprintHeadersAreInTheStoresSignature) {
  StartGateway();
  ASSERT_EQ(Send("POST", "/v1/transfers", "k1", "{}").status, 201);
  gateway_.Kill(SIGTERM);
  ASSERT_TRUE(gateway_.Wait());
  StartWithRoutes("[[routes]]\nprefix = \"/v1/transfers\"\n");  // same signature: starts
  EXPECT_EQ(Send("POST", "/v1/transfers", "k1", "{}").Header("Idempotent-Replayed"), "true");
  gateway_.Kill(SIGTERM);
  ASSERT_TRUE(gateway_.Wait());

  const std::string own =
      "[[routes]]\nprefix = \"/v1/transfers\"\n"
      "idempotency = { fingerprint_headers = [\"X-Account\"] }\n";
  const std::string path = dir_.WriteFile("idemgate.toml", ConfigText() + own);
  RunResult refused = RunGateway({"--config", path});
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.output.find("routes.fingerprint_headers (stored \"(absent)\", now "
                                "\"/v1/transfers:x-account\")"),
            std::string::npos)
      << refused.output;
  ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path, "--accept-new-signature"}));
  port_ = gateway_.WaitForPort();
  ASSERT_NE(port_, 0) << gateway_.log();
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(RoutesTest, OldConfigFilesAreStillAccepted) {
  for (const char* file : {"/packaging/idemgate.toml", "/packaging/demo.toml",
                           "/tests/unit/conf/testdata/idemgate-before-groups.toml"}) {
    RunResult r = RunGateway({"--check-config", "--config", std::string(SOURCE_DIR) + file});
    EXPECT_EQ(r.code, 0) << file << ": " << r.output;
  }
  const std::string path = dir_.WriteFile("fixture.toml", ConfigText());
  RunResult r = RunGateway({"--check-config", "--config", path});
  EXPECT_EQ(r.code, 0) << r.output;
}

// A route's live keys change on SIGHUP; a changed table shape (a route added) waits for a restart.
TEST_F(RoutesTest, ReloadAppliesLiveRouteKeysAndKeepsAChangedShape) {
  StartWithRoutes(R"([[routes]]
prefix = "/v1/payments"
)");
  EXPECT_EQ(Send("POST", "/v1/payments", "", "{}").status, 201);
  ReloadWithRoutes(R"([[routes]]
prefix = "/v1/payments"
idempotency = { require_key = ["/"] }
)");
  EXPECT_EQ(Send("POST", "/v1/payments", "", "{}").status, 400);
  ReloadWithRoutes(R"([[routes]]
prefix = "/v1/orders"
idempotency = { require_key = ["/"] }
[[routes]]
prefix = "/v1/payments"
idempotency = { require_key = ["/"] }
)");
  EXPECT_NE(gateway_.log().find("routes (order, prefix, host, upstream"), std::string::npos)
      << gateway_.log();
  EXPECT_EQ(Send("POST", "/v1/orders", "", "{}").status, 201);  // the new route is not in force
  EXPECT_EQ(Send("POST", "/v1/payments", "", "{}").status, 400);
  EXPECT_EQ(upstream_.requests(), 2);
}

}  // namespace
}  // namespace idemgate::test

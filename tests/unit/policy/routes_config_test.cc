// [[routes]] in the config: what each route's effective config holds, route selection, reload of
// routes, and the routes' fingerprint headers in the settings signature.
#include <gtest/gtest.h>

#include <string>

#include "proxy/http/http_message.h"
#include "proxy/ops/reload.h"
#include "proxy/ops/store_signature.h"
#include "proxy/policy/routes.h"

namespace idemgate {
namespace {

Config ParseOk(const std::string& text) {
  ConfigResult r = ParseConfig(text, "routes.toml");
  EXPECT_TRUE(r.ok()) << r.error;
  return r.ok() ? *r.config : Config{};
}

Request Req(const std::string& target, const std::string& host = "") {
  Request request;
  request.method = "POST";
  request.target = target;
  if (!host.empty()) request.headers.push_back({"Host", host});
  return request;
}

const char* kRoutes = R"(
[idempotency]
ttl = "2h"
[[routes]]
prefix = "/v1/refunds"
host = "Api.Example.com"
idempotency = { ttl = "7d", methods = ["POST", "PUT"] }
[[routes]]
prefix = "/v1/"
no_store_statuses = [429]
limits = { max_request_body = "4MiB" }
)";

TEST(RoutesConfig, EffectiveConfigIsTheTopLevelWithTheRoutesKeys) {
  Config c = ParseOk(kRoutes);
  ASSERT_EQ(c.routes.size(), 2u);
  const Config& refunds = *c.routes[0].effective;
  EXPECT_EQ(c.routes[0].host, "api.example.com");
  EXPECT_EQ(refunds.idempotency.ttl_ms, 7 * 24 * 3'600'000LL);
  EXPECT_EQ(refunds.idempotency.methods, (std::vector<std::string>{"POST", "PUT"}));
  EXPECT_EQ(refunds.limits.max_request_body, 1u << 20);  // the top level's
  EXPECT_TRUE(refunds.routes.empty());
  const Config& v1 = *c.routes[1].effective;
  EXPECT_EQ(v1.idempotency.ttl_ms, 2 * 3'600'000LL);  // inherited
  EXPECT_EQ(v1.idempotency.no_store_statuses, std::vector<int>{429});
  EXPECT_TRUE(c.idempotency.no_store_statuses.empty());
  EXPECT_EQ(MaxRequestBody(c), 4u << 20);
}

// Waiting within the lease, per route (docs/behaviour.md "Waiting instead of 409"): a route's
// lease shorter than the top level's max_wait and wait caps both for that route (a duplicate never
// waits past the lease it waits on), on reload too.
TEST(RoutesConfig, ARouteLeaseShorterThanTheWaitsCapsThem) {
  const std::string text = R"(
[upstream]
connect_timeout = "1s"
response_timeout = "5s"
[idempotency]
lease = "2m"
max_wait = "90s"
wait = "60s"
[[routes]]
prefix = "/v1/quick"
idempotency = { lease = "10s" }
[[routes]]
prefix = "/v1/"
idempotency = { lease = "70s" }
)";
  auto check = [](const Config& c) {
    ASSERT_EQ(c.routes.size(), 2u);
    const auto& quick = c.routes[0].effective->idempotency;
    EXPECT_EQ(quick.max_wait_ms, 10'000);
    EXPECT_EQ(quick.wait_ms, 10'000);
    const auto& v1 = c.routes[1].effective->idempotency;
    EXPECT_EQ(v1.max_wait_ms, 70'000);
    EXPECT_EQ(v1.wait_ms, 60'000);
    EXPECT_EQ(c.idempotency.max_wait_ms, 90'000);  // the top level keeps its own
    EXPECT_EQ(c.idempotency.wait_ms, 60'000);
  };
  const Config parsed = ParseOk(text);
  check(parsed);
  ReloadPlan plan = PlanReload(parsed, ParseOk(text));
  EXPECT_TRUE(plan.ignored.empty());
  check(*plan.config);
}

TEST(RoutesConfig, FirstMatchWinsHostWithoutPort) {
  Config c = ParseOk(kRoutes);
  EXPECT_EQ(MatchRoute(c, Req("/v1/refunds/1", "api.example.com:443")), 0);
  EXPECT_EQ(MatchRoute(c, Req("/v1/refunds/1", "other")), 1);
  EXPECT_EQ(MatchRoute(c, Req("/v1/refunds/1")), 1);
  EXPECT_EQ(MatchRoute(c, Req("/V1/Refunds", "API.EXAMPLE.COM")), 0);
  EXPECT_EQ(MatchRoute(c, Req("/v1/refunds", "api.example.com.")), 0);  // the same DNS name
  EXPECT_EQ(MatchRoute(c, Req("/v2/x")), -1);
  EXPECT_EQ(MatchRoute(c, Req("/v1")), -1);  // "/v1/" is a string prefix
  // The host the upstream acts on: an absolute-form target's (the parser refuses a Host that
  // names another one).
  EXPECT_EQ(MatchRoute(c, Req("http://API.example.com./v1/refunds?q")), 0);
  EXPECT_EQ(MatchRoute(c, Req("http://h/v1/refunds?q", "api.example.com")), 1);
}

// Every reading an upstream might make of the path must select the same route; a path whose
// readings disagree is ambiguous (refused), so no spelling runs it under a route whose policy
// another reading would skip.
TEST(RoutesConfig, APathWhoseReadingsSelectDifferentRoutesIsAmbiguous) {
  Config c = ParseOk(kRoutes);
  const char* api = "api.example.com";
  for (const char* target : {
           "/V1/./refunds",            // "." kept by a router that does not resolve it
           "/v1//refunds",             // "//" kept by one that does not merge slashes
           "/v2/../v1/x",              // ".." resolved into /v1/ by one, /v2/.. to another
           "/v1/../v2/x",              // the reverse
           "/v1%2Frefunds",            // %2F decoded by one, kept in the segment by another
           "/v1/x%2F..%2Frefunds",     // encoded dot segments
           "/v1/x/%252e%252e/refunds", // double-encoded dots
           "/v1/x/..%5Crefunds",       // a backslash read as a separator
           "/v1/x/..;/refunds",        // Tomcat's "..;" is ".."
       }) {
    EXPECT_EQ(MatchRoute(c, Req(target, api)), kAmbiguousRoute) << target;
  }
  // Readings that differ but fall under one route are not ambiguous.
  EXPECT_EQ(MatchRoute(c, Req("/v1/refunds/a%2Fb", api)), 0);
  EXPECT_EQ(MatchRoute(c, Req("/v1/refunds;jsessionid=1", api)), 0);
  EXPECT_EQ(MatchRoute(c, Req("/v1/x/../y")), 1);
  EXPECT_EQ(MatchRoute(c, Req("/v2/a%2Fb")), -1);
}

TEST(RoutesConfig, ReloadAppliesLiveRouteKeysOnTheMergedTopLevel) {
  Config running = ParseOk(kRoutes);
  std::string text = kRoutes;
  text.replace(text.find("ttl = \"2h\""), 10, "ttl = \"3h\"\nmethods = [\"PATCH\"]");
  text.replace(text.find("[429]"), 5, "[429, 503]");
  ReloadPlan plan = PlanReload(running, ParseOk(text));
  EXPECT_EQ(plan.ignored, std::vector<std::string>{"idempotency.methods"});
  const Config& v1 = *plan.config->routes[1].effective;
  EXPECT_EQ(v1.idempotency.ttl_ms, 3 * 3'600'000LL);                          // live, inherited
  EXPECT_EQ(v1.idempotency.no_store_statuses, (std::vector<int>{429, 503}));  // live
  EXPECT_EQ(v1.idempotency.methods, (std::vector<std::string>{"POST", "PATCH"}));  // running
}

TEST(RoutesConfig, ReloadKeepsTheRunningTableWhenItsShapeChanges) {
  Config running = ParseOk(kRoutes);
  std::string text = kRoutes;
  text.replace(text.find("\"POST\", \"PUT\""), 13, "\"PUT\"");
  ReloadPlan plan = PlanReload(running, ParseOk(text));
  ASSERT_EQ(plan.ignored.size(), 1u);
  EXPECT_EQ(plan.ignored[0].rfind("routes (", 0), 0u);
  EXPECT_EQ(plan.config->routes[0].effective->idempotency.methods,
            (std::vector<std::string>{"POST", "PUT"}));
}

// Each part of the shape alone keeps the running table: a prefix, a host changed or dropped, and
// a restart-only key a route starts to set (even to the value it inherited).
TEST(RoutesConfig, ReloadKeepsTheRunningTableForEveryPartOfItsShape) {
  const Config running = ParseOk(kRoutes);
  const std::string refunds = "prefix = \"/v1/refunds\"\nhost = \"Api.Example.com\"\n";
  std::vector<std::string> changed;
  changed.push_back(kRoutes);
  changed.back().replace(changed.back().find("/v1/refunds"), 11, "/v1/returns");
  changed.push_back(kRoutes);
  changed.back().replace(changed.back().find("Api.Example.com"), 15, "api2.example.com");
  changed.push_back(kRoutes);
  changed.back().replace(changed.back().find(refunds), refunds.size(),
                         "prefix = \"/v1/refunds\"\n");
  changed.push_back(kRoutes);
  changed.back().replace(changed.back().find("[429]"), 5,
                         "[429]\nidempotency = { fingerprint_headers = [] }");
  for (const std::string& text : changed) {
    ReloadPlan plan = PlanReload(running, ParseOk(text));
    ASSERT_EQ(plan.ignored.size(), 1u) << text;
    EXPECT_EQ(plan.ignored[0].rfind("routes (order", 0), 0u) << text;
    EXPECT_EQ(plan.config->routes[0].prefix, "/v1/refunds") << text;
    EXPECT_EQ(plan.config->routes[0].host, "api.example.com") << text;
  }
}

// Named groups wait for a restart: a route lease shortened together with its group's timeout
// would not cover the running group's, so the running routes stay.
TEST(RoutesConfig, ReloadKeepsRoutesWhoseLeaseWouldNotCoverTheRunningGroup) {
  const std::string before = R"([upstreams.reports]
url = "http://r:1"
response_timeout = "2m"
[[routes]]
prefix = "/reports"
upstream = "reports"
idempotency = { lease = "3m" }
)";
  std::string after = before;
  after.replace(after.find("\"2m\""), 4, "\"10s\"");
  after.replace(after.find("\"3m\""), 4, "\"1m\"");
  ReloadPlan plan = PlanReload(ParseOk(before), ParseOk(after));
  EXPECT_EQ(plan.ignored, (std::vector<std::string>{
                              "upstreams (named upstream groups)",
                              "routes (a lease would not cover its running group's timeouts)"}));
  EXPECT_EQ(plan.config->routes[0].effective->idempotency.lease_ms, 3 * 60'000);
  EXPECT_EQ(plan.config->routes[0].effective->upstream.response_timeout_ms, 2 * 60'000);
}

TEST(RoutesConfig, SignatureHoldsRoutesFingerprintHeadersOnlyWhenARouteHasOwn) {
  const std::string plain = SettingsSignature(Config{});
  EXPECT_EQ(SettingsSignature(ParseOk(kRoutes)), plain);  // old stores keep their signature
  Config own = ParseOk(
      "[[routes]]\nprefix = \"/a\"\n[[routes]]\nprefix = \"/b\"\n"
      "idempotency = { fingerprint_headers = [\"X-Account\"] }\n");
  EXPECT_EQ(SignatureDifferences(plain, SettingsSignature(own)),
            std::vector<std::string>{
                "routes.fingerprint_headers (stored \"(absent)\", now \"/a: /b:x-account\")"});
}

struct BadRoute {
  const char* toml;
  const char* message;  // a part of the error, which names the route's key
};

// Each refusal names the file, the line, the route's key, and what is wrong.
TEST(RoutesConfig, BadRoutesAreRefusedNamingTheRouteKey) {
  const BadRoute cases[] = {
      {"[[routes]]\nhost = \"a\"\n", "routes.toml:1: key 'routes[1].prefix': is required"},
      {"[[routes]]\nprefix = \"v1\"\n", "key 'routes[1].prefix': \"v1\" must be a path prefix"},
      {"[[routes]]\nprefix = \"/v1/../v2\"\n", "\"/v1/../v2\" must be a plain path"},
      {"[[routes]]\nprefix = \"/v1%2F\"\n", "must be a plain path"},
      {"[[routes]]\nprefix = \"/v1/.\"\n", "must be a plain path"},
      {"[[routes]]\nprefix = \"/v1\"\n[[routes]]\nprefix = \"/V1/pay\"\n",
       "routes.toml:4: key 'routes[2].prefix': routes[2] (prefix \"/V1/pay\") never matches: "
       "routes[1] (prefix \"/v1\") comes first"},
      {"[[routes]]\nprefix = \"/v1\"\nhost = \"a:80\"\n", "key 'routes[1].host': \"a:80\""},
      {"[[routes]]\nprefix = \"/v1\"\nupstream = \"nope\"\n",
       "key 'routes[1].upstream': no upstream group \"nope\""},
      {"[[routes]]\nprefix = \"/v1\"\nno_store_statuses = [200]\n",
       "key 'routes[1].no_store_statuses': 200 is not a 4xx or 5xx status"},
      {"[[routes]]\nprefix = \"/v1\"\nno_store_statuses = [429, 429]\n",
       "429 is listed more than once"},
      {"[[routes]]\nprefix = \"/v1\"\nno_store_statuses = [\"429\"]\n",
       "key 'routes[1].no_store_statuses': expected an array of integers, got an element of type "
       "string"},
      {"[[routes]]\nprefix = \"/v1\"\nno_store_statuses = 429\n",
       "key 'routes[1].no_store_statuses': expected an array of integers, got integer"},
      {"[[routes]]\nprefix = \"/v1\"\nidempotency = { header = \"X\" }\n",
       "key 'routes[1].idempotency.header': unknown key"},
      {"[[routes]]\nprefix = \"/v1\"\nlimits = 5\n",
       "key 'routes[1].limits': expected a table, got integer"},
      {"[[routes]]\nprefix = \"/v1\"\nidempotency = { methods = [\"GET\"] }\n",
       "key 'routes[1].idempotency.methods': GET is a safe method"},
      {"[[routes]]\nprefix = \"/v1\"\nlimits = { max_response_body = \"2GiB\" }\n",
       "key 'routes[1].limits.max_response_body': must be at most 1GiB"},
      {"[[routes]]\nprefix = \"/v1\"\nidempotency = { lease = \"20s\" }\n",
       "routes.toml:3: key 'routes[1].idempotency.lease': (20s) of routes[1] (prefix \"/v1\") must "
       "be longer than upstream.connect_timeout + upstream.response_timeout (5s + 20s = 25s)"},
      {"routes = 3\n", "key 'routes': expected [[routes]] tables"},
  };
  for (const BadRoute& c : cases) {
    ConfigResult r = ParseConfig(c.toml, "routes.toml");
    EXPECT_FALSE(r.ok()) << c.toml;
    EXPECT_NE(r.error.find(c.message), std::string::npos) << r.error;
  }
}

TEST(RoutesConfig, TakeoverPerRoute) {
  Config c = ParseOk("[[routes]]\nprefix = \"/v1/payments\"\nidempotency = { takeover = false }\n");
  EXPECT_TRUE(c.idempotency.takeover);
  EXPECT_FALSE(c.routes[0].effective->idempotency.takeover);
}

}  // namespace
}  // namespace idemgate

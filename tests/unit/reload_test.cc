// Config reload: live keys change, restart-only keys keep their running value and are named.
#include "proxy/reload.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace idemgate {
namespace {

bool Names(const ReloadPlan& plan, const std::string& key) {
  return std::find(plan.ignored.begin(), plan.ignored.end(), key) != plan.ignored.end();
}

TEST(Reload, LiveKeysTakeEffect) {
  Config running;
  Config next;
  next.limits.max_request_body = 4096;
  next.limits.client_timeout_ms = 1234;
  next.upstream.response_timeout_ms = 7000;
  next.idempotency.require_key = {"/v1/"};
  next.admin.token = "t2";
  ReloadPlan plan = PlanReload(running, next);
  EXPECT_TRUE(plan.ignored.empty());
  EXPECT_EQ(plan.config->limits.max_request_body, 4096u);
  EXPECT_EQ(plan.config->limits.client_timeout_ms, 1234);
  EXPECT_EQ(plan.config->upstream.response_timeout_ms, 7000);
  EXPECT_EQ(plan.config->idempotency.require_key, std::vector<std::string>{"/v1/"});
  EXPECT_EQ(plan.config->admin.token, "t2");
}

TEST(Reload, RestartOnlyKeysKeepRunningValuesAndAreNamed) {
  Config running;
  running.listen.addr = {"0.0.0.0", 8080};
  Config next;
  next.listen.address = "127.0.0.1:9999";
  next.listen.addr = {"127.0.0.1", 9999};
  next.store.path = "/elsewhere";
  next.server.workers = 7;
  next.scope.secret = "new-secret";
  next.limits.idle_timeout_ms = 5;
  ReloadPlan plan = PlanReload(running, next);
  EXPECT_TRUE(Names(plan, "listen.address"));
  EXPECT_TRUE(Names(plan, "store.path"));
  EXPECT_TRUE(Names(plan, "server.workers"));
  EXPECT_TRUE(Names(plan, "scope.secret (file contents)"));
  EXPECT_EQ(plan.config->listen.addr.port, 8080);
  EXPECT_EQ(plan.config->store.path, running.store.path);
  EXPECT_EQ(plan.config->server.workers, running.server.workers);
  EXPECT_EQ(plan.config->scope.secret, "");
  EXPECT_EQ(plan.config->limits.idle_timeout_ms, 5);  // live keys still apply
}

}  // namespace
}  // namespace idemgate

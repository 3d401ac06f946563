// SPDX-License-Identifier: Apache-2.0
// Config reload: live keys change, restart-only keys keep their running value and are named.
#include "proxy/ops/reload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "conf/config_keys.h"
#include "proxy/ops/gateway.h"

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

// The keys that decide which requests are guarded and how they are fingerprinted
// wait for a restart (changed under live records, a retry would pass through or get 422).
TEST(Reload, GuardAndFingerprintKeysAreRestartOnly) {
  Config running;
  Config next;
  next.idempotency.header = "X-Other-Key";
  next.idempotency.methods = {"POST"};
  next.idempotency.fingerprint_headers = {"x-account"};
  next.idempotency.require_key = {"/v1/"};  // live: it only adds 400s, never a passthrough
  ReloadPlan plan = PlanReload(running, next);
  EXPECT_TRUE(Names(plan, "idempotency.header"));
  EXPECT_TRUE(Names(plan, "idempotency.methods"));
  EXPECT_TRUE(Names(plan, "idempotency.fingerprint_headers"));
  EXPECT_EQ(plan.ignored.size(), 3u);
  EXPECT_EQ(plan.config->idempotency.header, "Idempotency-Key");
  EXPECT_EQ(plan.config->idempotency.methods, running.idempotency.methods);
  EXPECT_TRUE(plan.config->idempotency.fingerprint_headers.empty());
  EXPECT_EQ(plan.config->idempotency.require_key, std::vector<std::string>{"/v1/"});
}

// The plan is derived from the key table: every restart-only key, changed alone, is named and
// kept; every live key, changed alone, applies and is not named.
TEST(Reload, EveryKeyFollowsItsTableRow) {
  for (const conf::KeySpec& key : conf::ConfigKeys()) {
    Config running;
    Config next;
    std::visit(
        [](auto* value) {
          using T = std::remove_pointer_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            *value = !*value;
          } else if constexpr (std::is_same_v<T, std::string>) {
            *value += "-changed";
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            value->push_back("CHANGED");
          } else if constexpr (std::is_same_v<T, HostPort>) {
            value->port += 1;
          } else if constexpr (std::is_same_v<T, std::vector<HostPort>>) {
            value->push_back(HostPort{"changed", 1});
          } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
            (*value)["changed"] = "CHANGED";
          } else {
            *value += 1;
          }
        },
        key.field(next));
    ReloadPlan plan = PlanReload(running, next);
    if (key.reload == conf::Reload::kRestart) {
      EXPECT_EQ(plan.ignored, std::vector<std::string>{key.Qualified()});
      EXPECT_TRUE(conf::SameValue(key.field, *plan.config, running)) << key.Qualified();
    } else {
      EXPECT_TRUE(plan.ignored.empty()) << key.Qualified();
      EXPECT_TRUE(conf::SameValue(key.field, *plan.config, next)) << key.Qualified();
    }
  }
}

// SIGHUP swaps the config on the main thread while the workers take snapshots: each snapshot is
// a whole config, never an older one than a snapshot taken before it, and (under
// scripts/test --tsan) the swap is no data race, which libstdc++ 12's
// std::atomic<std::shared_ptr>::load was (it unlocks with a relaxed store after reading).
TEST(Reload, WorkersSnapshotWhileAReloadSwapsTheConfig) {
  constexpr uint64_t kReloads = 2000;
  Gateway gateway;
  auto first = std::make_shared<Config>();
  first->limits.max_request_body = 1;
  gateway.SetConfig(std::move(first));
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([&] {
      uint64_t seen = 1;
      while (!done.load()) {
        uint64_t value = gateway.Snapshot()->limits.max_request_body;
        if (value < seen || value > kReloads) wrong.fetch_add(1);
        seen = value;
        std::this_thread::yield();
      }
    });
  }
  for (uint64_t n = 2; n <= kReloads; ++n) {
    auto next = std::make_shared<Config>();
    next->limits.max_request_body = n;
    gateway.SetConfig(std::move(next));
    std::this_thread::yield();
  }
  done.store(true);
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(gateway.Snapshot()->limits.max_request_body, kReloads);
}

Config ParseOk(const std::string& text) {
  ConfigResult r = ParseConfig(text, "groups.toml");
  EXPECT_TRUE(r.ok()) << r.error;
  return r.ok() ? *r.config : Config{};
}

// Named groups are built into the workers at start-up: a reload keeps them and says so.
TEST(ConfigGroups, NamedGroupsAreRestartOnly) {
  Config running = ParseOk("[upstreams.internal]\nurl = \"http://a:1\"\n");
  Config next = ParseOk("[upstreams.internal]\nurl = \"http://b:1\"\n");
  ReloadPlan plan = PlanReload(running, next);
  EXPECT_EQ(plan.ignored, std::vector<std::string>{"upstreams (named upstream groups)"});
  EXPECT_EQ(plan.config->FindUpstream("internal")->addr, (HostPort{"a", 1}));
  EXPECT_TRUE(PlanReload(running, running).ignored.empty());
}

}  // namespace
}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Recent guarded upstream times per route and worker thread, and the Retry-After they suggest.
#include "proxy/exchange/answer_estimate.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace idemgate {
namespace {

constexpr size_t kSamples = 32;     // the most recent times kept per route
constexpr size_t kMaxRoutes = 256;  // route configs tracked per worker (reloads make new ones)

struct RouteTimes {
  std::weak_ptr<const Config> route;  // the entry is stale once its config is gone
  std::array<int64_t, kSamples> us{};
  size_t count = 0;  // samples written so far (the ring holds min(count, kSamples))
};

// This worker's times, by the route's effective config (replaced on reload, so a reload starts
// the estimate over).
std::unordered_map<const Config*, RouteTimes>& Table() {
  thread_local std::unordered_map<const Config*, RouteTimes> table;
  return table;
}

// The entry of `route`, or null; a stale entry (another config at a reused address) is dropped.
RouteTimes* Find(const std::shared_ptr<const Config>& route) {
  auto& table = Table();
  auto it = table.find(route.get());
  if (it == table.end()) return nullptr;
  if (it->second.route.lock() != route) {
    table.erase(it);
    return nullptr;
  }
  return &it->second;
}

}  // namespace

void RecordGuardedUpstreamTime(const std::shared_ptr<const Config>& route, int64_t upstream_us) {
  if (!route || upstream_us < 0) return;
  RouteTimes* times = Find(route);
  if (times == nullptr) {
    auto& table = Table();
    if (table.size() >= kMaxRoutes) {
      std::erase_if(table, [](const auto& entry) { return entry.second.route.expired(); });
      if (table.size() >= kMaxRoutes) table.clear();
    }
    times = &table[route.get()];
    times->route = route;
  }
  times->us[times->count % kSamples] = upstream_us;
  ++times->count;
}

int64_t EstimateRetryAfterSeconds(const std::shared_ptr<const Config>& route, int64_t elapsed_ms,
                                  int64_t lease_left_s) {
  lease_left_s = std::max<int64_t>(1, lease_left_s);
  RouteTimes* times = route ? Find(route) : nullptr;
  if (times == nullptr || times->count == 0) return lease_left_s;
  const size_t n = std::min(times->count, kSamples);
  std::array<int64_t, kSamples> sorted = times->us;
  std::sort(sorted.begin(), sorted.begin() + n);
  const int64_t p90_ms = sorted[std::min(n - 1, (n * 9) / 10)] / 1000;
  const int64_t left_ms = p90_ms - std::max<int64_t>(0, elapsed_ms);
  const int64_t seconds = (left_ms + 999) / 1000;  // rounded up: never before the estimate
  return std::clamp<int64_t>(seconds, 1, lease_left_s);
}

}  // namespace idemgate

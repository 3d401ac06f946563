// Opens the store the configuration names (store.backend), so the gateway names no backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "conf/config.h"
#include "store/clock.h"
#include "store/store.h"

namespace idemgate {

struct StoreHooks {
  const Clock* clock = nullptr;  // the embedded store's clock (PostgreSQL uses its own)
  // The embedded store's group commits (ops, write µs), for metrics. Cheap, never blocking.
  std::function<void(size_t ops, int64_t write_us)> on_batch;
};

// "rocksdb" (creates store.path) or "postgres" (connects, creates the schema). On failure returns
// nullptr and sets *error.
std::unique_ptr<Store> OpenStore(const Config& config, const StoreHooks& hooks, std::string* error);

// A one-line description for the start-up log.
std::string DescribeStore(const Config& config);

}  // namespace idemgate

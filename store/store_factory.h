// SPDX-License-Identifier: Apache-2.0
// Opens the store the configuration names (store.backend), so the gateway names no backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conf/config.h"
#include "store/clock.h"
#include "store/sealed_store.h"
#include "store/store.h"

namespace idemgate {

struct StoreHooks {
  const Clock* clock = nullptr;  // the embedded store's clock (PostgreSQL uses its own)
  // The embedded store's group commits (ops, write µs), for metrics. Cheap, never blocking.
  std::function<void(size_t ops, int64_t write_us)> on_batch;
  // Set to the store that seals and opens (owned by the returned store, which it is), for the
  // key reload on SIGHUP and the per-key metrics.
  SealedStore** sealed = nullptr;
};

// "rocksdb" (creates store.path) or "postgres" (connects, creates the schema). On failure returns
// nullptr and sets *error.
std::unique_ptr<Store> OpenStore(const Config& config, const StoreHooks& hooks, std::string* error);

// SIGHUP: reads store.encryption's key files again and hands the new set to `sealed`. On a
// refused file, the running set stays and *error names it.
bool ReloadStoreKeys(SealedStore* sealed, const Config& config, std::string* error);

// --check-config: one line per key (id, file, whether it seals), or *error naming a refused file.
bool CheckStoreKeys(const Config& config, std::vector<std::string>* lines, std::string* error);

// A one-line description for the start-up log.
std::string DescribeStore(const Config& config);

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// RocksStore: the embedded Store over RocksDB, with one writer thread doing group commit.
// This header does not include RocksDB, so the gateway can open it without depending on it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "store/clock.h"
#include "store/store.h"

namespace idemgate {

struct RocksStoreOptions {
  std::string path;           // the database directory (created when missing)
  bool sync = true;           // every result is reported only after its WAL write is synced
  const Clock* clock = nullptr;  // not owned; must outlive the store
  size_t max_batch = 1024;    // the most ops decided and written in one group commit
  // Called on the writer thread after each group commit: ops in the batch, and how long the
  // (synced) write took. For metrics; must be cheap and must not block.
  std::function<void(size_t ops, int64_t write_us)> on_batch;
};

// Opens (or creates) the database. On failure returns nullptr and sets *error.
std::unique_ptr<Store> OpenRocksStore(const RocksStoreOptions& options, std::string* error);

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// PgStore: the Store over PostgreSQL, shared by every gateway instance configured with the same
// database (SPEC §11). libpq's non-blocking API on the store's own libevent thread, several
// connections; leases and expiry on the database clock. This header does not include libpq.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "store/store.h"

namespace idemgate {

struct PgStoreOptions {
  std::string dsn;      // libpq connection string (multi-host + target_session_attrs=read-write)
  int connections = 8;  // each runs one statement at a time
  int64_t cleanup_interval_ms = 60'000;  // how often expired rows are deleted (bounded batches)
  int64_t count_interval_ms = 10'000;    // how often ApproximateRecords is refreshed
  // Tests only: added to the database clock (not owned; must outlive the store). Moves time for
  // every statement this store sends, as if the database's clock had moved.
  const std::atomic<int64_t>* clock_offset_ms = nullptr;
};

// Connects, creates the schema when absent (refusing an unknown version) and starts the store's
// thread. On failure returns nullptr and sets *error.
std::unique_ptr<Store> OpenPgStore(const PgStoreOptions& options, std::string* error);

}  // namespace idemgate

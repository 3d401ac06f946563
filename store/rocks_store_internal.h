// SPDX-License-Identifier: Apache-2.0
// Hooks into RocksStore for tests and tools that already link RocksDB (the gateway must not).
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "store/rocks_store.h"

namespace idemgate {

// Like OpenRocksStore, with a custom Env (fault injection); env == nullptr means the default.
std::unique_ptr<Store> OpenRocksStoreWithEnv(const RocksStoreOptions& options, rocksdb::Env* env,
                                             std::string* error);

// The underlying database of a RocksStore (nullptr for another Store or once closed). For raw
// reads/writes in tests; writes through it bypass the writer's ordering.
rocksdb::DB* RocksStoreDb(Store* store);

// Store::FindByKeyHash over `db`: every record key whose SHA-256 starts with the 8 bytes that
// `key_hash` (16 hex digits) names; live records only (`now_ms`).
StoreStatus ScanRocksKeyHash(rocksdb::DB* db, TimeMs now_ms, std::string_view key_hash,
                             size_t limit, std::vector<KeyHashMatch>* out);

// Compacts the whole key range (runs the TTL compaction filter over every record).
rocksdb::Status CompactRocksStore(Store* store);

}  // namespace idemgate

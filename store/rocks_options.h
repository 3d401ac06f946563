// RocksDB options for the store, and how RocksDB statuses map to store codes.
#pragma once

#include <rocksdb/compaction_filter.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include "store/store.h"

namespace idemgate {

StoreStatus MapStatus(const rocksdb::Status& s);

// The store's database options; `env` nullptr means the default Env. `filter` must outlive the DB.
rocksdb::Options MakeDbOptions(rocksdb::Env* env, const rocksdb::CompactionFilter* filter);

}  // namespace idemgate

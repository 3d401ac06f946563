// SPDX-License-Identifier: Apache-2.0
// RocksDB options for the store, and how RocksDB statuses map to store codes.
#pragma once

#include <rocksdb/compaction_filter.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include <string>

#include "store/store.h"

namespace idemgate {

StoreStatus MapStatus(const rocksdb::Status& s);

// How the store's levels are sized. kDynamic: RocksDB sizes each level from the last one
// (level_compaction_dynamic_level_bytes), which keeps compaction's cost per write flat as the
// store grows; stores created by this version use it. kStatic: RocksDB's fixed level targets,
// kept for a store created before (RocksDB 7.x has no migration between the two short of a full
// manual compaction, and the records' TTL turns a store over anyway).
enum class LevelLayout { kStatic, kDynamic };

// The meta file (meta_file.h) that records a store's layout, and its value for kDynamic.
inline constexpr const char* kLayoutMetaName = "layout";
inline constexpr const char* kDynamicLayoutValue = "dynamic-levels";

// The store's database options; `env` nullptr means the default Env. `filter` must outlive the DB.
rocksdb::Options MakeDbOptions(rocksdb::Env* env, const rocksdb::CompactionFilter* filter,
                               LevelLayout layout);

// The layout for the store in `dir`: its meta file's, else kDynamic for a new store (no
// database yet: the meta file is written then) and kStatic for a store created before.
StoreStatus ChooseLevelLayout(const std::string& dir, LevelLayout* layout);

}  // namespace idemgate

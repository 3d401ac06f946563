// SPDX-License-Identifier: Apache-2.0
// TtlCompactionFilter: drops expired records during RocksDB compaction, from the header alone.
#pragma once

#include <rocksdb/compaction_filter.h>

#include "store/clock.h"

namespace idemgate {

// Thread-safe and stateless apart from the clock (not owned; must outlive the DB). Drops a value
// iff its header decodes and the clock says it expired; keeps anything it cannot decode.
class TtlCompactionFilter final : public rocksdb::CompactionFilter {
 public:
  explicit TtlCompactionFilter(const Clock* clock) : clock_(clock) {}

  bool Filter(int level, const rocksdb::Slice& key, const rocksdb::Slice& existing_value,
              std::string* new_value, bool* value_changed) const override;
  const char* Name() const override { return "idemgate.TtlCompactionFilter"; }

 private:
  const Clock* clock_;
};

}  // namespace idemgate

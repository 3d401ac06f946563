// SPDX-License-Identifier: Apache-2.0
// TtlCompactionFilter: drops a value iff its record header says it expired.
#include "store/ttl_filter.h"

#include <string_view>

#include "store/record.h"

namespace idemgate {

bool TtlCompactionFilter::Filter(int /*level*/, const rocksdb::Slice& /*key*/,
                                 const rocksdb::Slice& existing_value, std::string* /*new_value*/,
                                 bool* /*value_changed*/) const {
  auto header = DecodeRecordHeader(std::string_view(existing_value.data(), existing_value.size()));
  if (!header.has_value()) return false;  // keep what we cannot read
  return clock_->NowMs() >= header->expires_ms;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
#include "store/rocks_version.h"

#include <rocksdb/version.h>

namespace idemgate {

std::string RocksDbVersion() {
  return std::to_string(ROCKSDB_MAJOR) + "." + std::to_string(ROCKSDB_MINOR) + "." +
         std::to_string(ROCKSDB_PATCH);
}

}  // namespace idemgate

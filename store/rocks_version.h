// SPDX-License-Identifier: Apache-2.0
// The RocksDB version this binary was built against, for --version and build_info.
#pragma once

#include <string>

namespace idemgate {

std::string RocksDbVersion();  // "7.8.3"

}  // namespace idemgate

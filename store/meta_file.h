// SPDX-License-Identifier: Apache-2.0
// Meta values (the settings signature) of a store kept in its directory, one small file per name
// ("IDEMGATE-META-<name>"), written atomically and durably. Beside the database, never inside it:
// no record key can reach them, compaction never sees them, and writing one does not change the
// records' write-ahead log.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "store/store.h"

namespace idemgate {

// nullopt in *value when the file does not exist.
StoreStatus ReadMetaFile(const std::string& dir, std::string_view name,
                         std::optional<std::string>* value);
// Writes NAME.tmp, fsyncs it, renames it over NAME and fsyncs the directory.
StoreStatus WriteMetaFile(const std::string& dir, std::string_view name, std::string_view value);

}  // namespace idemgate

// Meta values (the settings signature) beside the records in one key space, never mistaken for a
// record: the key and value encodings, apart from any store implementation.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace idemgate {

// A meta key is shorter than 32 bytes, and a record key (MakeRecordKey: a 32-byte scope id plus
// the key) never is, so the two can never be equal. nullopt for an empty or too long name.
std::optional<std::string> MetaKey(std::string_view name);

// The stored value starts with a tag whose first byte is not kRecordFormatVersion, so the TTL
// compaction filter (which drops only what decodes as an expired record) always keeps it.
std::string EncodeMetaValue(std::string_view value);
// nullopt when `raw` does not carry the tag.
std::optional<std::string> DecodeMetaValue(std::string_view raw);

}  // namespace idemgate

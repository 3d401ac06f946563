// Meta key and value encodings (see meta_key.h).
#include "store/meta_key.h"

#include "store/record.h"
#include "store/store.h"

namespace idemgate {
namespace {

constexpr std::string_view kKeyPrefix("\0idemgate-meta:", 15);
constexpr std::string_view kValueTag = "idemgate-meta\n";
static_assert(kKeyPrefix.size() + Store::kMaxMetaName < sizeof(ScopeId));
static_assert(kValueTag[0] != static_cast<char>(kRecordFormatVersion));

}  // namespace

std::optional<std::string> MetaKey(std::string_view name) {
  if (name.empty() || name.size() > Store::kMaxMetaName) return std::nullopt;
  return std::string(kKeyPrefix) + std::string(name);
}

std::string EncodeMetaValue(std::string_view value) {
  return std::string(kValueTag) + std::string(value);
}

std::optional<std::string> DecodeMetaValue(std::string_view raw) {
  if (raw.substr(0, kValueTag.size()) != kValueTag) return std::nullopt;
  return std::string(raw.substr(kValueTag.size()));
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Store::FindByKeyHash for the embedded store: a scan of every record key, hashed as the access
// log hashes it (SHA-256 of scope id || key, its first 8 bytes).
#include <openssl/evp.h>

#include <cstring>

#include "store/rocks_store_internal.h"

namespace idemgate {
namespace {

// The 8 bytes that 16 hex digits name; false when `hex` is not that.
bool ParseKeyHash(std::string_view hex, unsigned char out[8]) {
  if (hex.size() != 16) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (int i = 0; i < 8; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

StoreStatus ScanRocksKeyHash(rocksdb::DB* db, TimeMs now_ms, std::string_view key_hash,
                             size_t limit, std::vector<KeyHashMatch>* out) {
  unsigned char want[8];
  if (!ParseKeyHash(key_hash, want)) {
    return {StoreCode::kIoError, "key_hash must be 16 hex digits"};
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  rocksdb::ReadOptions read;
  read.fill_cache = false;  // a scan must not evict the records the data plane reads
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
  ScopeId scope{};
  for (it->SeekToFirst(); it->Valid() && out->size() < limit; it->Next()) {
    rocksdb::Slice key = it->key();
    if (key.size() <= scope.size()) continue;  // not a record key
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
    EVP_DigestUpdate(ctx.get(), key.data(), key.size());
    EVP_DigestFinal_ex(ctx.get(), md, &len);
    if (std::memcmp(md, want, sizeof(want)) != 0) continue;
    std::optional<Record> record =
        DecodeRecord(std::string_view(it->value().data(), it->value().size()));
    if (!record || record->ExpiredAt(now_ms)) continue;
    KeyHashMatch match;
    std::memcpy(match.scope.data(), key.data(), scope.size());
    match.key.assign(key.data() + scope.size(), key.size() - scope.size());
    match.record = std::move(*record);
    out->push_back(std::move(match));
  }
  if (!it->status().ok()) return {StoreCode::kIoError, it->status().ToString()};
  return {};
}

}  // namespace idemgate

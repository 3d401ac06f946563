// SPDX-License-Identifier: Apache-2.0
// What replays share. A completed record never changes until it expires or an admin deletes it,
// so its stored response is kept once, immutable, in a bounded cache shared by every worker, and
// every replay sends those same bytes by reference: N clients replaying one 8 MB answer hold
// 8 MB, not N x 8 MB. The store is wrapped (CachingStore) so that a delete evicts.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "store/store.h"

namespace idemgate {

struct CachedReplay {
  Fingerprint fingerprint{};
  TimeMs expires_ms = 0;
  std::shared_ptr<const StoredResponse> response;
  TimeMs stored_ms = 0;  // when the response was stored (R6: Age); 0 = not known
  // Encryption on (E3): the plain F1 digest of a request that matched the stored (keyed)
  // fingerprint, so that a replay from memory compares plain digests without an HMAC. Memory
  // only, beside the opened answer the cache holds anyway; never stored.
  std::optional<Fingerprint> plain;
};

// Thread-safe LRU of completed records, bounded in bytes (bodies, headers and keys).
class ReplayCache {
 public:
  explicit ReplayCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The cached completed record for (scope, key), unless absent or expired at `now`.
  std::optional<CachedReplay> Find(const ScopeId& scope, std::string_view key, TimeMs now);

  // Read before reading a record from the store; Keep takes it back.
  uint64_t generation() const;

  // `record` (completed) as a shared response to answer with. It is also cached, unless a
  // delete came since `generation` was read (it may be gone already) or it is too large (over a
  // quarter of the capacity). When the record is cached already, the cached response is
  // returned (one copy for everyone). `plain`: the F1 digest of the request that matched it
  // (CachedReplay::plain), when encryption keys the stored one.
  std::shared_ptr<const StoredResponse> Keep(const ScopeId& scope, std::string_view key,
                                             Record record, uint64_t generation,
                                             std::optional<Fingerprint> plain = std::nullopt);

  // Evicts (scope, key); Keep calls that read the store before this will not cache.
  void Erase(const ScopeId& scope, std::string_view key);

  size_t bytes() const;
  size_t entries() const;

 private:
  struct Entry {
    std::string key;
    CachedReplay replay;
    size_t bytes = 0;
  };
  void EraseLocked(const std::string& record_key);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first; guarded by mu_
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;  // guarded by mu_
  size_t bytes_ = 0;                                                   // guarded by mu_
  uint64_t generation_ = 0;                                            // guarded by mu_
};

// The store as the gateway sees it: everything goes to `inner`; a delete also evicts from the
// cache (when asked and again once durable, so a read racing with it cannot re-cache it).
class CachingStore : public Store {
 public:
  CachingStore(Store* inner, ReplayCache* cache) : inner_(inner), cache_(cache) {}

  void Claim(ClaimRequest request, ClaimCallback done) override;
  void Complete(ClaimToken token, StoredResponse response, StatusCallback done) override;
  void Release(ClaimToken token, StatusCallback done) override;
  LookupResult Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) override;
  void Delete(const ScopeId& scope, std::string key, StatusCallback done) override;
  StoreStatus GetMeta(std::string_view name, std::optional<std::string>* value) override {
    return inner_->GetMeta(name, value);
  }
  StoreStatus PutMeta(std::string_view name, std::string_view value) override {
    return inner_->PutMeta(name, value);
  }
  uint64_t ApproximateRecords() override { return inner_->ApproximateRecords(); }
  StoreStatus Checkpoint(const std::string& dir) override { return inner_->Checkpoint(dir); }
  StoreStatus FindByKeyHash(std::string_view key_hash, size_t limit,
                            std::vector<KeyHashMatch>* out) override {
    return inner_->FindByKeyHash(key_hash, limit, out);
  }
  void Close() override { inner_->Close(); }

 private:
  Store* inner_;
  ReplayCache* cache_;
};

}  // namespace idemgate

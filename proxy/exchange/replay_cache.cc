// SPDX-License-Identifier: Apache-2.0
// ReplayCache and CachingStore (see replay_cache.h).
#include "proxy/exchange/replay_cache.h"

namespace idemgate {

namespace {
size_t SizeOf(const std::string& key, const StoredResponse& response) {
  size_t bytes = key.size() + response.reason.size() + response.body.size() + 128;
  for (const auto& [name, value] : response.headers) bytes += name.size() + value.size() + 64;
  return bytes;
}
}  // namespace

std::optional<CachedReplay> ReplayCache::Find(const ScopeId& scope, std::string_view key,
                                              TimeMs now) {
  std::string record_key = MakeRecordKey(scope, key);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(record_key);
  if (it == index_.end()) return std::nullopt;
  if (now >= it->second->replay.expires_ms) {
    EraseLocked(record_key);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->replay;
}

uint64_t ReplayCache::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

std::shared_ptr<const StoredResponse> ReplayCache::Keep(const ScopeId& scope, std::string_view key,
                                                        Record record, uint64_t generation,
                                                        std::optional<Fingerprint> plain) {
  std::string record_key = MakeRecordKey(scope, key);
  size_t bytes = SizeOf(record_key, record.response);
  auto response = std::make_shared<const StoredResponse>(std::move(record.response));
  if (record.state != RecordState::kCompleted || bytes > capacity_ / 4) return response;
  std::lock_guard<std::mutex> lock(mu_);
  if (generation != generation_) return response;
  if (auto it = index_.find(record_key); it != index_.end()) {
    if (it->second->replay.fingerprint == record.fingerprint) return it->second->replay.response;
    EraseLocked(record_key);
  }
  lru_.push_front(Entry{
      record_key,
      {record.fingerprint, record.expires_ms, response, StoredAtMs(record), std::move(plain)},
      bytes});
  index_[record_key] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > capacity_ && !lru_.empty()) EraseLocked(lru_.back().key);
  return response;
}

void ReplayCache::Erase(const ScopeId& scope, std::string_view key) {
  std::string record_key = MakeRecordKey(scope, key);
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  EraseLocked(record_key);
}

void ReplayCache::EraseLocked(const std::string& record_key) {
  auto it = index_.find(record_key);
  if (it == index_.end()) return;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
}

size_t ReplayCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ReplayCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

void CachingStore::Claim(ClaimRequest request, ClaimCallback done) {
  inner_->Claim(std::move(request), std::move(done));
}

void CachingStore::Complete(ClaimToken token, StoredResponse response, StatusCallback done) {
  inner_->Complete(std::move(token), std::move(response), std::move(done));
}

void CachingStore::Release(ClaimToken token, StatusCallback done) {
  inner_->Release(std::move(token), std::move(done));
}

LookupResult CachingStore::Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) {
  return inner_->Lookup(scope, key, mode);
}

void CachingStore::Delete(const ScopeId& scope, std::string key, StatusCallback done) {
  cache_->Erase(scope, key);
  inner_->Delete(scope, key,
                 [cache = cache_, scope, key, done = std::move(done)](StoreStatus status) {
                   cache->Erase(scope, key);
                   done(std::move(status));
                 });
}

}  // namespace idemgate

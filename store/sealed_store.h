// SPDX-License-Identifier: Apache-2.0
// A Store that seals every response it stores and opens every response it returns (SPEC §13),
// over any backend: the backends keep sealed bytes where they kept a response, and nothing above
// this store sees a key or the sealed format. Records stored in clear (before encryption was
// turned on) are returned as they are.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/sealing.h"
#include "store/store.h"

namespace idemgate {

// Per key id, what this process did with it (for metrics: when is a retired key unneeded).
struct SealKeyStats {
  std::string id;
  bool loaded = false;
  bool active = false;
  uint64_t seals = 0;
  uint64_t opens = 0;
  uint64_t failures = 0;          // records that did not open (E5)
  int64_t last_seal_unix_ms = 0;  // 0: not since this process started
};

class SealedStore : public Store {
 public:
  SealedStore(std::unique_ptr<Store> inner, std::shared_ptr<const SealKeys> keys);

  // SIGHUP: the new set opens and seals from now on; the old one is cleansed when the last
  // operation using it is done.
  void SetKeys(std::shared_ptr<const SealKeys> keys);
  std::vector<SealKeyStats> Stats() const;
  // Prometheus text: idemgate_store_key_* per key id.
  std::string RenderMetrics() const;

  void Claim(ClaimRequest request, ClaimCallback done) override;
  void Complete(ClaimToken token, StoredResponse response, StatusCallback done) override;
  void Release(ClaimToken token, StatusCallback done) override {
    inner_->Release(std::move(token), std::move(done));
  }
  LookupResult Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) override;
  void LookupAsync(const ScopeId& scope, std::string key, LookupCallback done) override;
  void Delete(const ScopeId& scope, std::string key, StatusCallback done) override {
    inner_->Delete(scope, std::move(key), std::move(done));
  }
  StoreStatus GetMeta(std::string_view name, std::optional<std::string>* value) override {
    return inner_->GetMeta(name, value);
  }
  StoreStatus PutMeta(std::string_view name, std::string_view value) override {
    return inner_->PutMeta(name, value);
  }
  // The inner store's lookup, each match's answer opened as Lookup opens it (a match that does
  // not open fails the lookup: support must not be shown sealed bytes as an answer).
  StoreStatus FindByKeyHash(std::string_view key_hash, size_t limit,
                            std::vector<KeyHashMatch>* out) override;
  uint64_t ApproximateRecords() override { return inner_->ApproximateRecords(); }
  StoreStatus Checkpoint(const std::string& dir) override { return inner_->Checkpoint(dir); }
  bool Shared() const override { return inner_->Shared(); }
  void Close() override { inner_->Close(); }

 private:
  std::shared_ptr<const SealKeys> Keys() const;
  // A completed record's sealed response opened in place; false (and *status says why, naming
  // the key id) when it does not open. A record in clear is left as it is.
  bool OpenRecord(std::string_view record_key, Record* record, StoreStatus* status);
  void FinishClaim(std::string record_key, ClaimResult result, const ClaimCallback& done);
  void Count(const std::string& id, bool seal, bool failed);

  std::unique_ptr<Store> inner_;
  mutable std::mutex mu_;
  std::shared_ptr<const SealKeys> keys_;       // guarded by mu_
  std::map<std::string, SealKeyStats> stats_;  // guarded by mu_
};

}  // namespace idemgate

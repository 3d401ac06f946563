// SPDX-License-Identifier: Apache-2.0
// SealedStore: seals on Complete, opens what Claim and Lookup return (SPEC §13 E2-E6).
#include "store/sealed_store.h"

#include <cinttypes>

#include "common/log.h"
#include "store/clock.h"

namespace idemgate {
namespace {

// Prometheus label values: the ids are [A-Za-z0-9._-] (conf checks them), nothing to escape.
std::string Line(const char* name, const std::string& id, uint64_t value) {
  return std::string(name) + "{key=\"" + id + "\"} " + std::to_string(value) + "\n";
}

}  // namespace

SealedStore::SealedStore(std::unique_ptr<Store> inner, std::shared_ptr<const SealKeys> keys)
    : inner_(std::move(inner)) {
  SetKeys(std::move(keys));
}

void SealedStore::SetKeys(std::shared_ptr<const SealKeys> keys) {
  std::shared_ptr<const SealKeys> old;
  std::lock_guard lock(mu_);
  for (auto& [id, s] : stats_) s.loaded = s.active = false;
  for (const std::string& id : keys->ids()) {
    SealKeyStats& s = stats_[id];
    s.id = id;
    s.loaded = true;
    s.active = keys->active() != nullptr && keys->active()->id() == id;
  }
  old = std::exchange(keys_, std::move(keys));  // released (and cleansed) outside the lock
}

std::shared_ptr<const SealKeys> SealedStore::Keys() const {
  std::lock_guard lock(mu_);
  return keys_;
}

void SealedStore::Count(const std::string& id, bool seal, bool failed) {
  std::lock_guard lock(mu_);
  SealKeyStats& s = stats_[id];
  s.id = id;
  if (failed) {
    ++s.failures;
  } else if (seal) {
    ++s.seals;
    s.last_seal_unix_ms = WallNowMs();
  } else {
    ++s.opens;
  }
}

std::vector<SealKeyStats> SealedStore::Stats() const {
  std::lock_guard lock(mu_);
  std::vector<SealKeyStats> out;
  for (const auto& [id, s] : stats_) out.push_back(s);
  return out;
}

std::string SealedStore::RenderMetrics() const {
  std::string out =
      "# HELP idemgate_store_key_loaded 1 when the key id is loaded (it opens records).\n"
      "# TYPE idemgate_store_key_loaded gauge\n";
  const std::vector<SealKeyStats> stats = Stats();
  for (const SealKeyStats& s : stats) out += Line("idemgate_store_key_loaded", s.id, s.loaded);
  out +=
      "# HELP idemgate_store_key_active 1 for the key id that seals new records.\n"
      "# TYPE idemgate_store_key_active gauge\n";
  for (const SealKeyStats& s : stats) out += Line("idemgate_store_key_active", s.id, s.active);
  out +=
      "# HELP idemgate_store_key_seals_total Responses sealed with the key since start.\n"
      "# TYPE idemgate_store_key_seals_total counter\n";
  for (const SealKeyStats& s : stats) out += Line("idemgate_store_key_seals_total", s.id, s.seals);
  out +=
      "# HELP idemgate_store_key_opens_total Stored responses opened with the key since start.\n"
      "# TYPE idemgate_store_key_opens_total counter\n";
  for (const SealKeyStats& s : stats) out += Line("idemgate_store_key_opens_total", s.id, s.opens);
  out +=
      "# HELP idemgate_store_key_open_failures_total Records sealed with the key id that did "
      "not open (key not loaded, or bytes altered): answered 503.\n"
      "# TYPE idemgate_store_key_open_failures_total counter\n";
  for (const SealKeyStats& s : stats) {
    out += Line("idemgate_store_key_open_failures_total", s.id, s.failures);
  }
  out +=
      "# HELP idemgate_store_key_last_seal_seconds Unix time of the key's last seal since "
      "start (0 = none); no live record needs it once the longest ttl has passed since.\n"
      "# TYPE idemgate_store_key_last_seal_seconds gauge\n";
  for (const SealKeyStats& s : stats) {
    out += Line("idemgate_store_key_last_seal_seconds", s.id,
                static_cast<uint64_t>(s.last_seal_unix_ms / 1000));
  }
  return out;
}

bool SealedStore::OpenRecord(std::string_view record_key, Record* record, StoreStatus* status) {
  if (record->state != RecordState::kCompleted || !IsSealed(record->response)) return true;
  std::shared_ptr<const SealKeys> keys = Keys();
  std::string key_id;
  StoredResponse opened;
  const OpenResult result = OpenResponse(*keys, SealIdentity{record_key, record->attempt},
                                         record->response, &opened, &key_id);
  if (result == OpenResult::kOk) {
    record->response = std::move(opened);
    Count(key_id, false, false);
    return true;
  }
  Count(key_id.empty() ? std::string("?") : key_id, false, true);
  const std::string why =
      result == OpenResult::kNoKey
          ? "sealed with key \"" + key_id + "\", which is not loaded"
          : "sealed with key \"" + key_id + "\" but does not open (altered, or not this record's)";
  IDEMGATE_LOG_LIMITED(LogLevel::kError, "store", "a stored answer is %s; answered 503",
                       why.c_str());
  *status = {StoreCode::kSealed, "The stored answer for this key is " + why +
                                     ". It was not replayed and nothing was executed again; "
                                     "retry once the key is loaded."};
  return false;
}

void SealedStore::FinishClaim(std::string record_key, ClaimResult result,
                              const ClaimCallback& done) {
  if (result.status.ok() && result.outcome == ClaimOutcome::kReplay) {
    StoreStatus status;
    if (!OpenRecord(record_key, &result.record, &status)) {
      ClaimResult failed;
      failed.status = std::move(status);
      return done(std::move(failed));
    }
  } else if (IsSealed(result.record.response)) {
    result.record.response = StoredResponse{};  // a mismatch needs only the fingerprint
  }
  done(std::move(result));
}

// E3: a record written before encryption holds the plain fingerprint. When it comes back as a
// mismatch on exactly that, the claim is made again as it was written (the backend's one
// atomic step decides, as it did before encryption).
void SealedStore::Claim(ClaimRequest request, ClaimCallback done) {
  std::string record_key = MakeRecordKey(request.scope, request.key);
  std::optional<Fingerprint> legacy = std::exchange(request.legacy_fingerprint, std::nullopt);
  if (!legacy) {  // the common case: nothing to claim again, so no copy of the request is kept
    return inner_->Claim(std::move(request), [this, record_key = std::move(record_key),
                                              done = std::move(done)](ClaimResult result) mutable {
      FinishClaim(std::move(record_key), std::move(result), done);
    });
  }
  ClaimRequest as_written = request;
  as_written.fingerprint = *legacy;
  inner_->Claim(std::move(request), [this, record_key = std::move(record_key),
                                     as_written = std::move(as_written),
                                     done = std::move(done)](ClaimResult result) mutable {
    if (result.status.ok() && result.outcome == ClaimOutcome::kMismatch &&
        result.record.fingerprint == as_written.fingerprint) {
      return inner_->Claim(std::move(as_written), [this, record_key, done](ClaimResult again) {
        FinishClaim(record_key, std::move(again), done);
      });
    }
    FinishClaim(std::move(record_key), std::move(result), done);
  });
}

void SealedStore::Complete(ClaimToken token, StoredResponse response, StatusCallback done) {
  std::shared_ptr<const SealKeys> keys = Keys();
  if (keys->active() == nullptr)
    return inner_->Complete(std::move(token), std::move(response), std::move(done));
  std::optional<StoredResponse> sealed =
      SealResponse(*keys->active(), SealIdentity{token.record_key, token.attempt}, response);
  if (!sealed) return done({StoreCode::kIoError, "sealing the response failed (OpenSSL)"});
  Count(keys->active()->id(), true, false);
  inner_->Complete(std::move(token), std::move(*sealed), std::move(done));
}

// A record that does not open is a read error here: the caller falls back to Claim, which
// answers 503 naming the key.
LookupResult SealedStore::Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) {
  LookupResult result = inner_->Lookup(scope, key, mode);
  if (result.outcome != LookupOutcome::kFound) return result;
  StoreStatus status;
  if (!OpenRecord(MakeRecordKey(scope, key), &result.record, &status)) {
    return LookupResult{LookupOutcome::kError, Record{}, result.now_ms};
  }
  return result;
}

StoreStatus SealedStore::FindByKeyHash(std::string_view key_hash, size_t limit,
                                       std::vector<KeyHashMatch>* out) {
  StoreStatus status = inner_->FindByKeyHash(key_hash, limit, out);
  if (!status.ok()) return status;
  for (KeyHashMatch& match : *out) {
    if (!OpenRecord(MakeRecordKey(match.scope, match.key), &match.record, &status)) {
      out->clear();
      return status;
    }
  }
  return {};
}

void SealedStore::LookupAsync(const ScopeId& scope, std::string key, LookupCallback done) {
  std::string record_key = MakeRecordKey(scope, key);
  inner_->LookupAsync(
      scope, std::move(key),
      [this, record_key = std::move(record_key), done = std::move(done)](LookupResult result) {
        StoreStatus status;
        if (result.outcome == LookupOutcome::kFound &&
            !OpenRecord(record_key, &result.record, &status)) {
          result = LookupResult{LookupOutcome::kError, Record{}, result.now_ms};
        }
        done(std::move(result));
      });
}

}  // namespace idemgate

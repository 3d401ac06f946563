// SPDX-License-Identifier: Apache-2.0
// Encryption at rest (SPEC §13): the key files, and sealing a stored response under the record's
// identity with AES-256-GCM. Only store/ sees keys and the sealed format (docs/encryption.md).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/record.h"

namespace idemgate {

inline constexpr size_t kSealKeyBytes = 32;

// One loaded key. Its bytes and the keys derived from it are cleansed when it is released.
class SealKey {
 public:
  SealKey(std::string id, const std::array<uint8_t, kSealKeyBytes>& master);
  ~SealKey();
  SealKey(const SealKey&) = delete;
  SealKey& operator=(const SealKey&) = delete;

  const std::string& id() const { return id_; }
  const uint8_t* master() const { return master_.data(); }
  const uint8_t* siv_key() const { return siv_key_.data(); }

 private:
  std::string id_;
  std::array<uint8_t, kSealKeyBytes> master_{};
  std::array<uint8_t, kSealKeyBytes> siv_key_{};  // derives each record's salt (sealing.cc)
};

// The loaded key set: every key opens, `active` (null = seal nothing) also seals. Immutable once
// loaded; a reload builds a new one.
class SealKeys {
 public:
  const SealKey* Find(std::string_view id) const;
  const SealKey* active() const { return active_; }
  std::vector<std::string> ids() const;

 private:
  friend std::shared_ptr<const SealKeys> LoadSealKeys(const std::map<std::string, std::string>&,
                                                      const std::string&, std::string*);
  std::map<std::string, std::unique_ptr<SealKey>, std::less<>> keys_;
  const SealKey* active_ = nullptr;
};

// Reads one key file: a regular file owned by this process's user, no permission for group or
// others (0600, 0400), holding 64 hex digits and at most one trailing newline. The error names
// the file.
bool ReadKeyFile(const std::string& path, std::array<uint8_t, kSealKeyBytes>* key,
                 std::string* error);

// Every file of `keys` (id -> path); `active` ("" or one of the ids) seals. nullptr + *error when
// a file is refused.
std::shared_ptr<const SealKeys> LoadSealKeys(const std::map<std::string, std::string>& keys,
                                             const std::string& active, std::string* error);

// What a sealed response is bound to: its record's storage key (scope id + key) and attempt.
struct SealIdentity {
  std::string_view record_key;
  uint32_t attempt = 0;
};

// A sealed response, as the backends store it: status 0 (no answer has it), no reason and no
// headers, the body the sealed bytes (which start with the format marker and the key id).
bool IsSealed(const StoredResponse& response);
// The id of the key that sealed it ("" when not sealed or unreadable).
std::string SealedKeyId(const StoredResponse& response);

// nullopt only when OpenSSL fails (nothing may be stored then).
std::optional<StoredResponse> SealResponse(const SealKey& key, const SealIdentity& identity,
                                           const StoredResponse& plain);

enum class OpenResult {
  kOk,        // *out holds the response
  kNoKey,     // sealed by a key that is not loaded (*key_id names it)
  kRejected,  // does not open: altered, truncated, or bound to another record or attempt
};
OpenResult OpenResponse(const SealKeys& keys, const SealIdentity& identity,
                        const StoredResponse& sealed, StoredResponse* out, std::string* key_id);

}  // namespace idemgate

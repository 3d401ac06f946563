// SPDX-License-Identifier: Apache-2.0
// The idempotency record: what the store keeps for one (scope, key), and its binary encoding.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/clock.h"

namespace idemgate {

using Digest = std::array<uint8_t, 32>;  // a SHA-256 / HMAC-SHA-256 output
using Fingerprint = Digest;
using ScopeId = Digest;

enum class RecordState : uint8_t {
  kInFlight = 1,   // an attempt owns the record until lease_until_ms
  kCompleted = 2,  // the response is stored and is replayed until expires_ms
};

// A response exactly as it will be replayed: status line parts, end-to-end headers in order
// (hop-by-hop already removed, no Content-Length), and the body.
struct StoredResponse {
  int status = 0;
  std::string reason;  // reason phrase as the upstream sent it
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool operator==(const StoredResponse&) const = default;
};

struct Record {
  RecordState state = RecordState::kInFlight;
  uint32_t attempt = 0;     // +1 each time an execution is (re)started
  uint64_t owner = 0;       // random token of the attempt that owns the record
  Fingerprint fingerprint{};
  TimeMs created_ms = 0;
  TimeMs expires_ms = 0;      // the record counts as absent from this instant on
  TimeMs lease_until_ms = 0;  // in flight: a retry may take over from this instant on
  StoredResponse response;    // meaningful when state == kCompleted
  // When the response was stored (completed; R6's Age counts from it). 0: not known (a record
  // written before format 2, or by an older gateway): created_ms stands in.
  TimeMs completed_ms = 0;
  bool operator==(const Record&) const = default;

  bool ExpiredAt(TimeMs now) const { return now >= expires_ms; }
};

// When a completed record's response was stored: completed_ms, or (not known) its creation.
inline TimeMs StoredAtMs(const Record& record) {
  return record.completed_ms != 0 ? record.completed_ms : record.created_ms;
}

// The fixed header that starts every encoded value: enough for the TTL compaction filter.
struct RecordHeader {
  uint8_t version = 0;
  RecordState state = RecordState::kInFlight;
  TimeMs expires_ms = 0;
};

// 2 adds completed_ms after the fixed header of a completed record; 1 (still read) has none.
inline constexpr uint8_t kRecordFormatVersion = 2;

// Versioned binary encoding: fixed header first, then the stored response.
std::string EncodeRecord(const Record& record);
// nullopt for a truncated, corrupt or unknown-version value. Never crashes on any input.
std::optional<Record> DecodeRecord(std::string_view bytes);
std::optional<RecordHeader> DecodeRecordHeader(std::string_view bytes);

// The response part of the encoding alone (what store/sealing.cc seals); DecodeResponse rejects
// trailing bytes and never crashes on any input.
std::string EncodeResponse(const StoredResponse& response);
std::optional<StoredResponse> DecodeResponse(std::string_view bytes);

// Record key: scope id (32 bytes) followed by the key bytes.
std::string MakeRecordKey(const ScopeId& scope, std::string_view key);

}  // namespace idemgate

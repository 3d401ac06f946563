// SPDX-License-Identifier: Apache-2.0
// Record encoding: a versioned, little-endian, length-prefixed binary format with a fixed header.
//
// Layout (all integers little-endian):
//   fixed header (70 bytes):
//     version u8 | state u8 | attempt u32 | owner u64 | created i64 | expires i64 |
//     lease_until i64 | fingerprint[32]
//   version 2, completed records only: completed i64 (when the response was stored)
//   response:
//     status u16 | reason (u32 len + bytes) | header count u32 |
//     count x (name: u32 len + bytes, value: u32 len + bytes) | body (u32 len + bytes)
// Decoding checks every length against what is left and rejects trailing bytes.
#include "store/record.h"

#include <cstring>

namespace idemgate {
namespace {

constexpr size_t kHeaderSize = 1 + 1 + 4 + 8 + 8 + 8 + 8 + 32;

void PutFixed(std::string* out, uint64_t v, int bytes) {
  char buf[8];
  for (int i = 0; i < bytes; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(buf, bytes);
}

void PutString(std::string* out, std::string_view s) {
  PutFixed(out, s.size(), 4);
  out->append(s.data(), s.size());
}

// A bounds-checked cursor over the encoded bytes.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool Fixed(int bytes, uint64_t* v) {
    if (in_.size() < static_cast<size_t>(bytes)) return false;
    uint64_t r = 0;
    for (int i = 0; i < bytes; ++i) r |= uint64_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    in_.remove_prefix(bytes);
    *v = r;
    return true;
  }

  bool String(std::string* s) {
    uint64_t len = 0;
    if (!Fixed(4, &len) || in_.size() < len) return false;
    s->assign(in_.data(), len);
    in_.remove_prefix(len);
    return true;
  }

  bool Bytes(uint8_t* out, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(out, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }

  size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

bool ValidState(uint64_t s) {
  return s == static_cast<uint64_t>(RecordState::kInFlight) ||
         s == static_cast<uint64_t>(RecordState::kCompleted);
}

// Reads the fixed header into *r; false on short input, unknown version or bad state.
bool ReadHeader(Reader* in, Record* r, uint64_t* version) {
  uint64_t state, attempt, owner, created, expires, lease;
  if (!in->Fixed(1, version) || (*version != 1 && *version != kRecordFormatVersion)) return false;
  if (!in->Fixed(1, &state) || !ValidState(state)) return false;
  if (!in->Fixed(4, &attempt) || !in->Fixed(8, &owner) || !in->Fixed(8, &created) ||
      !in->Fixed(8, &expires) || !in->Fixed(8, &lease)) {
    return false;
  }
  if (!in->Bytes(r->fingerprint.data(), r->fingerprint.size())) return false;
  r->state = static_cast<RecordState>(state);
  r->attempt = static_cast<uint32_t>(attempt);
  r->owner = owner;
  r->created_ms = static_cast<TimeMs>(created);
  r->expires_ms = static_cast<TimeMs>(expires);
  r->lease_until_ms = static_cast<TimeMs>(lease);
  return true;
}

bool ReadResponse(Reader* in, StoredResponse* resp) {
  uint64_t status = 0, count = 0;
  if (!in->Fixed(2, &status) || !in->String(&resp->reason) || !in->Fixed(4, &count)) {
    return false;
  }
  resp->status = static_cast<int>(status);
  // Each header takes at least 8 bytes: a count larger than that is corrupt (and would
  // otherwise make us reserve absurd amounts of memory).
  if (count > in->left() / 8) return false;
  resp->headers.resize(count);
  for (auto& [name, value] : resp->headers) {
    if (!in->String(&name) || !in->String(&value)) return false;
  }
  return in->String(&resp->body);
}

void AppendResponse(std::string* out, const StoredResponse& resp) {
  PutFixed(out, static_cast<uint16_t>(resp.status), 2);
  PutString(out, resp.reason);
  PutFixed(out, resp.headers.size(), 4);
  for (const auto& [name, value] : resp.headers) {
    PutString(out, name);
    PutString(out, value);
  }
  PutString(out, resp.body);
}

}  // namespace

std::string EncodeRecord(const Record& record) {
  const StoredResponse& resp = record.response;
  size_t size = kHeaderSize + 8 + 2 + 4 + resp.reason.size() + 4 + 4 + resp.body.size();
  for (const auto& [name, value] : resp.headers) size += 8 + name.size() + value.size();
  std::string out;
  out.reserve(size);
  PutFixed(&out, kRecordFormatVersion, 1);
  PutFixed(&out, static_cast<uint8_t>(record.state), 1);
  PutFixed(&out, record.attempt, 4);
  PutFixed(&out, record.owner, 8);
  PutFixed(&out, static_cast<uint64_t>(record.created_ms), 8);
  PutFixed(&out, static_cast<uint64_t>(record.expires_ms), 8);
  PutFixed(&out, static_cast<uint64_t>(record.lease_until_ms), 8);
  out.append(reinterpret_cast<const char*>(record.fingerprint.data()), record.fingerprint.size());
  if (record.state == RecordState::kCompleted) {
    PutFixed(&out, static_cast<uint64_t>(record.completed_ms), 8);
  }
  AppendResponse(&out, resp);
  return out;
}

std::optional<Record> DecodeRecord(std::string_view bytes) {
  Reader in(bytes);
  Record r;
  uint64_t version = 0, completed = 0;
  if (!ReadHeader(&in, &r, &version)) return std::nullopt;
  if (version >= 2 && r.state == RecordState::kCompleted && !in.Fixed(8, &completed)) {
    return std::nullopt;
  }
  r.completed_ms = static_cast<TimeMs>(completed);
  if (!ReadResponse(&in, &r.response) || in.left() != 0) return std::nullopt;
  return r;
}

std::optional<RecordHeader> DecodeRecordHeader(std::string_view bytes) {
  if (bytes.size() < kHeaderSize) return std::nullopt;
  Reader in(bytes.substr(0, kHeaderSize));
  Record r;
  uint64_t version = 0;
  if (!ReadHeader(&in, &r, &version)) return std::nullopt;
  return RecordHeader{static_cast<uint8_t>(version), r.state, r.expires_ms};
}

std::string EncodeResponse(const StoredResponse& resp) {
  size_t size = 2 + 4 + resp.reason.size() + 4 + 4 + resp.body.size();
  for (const auto& [name, value] : resp.headers) size += 8 + name.size() + value.size();
  std::string out;
  out.reserve(size);
  AppendResponse(&out, resp);
  return out;
}

std::optional<StoredResponse> DecodeResponse(std::string_view bytes) {
  Reader in(bytes);
  StoredResponse resp;
  if (!ReadResponse(&in, &resp) || in.left() != 0) return std::nullopt;
  return resp;
}

std::string MakeRecordKey(const ScopeId& scope, std::string_view key) {
  std::string out;
  out.reserve(scope.size() + key.size());
  out.append(reinterpret_cast<const char*>(scope.data()), scope.size());
  out.append(key.data(), key.size());
  return out;
}

}  // namespace idemgate

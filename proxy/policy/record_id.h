// The fencing token a guarded request carries upstream (SPEC §12 A1): Idempotency-Attempt and
// Idempotency-Record. The record id is the first 16 bytes of SHA-256 over "idemgate-record-v1",
// a zero byte, the 32-byte scope id and the key, in lower-case hex: stable across attempts,
// instances and restarts, no secret in it, and the same the PostgreSQL schema computes
// (idemgate_record_id in store/pg_fence_sql.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/record.h"

namespace idemgate {

inline constexpr std::string_view kRecordIdDomain{"idemgate-record-v1\0", 19};

// 32 lower-case hex digits.
std::string RecordIdHex(const ScopeId& scope, std::string_view key);

// "Idempotency-Attempt: N\r\nIdempotency-Record: <id>\r\n", for SerializeUpstreamRequest.
std::string FenceHeaderLines(const ScopeId& scope, std::string_view key, uint32_t attempt);

}  // namespace idemgate

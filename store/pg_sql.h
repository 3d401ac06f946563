// SPDX-License-Identifier: Apache-2.0
// PgStore's SQL: the schema, the statements (SCALEOUT.md "Statements"), and the conversions
// between libpq's binary results and the store's types. No I/O here.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/record.h"
#include "store/store.h"

namespace idemgate::pg {

// 2: attempt fencing (SPEC §12; pg_fence_sql.cc). A version-1 database is upgraded in place;
// a gateway that knows only version 1 refuses a version-2 database at start-up.
inline constexpr int kSchemaVersion = 2;
// pg_advisory_xact_lock keys: schema creation, and the expired-row clean-up (one instance).
inline constexpr int64_t kSchemaLockKey = 0x1de49a7e0001;
inline constexpr int64_t kCleanupLockKey = 0x1de49a7e0002;
inline constexpr int kCleanupBatch = 5000;

// Start-up, one transaction: kSchemaBeginSql (locks, creates the version table, returns the
// version), then kSchemaCreateSql (the records table) and kFenceSchemaSql (version 2: the fence
// and takeover functions, the marks; sets the version), then COMMIT, only for a known version.
extern const char* const kSchemaBeginSql;
extern const char* const kSchemaCreateSql;
extern const char* const kFenceSchemaSql;

// $1 scope, $2 key, $3 fingerprint, $4 owner, $5 lease_ms, $6 ttl_ms, $7 clock offset ms.
// Never takes over: a row in flight with an expired lease comes back as it is, for kTakeoverSql.
extern const char* const kClaimSql;
// The same parameters: idemgate_take_over (pg_fence_sql.cc). The row, now, and the attempt a
// committed fence marked executed (0: none); no row when the record is gone.
extern const char* const kTakeoverSql;
// $1 scope, $2 key, $3 attempt, $4 owner, $5 status, $6 reason, $7 headers, $8 body,
// $9 retry (an earlier send's outcome is unknown: a completed row of mine counts as done).
extern const char* const kCompleteSql;
// $1 scope, $2 key, $3 owner (attempt 1: the row is deleted).
extern const char* const kReleaseFirstSql;
// $1 scope, $2 key, $3 attempt, $4 owner, $5 clock offset ms.
extern const char* const kReleaseTakeoverSql;
// $1 scope, $2 key, $3 clock offset ms.
extern const char* const kLookupSql;
// $1 scope, $2 key.
extern const char* const kDeleteSql;
// $1 clock offset ms. Deletes up to kCleanupBatch expired rows if this instance got the lock.
extern const char* const kCleanupSql;
// $1 clock offset ms. Deletes up to kCleanupBatch fence marks of records that are gone.
extern const char* const kFenceCleanupSql;
extern const char* const kCountSql;
// $1 name. / $1 name, $2 value. The start-up settings signature (Store::GetMeta/PutMeta).
extern const char* const kGetMetaSql;
extern const char* const kPutMetaSql;
// $1 key_hash (16 hex digits, text), $2 limit, $3 clock offset ms. Support's lookup by the
// access log's key_hash: live rows whose SHA-256(scope || key) starts with those 8 bytes, each
// row's columns (DecodeRow) then scope_id and idem_key. The index on IDEMGATE_PG_KEY_HASH
// (pg_schema.cc builds it at start-up) makes it an index read.
extern const char* const kKeyHashSql;
#define IDEMGATE_PG_KEY_HASH(t) "substr(sha256(" t "scope_id || " t "idem_key), 1, 8)"

// Every statement above, prepared on each connection as "s<index>" before it takes work.
struct Statement {
  const char* sql;
  std::vector<Oid> types;
};
const std::vector<Statement>& Statements();
// The prepared name of `sql` (one of the constants above); nullptr for another text.
const char* PreparedName(const char* sql);

// Parameters of one statement: binary bytea and int8, or text.
class Params {
 public:
  void Bytes(std::string_view b);
  void Int(int64_t v);  // sent as int8 (binary, network order)
  void Text(std::string_view s);
  void Bool(bool b);
  int count() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return ptrs_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }
  const Oid* types() const { return types_.data(); }
  void SetBool(int index, bool b);  // replaces a parameter added with Bool
  void Finish();  // call once after the last parameter (and after any Set), before sending

 private:
  std::vector<std::string> values_;
  std::vector<const char*> ptrs_;
  std::vector<int> lengths_, formats_;
  std::vector<Oid> types_;
};

// The row columns every record-returning statement selects, in this order.
// state int2, attempt int4, owner int8, fingerprint bytea, created_ms, expires_ms,
// lease_until_ms int8, resp_status int4, resp_reason bytea, resp_headers bytea, resp_body bytea,
// now_ms int8 (kTakeoverSql adds a 14th column). Returns false when the row is malformed.
bool DecodeRow(const PGresult* res, int row, Record* record, TimeMs* now_ms);

std::string EncodeHeaders(const std::vector<std::pair<std::string, std::string>>& headers);
bool DecodeHeaders(std::string_view bytes, std::vector<std::pair<std::string, std::string>>* out);

// Scope and key from a ClaimToken's record_key (MakeRecordKey's layout).
bool SplitRecordKey(std::string_view record_key, std::string_view* scope, std::string_view* key);

// The claim's outcome from the returned row (SCALEOUT.md): mine -> fresh/takeover, else
// mismatch, replay or in flight.
ClaimResult ClaimFromRow(const Record& row, TimeMs now_ms, const Fingerprint& fingerprint,
                         uint64_t owner, std::string record_key);

// A claim's row that only idemgate_take_over may decide: in flight with an expired lease, the
// same fingerprint, not mine, not expired.
bool NeedsTakeover(const Record& row, TimeMs now_ms, const Fingerprint& fingerprint,
                   uint64_t owner);

// kTakeoverSql's 14th column: the attempt a committed fence marked executed, or 0.
uint32_t FencedAttempt(const PGresult* res, int row);

}  // namespace idemgate::pg

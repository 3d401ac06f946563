// SPDX-License-Identifier: Apache-2.0
// PgStore's statements and the conversions between libpq's binary rows and the store's types.
#include "store/pg_sql.h"

#include <cstring>

#include "store/claim_rules.h"

namespace idemgate::pg {

// The database clock in ms; the offset is 0 in service (tests move time with it).
#define IDEMGATE_PG_NOW(offset) \
  "(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + " offset ")"

#define IDEMGATE_PG_ROW(t)                                                                    \
  t ".state::int2, " t ".attempt::int4, " t ".owner, " t ".fingerprint, " t ".created_ms, " t \
    ".expires_ms, " t ".lease_until_ms, coalesce(" t ".resp_status, 0)::int4, coalesce(" t    \
    ".resp_reason, ''::bytea), coalesce(" t ".resp_headers, ''::bytea), coalesce(" t          \
    ".resp_body, ''::bytea), coalesce(" t ".completed_ms, 0)"

const char* const kSchemaBeginSql =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(33140126138369);"  // kSchemaLockKey
    "CREATE TABLE IF NOT EXISTS idemgate_schema (version int NOT NULL);"
    "INSERT INTO idemgate_schema (version) SELECT 2"
    "  WHERE NOT EXISTS (SELECT 1 FROM idemgate_schema);"
    "SELECT max(version)::int4, count(*)::int4 FROM idemgate_schema;";

const char* const kSchemaCreateSql =
    "CREATE TABLE IF NOT EXISTS idemgate_records ("
    "  scope_id bytea NOT NULL, idem_key bytea NOT NULL,"
    "  state smallint NOT NULL, attempt int NOT NULL, owner bigint NOT NULL,"
    "  fingerprint bytea NOT NULL, created_ms bigint NOT NULL, expires_ms bigint NOT NULL,"
    "  lease_until_ms bigint NOT NULL, resp_status int, resp_reason bytea, resp_headers bytea,"
    "  resp_body bytea, PRIMARY KEY (scope_id, idem_key));"
    "CREATE INDEX IF NOT EXISTS idemgate_records_expires ON idemgate_records (expires_ms);"
    // R6 (Age): when the response was stored. Added in place, nullable, within schema version 1:
    // a gateway that does not know it still reads and writes the table (its completions leave
    // it NULL, and Age then counts from created_ms).
    "ALTER TABLE idemgate_records ADD COLUMN IF NOT EXISTS completed_ms bigint;"
    "CREATE TABLE IF NOT EXISTS idemgate_meta (name bytea PRIMARY KEY, value bytea NOT NULL);";

// One statement: the DO UPDATE always runs, so RETURNING reports the latest committed row,
// locked. E: the row expired (a fresh attempt 1 replaces it). Otherwise nothing changes: a row
// in flight with an expired lease is taken over by kTakeoverSql, which first asks whether a
// backend fenced the attempt (SPEC §12 A3). "Now" is EXCLUDED.created_ms: the database clock.
#define E "r.expires_ms <= EXCLUDED.created_ms"
const char* const kClaimSql =
    "INSERT INTO idemgate_records AS r (scope_id, idem_key, state, attempt, owner, fingerprint,"
    " created_ms, expires_ms, lease_until_ms)"
    " SELECT $1, $2, 1, 1, $4, $3, n.now, n.now + $6, n.now + $5"
    " FROM (SELECT " IDEMGATE_PG_NOW("$7") " AS now) n"
    " ON CONFLICT (scope_id, idem_key) DO UPDATE SET"
    " state = CASE WHEN " E " THEN 1 ELSE r.state END,"
    " attempt = CASE WHEN " E " THEN 1 ELSE r.attempt END,"
    " owner = CASE WHEN " E " THEN EXCLUDED.owner ELSE r.owner END,"
    " fingerprint = CASE WHEN " E " THEN EXCLUDED.fingerprint ELSE r.fingerprint END,"
    " created_ms = CASE WHEN " E " THEN EXCLUDED.created_ms ELSE r.created_ms END,"
    " expires_ms = CASE WHEN " E " THEN EXCLUDED.expires_ms ELSE r.expires_ms END,"
    " lease_until_ms = CASE WHEN " E " THEN EXCLUDED.lease_until_ms ELSE r.lease_until_ms END,"
    " resp_status = CASE WHEN " E " THEN NULL ELSE r.resp_status END,"
    " resp_reason = CASE WHEN " E " THEN NULL ELSE r.resp_reason END,"
    " resp_headers = CASE WHEN " E " THEN NULL ELSE r.resp_headers END,"
    " resp_body = CASE WHEN " E " THEN NULL ELSE r.resp_body END"
    " RETURNING " IDEMGATE_PG_ROW("r") ", " IDEMGATE_PG_NOW("$7");
#undef E

const char* const kCompleteSql =
    "UPDATE idemgate_records SET state = 2, resp_status = $5, resp_reason = $6,"
    " resp_headers = $7, resp_body = $8,"
    " completed_ms = CASE WHEN state = 1 THEN " IDEMGATE_PG_NOW("$10") " ELSE completed_ms END"
    " WHERE scope_id = $1 AND idem_key = $2 AND attempt = $3 AND owner = $4 AND owner <> 0"
    // Idempotent as on every store (claim_rules' CompletedBy): the same Complete again, from this
    // loop's resend ($9) or from the caller after a failure that had landed, is ok.
    " AND (state = 1 OR (state = 2 AND ($9 OR (resp_status = $5 AND resp_reason = $6"
    " AND resp_headers = $7 AND resp_body = $8))))";

const char* const kReleaseFirstSql =
    "DELETE FROM idemgate_records WHERE scope_id = $1 AND idem_key = $2 AND state = 1"
    " AND attempt = 1 AND owner = $3 AND owner <> 0";

const char* const kReleaseTakeoverSql =
    "UPDATE idemgate_records SET owner = 0, lease_until_ms = " IDEMGATE_PG_NOW("$5")
    " WHERE scope_id = $1 AND idem_key = $2 AND state = 1 AND attempt = $3 AND owner = $4"
    " AND owner <> 0";

const char* const kLookupSql =
    "SELECT " IDEMGATE_PG_ROW("r") ", n.now FROM idemgate_records r,"
    " (SELECT " IDEMGATE_PG_NOW("$3") " AS now) n"
    " WHERE r.scope_id = $1 AND r.idem_key = $2 AND r.expires_ms > n.now";

const char* const kDeleteSql = "DELETE FROM idemgate_records WHERE scope_id = $1 AND idem_key = $2";

// One statement: the transaction-scoped advisory lock lets one instance at a time clean up.
const char* const kCleanupSql =
    "WITH l AS (SELECT pg_try_advisory_xact_lock(33140126138370) AS got)"  // kCleanupLockKey
    " DELETE FROM idemgate_records WHERE ctid = ANY (ARRAY("
    "   SELECT ctid FROM idemgate_records WHERE expires_ms <= " IDEMGATE_PG_NOW(
        "$1") "   AND (SELECT got FROM l) LIMIT 5000))";  // kCleanupBatch

const char* const kGetMetaSql = "SELECT value FROM idemgate_meta WHERE name = $1";

const char* const kPutMetaSql =
    "INSERT INTO idemgate_meta (name, value) VALUES ($1, $2)"
    " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value";

// IDEMGATE_PG_KEY_HASH is the index's expression, word for word, so the planner uses it.
const char* const kKeyHashSql =
    "SELECT " IDEMGATE_PG_ROW("r") ", n.now, r.scope_id, r.idem_key FROM idemgate_records r,"
    " (SELECT " IDEMGATE_PG_NOW("$3") " AS now) n"
    " WHERE " IDEMGATE_PG_KEY_HASH("r.") " = decode($1, 'hex') AND r.expires_ms > n.now"
    " LIMIT $2";

const char* const kCountSql =
    "SELECT greatest(reltuples, 0)::int8 FROM pg_class WHERE oid = 'idemgate_records'::regclass";

const std::vector<Statement>& Statements() {
  constexpr Oid kBytea = 17, kInt8 = 20, kBool = 16;
  static const std::vector<Statement> all = {
      {kClaimSql, {kBytea, kBytea, kBytea, kInt8, kInt8, kInt8, kInt8}},
      {kCompleteSql, {kBytea, kBytea, kInt8, kInt8, kInt8, kBytea, kBytea, kBytea, kBool, kInt8}},
      {kReleaseFirstSql, {kBytea, kBytea, kInt8}},
      {kReleaseTakeoverSql, {kBytea, kBytea, kInt8, kInt8, kInt8}},
      {kLookupSql, {kBytea, kBytea, kInt8}},
      {kDeleteSql, {kBytea, kBytea}},
      {kCleanupSql, {kInt8}},
      {kCountSql, {}},
      {kGetMetaSql, {kBytea}},
      {kPutMetaSql, {kBytea, kBytea}},
      {kTakeoverSql, {kBytea, kBytea, kBytea, kInt8, kInt8, kInt8, kInt8}},
      {kFenceCleanupSql, {kInt8}},
      {kKeyHashSql, {25, kInt8, kInt8}},  // 25: text
  };
  return all;
}

const char* PreparedName(const char* sql) {
  static const char* const kNames[] = {"s0", "s1", "s2", "s3",  "s4",  "s5", "s6",
                                       "s7", "s8", "s9", "s10", "s11", "s12"};
  const std::vector<Statement>& all = Statements();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].sql == sql) return kNames[i];
  }
  return nullptr;
}

namespace {

void PutBe(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool GetBe(std::string_view* in, int bytes, uint64_t* v) {
  if (in->size() < static_cast<size_t>(bytes)) return false;
  *v = 0;
  for (int i = 0; i < bytes; ++i) *v = (*v << 8) | static_cast<uint8_t>((*in)[i]);
  in->remove_prefix(bytes);
  return true;
}

bool GetInt(const PGresult* res, int row, int col, int bytes, int64_t* out) {
  if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != bytes) return false;
  std::string_view v(PQgetvalue(res, row, col), bytes);
  uint64_t u = 0;
  GetBe(&v, bytes, &u);
  if (bytes == 2) *out = static_cast<int16_t>(u);
  if (bytes == 4) *out = static_cast<int32_t>(u);
  if (bytes == 8) *out = static_cast<int64_t>(u);
  return true;
}

std::string_view GetBytes(const PGresult* res, int row, int col) {
  return {PQgetvalue(res, row, col), static_cast<size_t>(PQgetlength(res, row, col))};
}

}  // namespace

void Params::Bytes(std::string_view b) {
  values_.emplace_back(b);
  formats_.push_back(1);
  types_.push_back(17);  // bytea
}

void Params::Int(int64_t v) {
  std::string s;
  PutBe(&s, static_cast<uint64_t>(v), 8);
  values_.push_back(std::move(s));
  formats_.push_back(1);
  types_.push_back(20);  // int8
}

void Params::Text(std::string_view s) {
  values_.emplace_back(s);
  formats_.push_back(0);
  types_.push_back(25);  // text
}

void Params::Bool(bool b) {
  values_.emplace_back(1, b ? '\1' : '\0');
  formats_.push_back(1);
  types_.push_back(16);  // bool
}

void Params::SetBool(int index, bool b) { values_.at(index) = std::string(1, b ? '\1' : '\0'); }

void Params::Finish() {
  ptrs_.clear();
  lengths_.clear();
  for (const std::string& v : values_) {
    ptrs_.push_back(v.data());
    lengths_.push_back(static_cast<int>(v.size()));
  }
}

bool DecodeRow(const PGresult* res, int row, Record* record, TimeMs* now_ms) {
  if (PQnfields(res) < 13) return false;
  int64_t state, attempt, owner, created, expires, lease, status, completed;
  if (!GetInt(res, row, 0, 2, &state) || !GetInt(res, row, 1, 4, &attempt) ||
      !GetInt(res, row, 2, 8, &owner) || !GetInt(res, row, 4, 8, &created) ||
      !GetInt(res, row, 5, 8, &expires) || !GetInt(res, row, 6, 8, &lease) ||
      !GetInt(res, row, 7, 4, &status) || !GetInt(res, row, 11, 8, &completed) ||
      !GetInt(res, row, 12, 8, now_ms)) {
    return false;
  }
  if (state != 1 && state != 2) return false;
  std::string_view fp = GetBytes(res, row, 3);
  if (fp.size() != record->fingerprint.size()) return false;
  std::memcpy(record->fingerprint.data(), fp.data(), fp.size());
  record->state = static_cast<RecordState>(state);
  record->attempt = static_cast<uint32_t>(attempt);
  record->owner = static_cast<uint64_t>(owner);
  record->created_ms = created;
  record->expires_ms = expires;
  record->lease_until_ms = lease;
  record->completed_ms = completed;
  record->response = StoredResponse{};
  if (record->state == RecordState::kCompleted) {
    record->response.status = static_cast<int>(status);
    record->response.reason = std::string(GetBytes(res, row, 8));
    if (!DecodeHeaders(GetBytes(res, row, 9), &record->response.headers)) return false;
    record->response.body = std::string(GetBytes(res, row, 10));
  }
  return true;
}

std::string EncodeHeaders(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out;
  for (const auto& [name, value] : headers) {
    PutBe(&out, name.size(), 4);
    out += name;
    PutBe(&out, value.size(), 4);
    out += value;
  }
  return out;
}

bool DecodeHeaders(std::string_view in, std::vector<std::pair<std::string, std::string>>* out) {
  out->clear();
  while (!in.empty()) {
    uint64_t n = 0, v = 0;
    if (!GetBe(&in, 4, &n) || in.size() < n) return false;
    std::string name(in.substr(0, n));
    in.remove_prefix(n);
    if (!GetBe(&in, 4, &v) || in.size() < v) return false;
    out->emplace_back(std::move(name), std::string(in.substr(0, v)));
    in.remove_prefix(v);
  }
  return true;
}

bool SplitRecordKey(std::string_view record_key, std::string_view* scope, std::string_view* key) {
  if (record_key.size() < sizeof(ScopeId)) return false;
  *scope = record_key.substr(0, sizeof(ScopeId));
  *key = record_key.substr(sizeof(ScopeId));
  return true;
}

ClaimResult ClaimFromRow(const Record& row, TimeMs now_ms, const Fingerprint& fingerprint,
                         uint64_t owner, std::string record_key) {
  ClaimResult r;
  if (row.owner == owner && row.state == RecordState::kInFlight) {
    r.outcome = row.attempt == 1 ? ClaimOutcome::kFresh : ClaimOutcome::kTakeover;
    r.token.record_key = std::move(record_key);
    r.token.attempt = row.attempt;
    r.token.owner = owner;
    r.token.lease_left_ms = row.lease_until_ms - now_ms;
    return r;
  }
  r.record = row;
  if (row.fingerprint != fingerprint) {
    r.outcome = ClaimOutcome::kMismatch;
  } else if (row.state == RecordState::kCompleted) {
    r.outcome = ClaimOutcome::kReplay;
  } else {
    r.outcome = ClaimOutcome::kInFlight;
    r.retry_after_s = RetryAfterSeconds(row.lease_until_ms, now_ms);
  }
  return r;
}

bool NeedsTakeover(const Record& row, TimeMs now_ms, const Fingerprint& fingerprint,
                   uint64_t owner) {
  return row.owner != owner && row.state == RecordState::kInFlight &&
         row.fingerprint == fingerprint && row.lease_until_ms <= now_ms && now_ms < row.expires_ms;
}

uint32_t FencedAttempt(const PGresult* res, int row) {
  int64_t v = 0;
  if (PQnfields(res) < 14 || !GetInt(res, row, 13, 4, &v) || v < 0) return 0;
  return static_cast<uint32_t>(v);
}

}  // namespace idemgate::pg

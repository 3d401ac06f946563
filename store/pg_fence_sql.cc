// The PostgreSQL side of attempt fencing (SPEC §12 A2/A3, docs/fencing.md): schema version 2's
// functions and table, the takeover statement, and the clean-up of fence marks. No I/O here.
//
// How the pieces hold together. A backend's idemgate_fence(record, attempt) takes a
// transaction-scoped advisory lock on the record, reads the record (in flight at that attempt?)
// and inserts a mark (record id, record's created_ms) -- one mark per record, ever: its primary
// key. It holds no lock on the records table, so no claim, completion or release ever waits for
// a backend's transaction. The claim statement never takes over; a claim that finds an expired
// lease runs idemgate_take_over, which only *tries* the same advisory lock (held: a fence's
// transaction is open -> the record counts as in flight) and, holding it, reads the marks with
// a snapshot taken after the lock was granted: a fence that committed before is seen (the
// takeover reports its attempt: store a 502, never execute again), and a fence that starts later
// waits for the takeover's commit and then sees the new attempt (it fails).
#include "store/pg_sql.h"

namespace idemgate::pg {

// "idemgate-record-v1\0" || scope || key -> SHA-256, first 16 bytes (proxy/record_id.h).
#define IDEMGATE_RID_FN                                                                 \
  "CREATE OR REPLACE FUNCTION idemgate_record_id(scope bytea, key bytea) RETURNS bytea" \
  " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS"                                     \
  " $f$ SELECT substr(sha256('\\x6964656d676174652d7265636f72642d763100'::bytea"        \
  " || scope || key), 1, 16) $f$;"                                                      \
  "CREATE OR REPLACE FUNCTION idemgate_lock_key(record_id bytea) RETURNS bigint"        \
  " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS"                                     \
  " $f$ SELECT ('x' || encode(substr(record_id, 1, 8), 'hex'))::bit(64)::bigint $f$;"

#define IDEMGATE_NOW_MS "(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"

// The marks: at most one per record (a record's life is its created_ms).
#define IDEMGATE_FENCES                                                                 \
  "CREATE TABLE IF NOT EXISTS idemgate_fences (record_id bytea NOT NULL,"               \
  "  created_ms bigint NOT NULL, attempt int NOT NULL, fenced_ms bigint NOT NULL,"      \
  "  expires_ms bigint NOT NULL, PRIMARY KEY (record_id, created_ms));"                 \
  "CREATE INDEX IF NOT EXISTS idemgate_fences_expires ON idemgate_fences (expires_ms);" \
  "CREATE INDEX IF NOT EXISTS idemgate_records_record_id"                               \
  "  ON idemgate_records (idemgate_record_id(scope_id, idem_key));"

#define IDEMGATE_FENCE_FN                                                                    \
  "CREATE OR REPLACE FUNCTION idemgate_fence(record text, attempt bigint) RETURNS void"      \
  " LANGUAGE plpgsql VOLATILE AS $f$"                                                        \
  " DECLARE rid bytea; r record; n bigint;"                                                  \
  " BEGIN"                                                                                   \
  "  IF $1 IS NULL OR $1 !~ '^[0-9a-f]{32}$' OR $2 IS NULL OR $2 < 1 THEN"                   \
  "   RAISE EXCEPTION 'idemgate_fence: the record must be 32 lower-case hex digits and the"  \
  " attempt a positive integer (got %, %)', $1, $2 USING ERRCODE = 'IG002';"                 \
  "  END IF;"                                                                                \
  "  rid := decode($1, 'hex');"                                                              \
  "  PERFORM pg_advisory_xact_lock(idemgate_lock_key(rid));"                                 \
  "  n := " IDEMGATE_NOW_MS                                                                  \
  ";"                                                                                        \
  "  SELECT t.state, t.attempt, t.created_ms, t.expires_ms INTO r FROM idemgate_records t"   \
  "   WHERE idemgate_record_id(t.scope_id, t.idem_key) = rid AND t.expires_ms > n;"          \
  "  IF NOT FOUND THEN"                                                                      \
  "   RAISE EXCEPTION 'idemgate_fence: record % is not in flight (no such record)', $1"      \
  "    USING ERRCODE = 'IG001';"                                                             \
  "  END IF;"                                                                                \
  "  IF r.state <> 1 OR r.attempt <> $2 THEN"                                                \
  "   RAISE EXCEPTION 'idemgate_fence: record % is not in flight at attempt % (%)', $1, $2," \
  "    CASE WHEN r.state <> 1 THEN 'it is completed' ELSE 'it is at attempt ' || r.attempt"  \
  "    END USING ERRCODE = 'IG001';"                                                         \
  "  END IF;"                                                                                \
  "  INSERT INTO idemgate_fences VALUES (rid, r.created_ms, $2, n, r.expires_ms)"            \
  "   ON CONFLICT DO NOTHING;"                                                               \
  "  IF NOT FOUND THEN"                                                                      \
  "   RAISE EXCEPTION 'idemgate_fence: record % was already fenced', $1"                     \
  "    USING ERRCODE = 'IG001';"                                                             \
  "  END IF;"                                                                                \
  " END $f$;"

// The record's columns as every record-returning statement selects them (pg_sql.h DecodeRow),
// then "now", then the fenced attempt (0: none).
#define IDEMGATE_TAKEOVER_COLS                                                               \
  "r.state::int2, r.attempt::int4, r.owner, r.fingerprint, r.created_ms, r.expires_ms,"      \
  " r.lease_until_ms, coalesce(r.resp_status, 0)::int4, coalesce(r.resp_reason, ''::bytea)," \
  " coalesce(r.resp_headers, ''::bytea), coalesce(r.resp_body, ''::bytea),"                  \
  " coalesce(r.completed_ms, 0), n, coalesce((SELECT max(f.attempt) FROM idemgate_fences f"  \
  " WHERE f.record_id = rid AND f.created_ms = r.created_ms), 0)::int4"

#define IDEMGATE_TAKEOVER_FN                                                                 \
  "CREATE OR REPLACE FUNCTION idemgate_take_over(p_scope bytea, p_key bytea, p_fp bytea,"    \
  " p_owner bigint, p_lease bigint, p_ttl bigint, p_offset bigint) RETURNS TABLE (o_state"   \
  " int2, o_attempt int4, o_owner int8, o_fp bytea, o_created int8, o_expires int8, o_lease" \
  " int8, o_status int4, o_reason bytea, o_headers bytea, o_body bytea, o_completed int8,"   \
  " o_now int8, o_fenced int4) LANGUAGE plpgsql VOLATILE AS $f$"                             \
  " DECLARE rid bytea := idemgate_record_id(p_scope, p_key);"                                \
  "  n bigint := " IDEMGATE_NOW_MS                                                           \
  " + p_offset;"                                                                             \
  " BEGIN"                                                                                   \
  "  IF pg_try_advisory_xact_lock(idemgate_lock_key(rid)) THEN"                              \
  "   RETURN QUERY UPDATE idemgate_records r SET attempt = r.attempt + 1, owner = p_owner,"  \
  "    lease_until_ms = n + p_lease, expires_ms = greatest(r.expires_ms, n + p_ttl)"         \
  "    WHERE r.scope_id = p_scope AND r.idem_key = p_key AND r.state = 1"                    \
  "    AND r.fingerprint = p_fp AND r.lease_until_ms <= n AND r.expires_ms > n"              \
  "    RETURNING " IDEMGATE_TAKEOVER_COLS                                                    \
  ";"                                                                                        \
  "   IF FOUND THEN RETURN; END IF;"                                                         \
  "  END IF;"                                                                                \
  "  RETURN QUERY SELECT " IDEMGATE_TAKEOVER_COLS                                            \
  " FROM idemgate_records r"                                                                 \
  "   WHERE r.scope_id = p_scope AND r.idem_key = p_key;"                                    \
  " END $f$;"

const char* const kFenceSchemaSql =
    IDEMGATE_RID_FN IDEMGATE_FENCES IDEMGATE_FENCE_FN IDEMGATE_TAKEOVER_FN
    "UPDATE idemgate_schema SET version = 2;";

const char* const kTakeoverSql = "SELECT * FROM idemgate_take_over($1, $2, $3, $4, $5, $6, $7)";

// Marks whose record's life is over (expired, and no live record of that life: a takeover may
// have extended it), in batches, by the instance that holds the clean-up lock.
const char* const kFenceCleanupSql =
    "WITH l AS (SELECT pg_try_advisory_xact_lock(33140126138370) AS got)"  // kCleanupLockKey
    " DELETE FROM idemgate_fences WHERE ctid = ANY (ARRAY("
    "   SELECT f.ctid FROM idemgate_fences f WHERE f.expires_ms <= " IDEMGATE_NOW_MS
    "   + $1 AND (SELECT got FROM l) AND NOT EXISTS (SELECT 1 FROM idemgate_records r"
    "   WHERE idemgate_record_id(r.scope_id, r.idem_key) = f.record_id"
    "   AND r.created_ms = f.created_ms AND r.expires_ms > " IDEMGATE_NOW_MS
    " + $1) LIMIT 5000))";  // kCleanupBatch

}  // namespace idemgate::pg

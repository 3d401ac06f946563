// SPDX-License-Identifier: Apache-2.0
// PgStore's start-up schema check and creation.
#include "store/pg_schema.h"

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <string_view>
#include <thread>

#include "common/log.h"
#include "store/pg_conn.h"
#include "store/pg_sql.h"

namespace idemgate::pg {
namespace {

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The index of the admin's lookup by key_hash (kKeyHashSql): built CONCURRENTLY, after the
// schema's transaction, so the gateways already serving keep writing meanwhile. Additive within
// schema version 2 (a gateway that does not know it reads and writes the table as before). One
// instance builds at a time (a session advisory lock; another start skips it); an index a broken
// build left invalid is dropped and built again. A failure only costs the lookup its speed.
void BuildKeyHashIndex(PGconn* conn) {
  ResultPtr lock(PQexec(conn, "SELECT pg_try_advisory_lock(33140126138371)"));  // schema lock + 2
  if (PQresultStatus(lock.get()) != PGRES_TUPLES_OK || PQgetvalue(lock.get(), 0, 0)[0] != 't') {
    return;
  }
  ResultPtr invalid(PQexec(conn,
                           "SELECT 1 FROM pg_index WHERE indexrelid ="
                           " to_regclass('idemgate_records_key_hash') AND NOT indisvalid"));
  const char* steps[] = {
      PQntuples(invalid.get()) == 1 ? "DROP INDEX CONCURRENTLY IF EXISTS idemgate_records_key_hash"
                                    : nullptr,
      "CREATE INDEX CONCURRENTLY IF NOT EXISTS idemgate_records_key_hash ON idemgate_records"
      " (" IDEMGATE_PG_KEY_HASH("") ")"};
  for (const char* sql : steps) {
    if (sql == nullptr) continue;
    ResultPtr r(PQexec(conn, sql));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      LogF(LogLevel::kWarn, "store",
           "cannot build the index of the admin's lookup by key_hash (it scans instead): %s",
           Trim(PQerrorMessage(conn)).c_str());
      break;
    }
  }
  PQclear(PQexec(conn, "SELECT pg_advisory_unlock(33140126138371)"));
}

// A failed statement's SQLSTATE is a deadlock PostgreSQL broke by aborting this transaction.
bool Deadlocked(const PGresult* r) {
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  return state != nullptr && std::string_view(state) == "40P01";
}

enum class SchemaStep { kDone, kRefused, kFailed, kDeadlocked };

// The schema's one transaction: its version checked, then created or upgraded.
SchemaStep CreateSchema(PGconn* conn, std::string* error) {
  ResultPtr begin(PQexec(conn, kSchemaBeginSql));
  if (PQresultStatus(begin.get()) != PGRES_TUPLES_OK || PQntuples(begin.get()) != 1) {
    *error = "cannot create the PostgreSQL schema: " + Trim(PQerrorMessage(conn));
    return Deadlocked(begin.get()) ? SchemaStep::kDeadlocked : SchemaStep::kFailed;
  }
  int version = atoi(PQgetvalue(begin.get(), 0, 0));
  int rows = atoi(PQgetvalue(begin.get(), 0, 1));
  // Version 1 (before fencing) is upgraded in place by kFenceSchemaSql, in this transaction.
  if ((version != kSchemaVersion && version != 1) || rows != 1) {
    PQclear(PQexec(conn, "ROLLBACK"));
    *error = "the PostgreSQL schema has version " + std::string(PQgetvalue(begin.get(), 0, 0)) +
             " (" + std::to_string(rows) + " version rows); this gateway knows only version " +
             std::to_string(kSchemaVersion) + " (and upgrades version 1) and will not touch it";
    return SchemaStep::kRefused;
  }
  for (const char* sql : {kSchemaCreateSql, kFenceSchemaSql, "COMMIT"}) {
    ResultPtr create(PQexec(conn, sql));
    if (PQresultStatus(create.get()) != PGRES_COMMAND_OK) {
      *error = "cannot create the PostgreSQL schema: " + Trim(PQerrorMessage(conn));
      return Deadlocked(create.get()) ? SchemaStep::kDeadlocked : SchemaStep::kFailed;
    }
  }
  return SchemaStep::kDone;
}

}  // namespace

bool PrepareSchema(const std::string& dsn, uint64_t* records, std::string* error) {
  std::unique_ptr<PGconn, ConnDeleter> conn(PQconnectdb(dsn.c_str()));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    *error =
        "cannot connect to PostgreSQL (store.postgres.dsn): " + Trim(PQerrorMessage(conn.get()));
    return false;
  }
  // Several statements in one string: the simple protocol (PQexec) returns the last result.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);  // "already exists"
  // Another instance starting at the same time may be building the key_hash index: its CREATE
  // INDEX CONCURRENTLY waits for this transaction, which waits for the index's lock, and
  // PostgreSQL breaks the deadlock by aborting this one. The transaction is only creations
  // that are already done or are done again: run it again.
  SchemaStep step = SchemaStep::kDeadlocked;
  for (int attempt = 1; step == SchemaStep::kDeadlocked && attempt <= 10; ++attempt) {
    if (attempt > 1) {
      PQclear(PQexec(conn.get(), "ROLLBACK"));
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
    }
    step = CreateSchema(conn.get(), error);
  }
  if (step != SchemaStep::kDone) return false;
  BuildKeyHashIndex(conn.get());
  ResultPtr count(PQexec(conn.get(), kCountSql));
  *records = PQresultStatus(count.get()) == PGRES_TUPLES_OK && PQntuples(count.get()) == 1
                 ? strtoull(PQgetvalue(count.get(), 0, 0), nullptr, 10)
                 : 0;
  return true;
}

}  // namespace idemgate::pg

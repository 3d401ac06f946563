// PgStore's start-up schema check and creation.
#include "store/pg_schema.h"

#include <libpq-fe.h>

#include <memory>

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
  ResultPtr begin(PQexec(conn.get(), kSchemaBeginSql));
  if (PQresultStatus(begin.get()) != PGRES_TUPLES_OK || PQntuples(begin.get()) != 1) {
    *error = "cannot create the PostgreSQL schema: " + Trim(PQerrorMessage(conn.get()));
    return false;
  }
  int version = atoi(PQgetvalue(begin.get(), 0, 0));
  int rows = atoi(PQgetvalue(begin.get(), 0, 1));
  // Version 1 (before fencing) is upgraded in place by kFenceSchemaSql, in this transaction.
  if ((version != kSchemaVersion && version != 1) || rows != 1) {
    PQclear(PQexec(conn.get(), "ROLLBACK"));
    *error = "the PostgreSQL schema has version " + std::string(PQgetvalue(begin.get(), 0, 0)) +
             " (" + std::to_string(rows) + " version rows); this gateway knows only version " +
             std::to_string(kSchemaVersion) + " (and upgrades version 1) and will not touch it";
    return false;
  }
  for (const char* sql : {kSchemaCreateSql, kFenceSchemaSql, "COMMIT"}) {
    ResultPtr create(PQexec(conn.get(), sql));
    if (PQresultStatus(create.get()) != PGRES_COMMAND_OK) {
      *error = "cannot create the PostgreSQL schema: " + Trim(PQerrorMessage(conn.get()));
      return false;
    }
  }
  ResultPtr count(PQexec(conn.get(), kCountSql));
  *records = PQresultStatus(count.get()) == PGRES_TUPLES_OK && PQntuples(count.get()) == 1
                 ? strtoull(PQgetvalue(count.get(), 0, 0), nullptr, 10)
                 : 0;
  return true;
}

}  // namespace idemgate::pg

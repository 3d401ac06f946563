// The demo payment API's PostgreSQL intents, fenced in the transaction that creates them.
#include "tests/support/demo_ledger.h"

namespace idemgate::test {
namespace {

struct PgRes {
  explicit PgRes(PGresult* r) : r(r) {}
  ~PgRes() { PQclear(r); }
  PGresult* r;
};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

DemoLedger::~DemoLedger() {
  if (conn_ != nullptr) PQfinish(conn_);
}

bool DemoLedger::Exec(const char* sql, std::string* error) {
  PgRes res(PQexec(conn_, sql));
  ExecStatusType st = PQresultStatus(res.r);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return true;
  *error = Trim(PQresultErrorMessage(res.r));
  return false;
}

bool DemoLedger::Open(const std::string& dsn, bool fence, std::string* error) {
  fence_ = fence;
  conn_ = PQconnectdb(dsn.c_str());
  if (PQstatus(conn_) != CONNECTION_OK) {
    *error = Trim(PQerrorMessage(conn_));
    return false;
  }
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  return Exec(
      "CREATE TABLE IF NOT EXISTS demo_intents (id text PRIMARY KEY, amount text NOT NULL,"
      " record text, attempt int, created_at timestamptz NOT NULL DEFAULT now())",
      error);
}

DemoLedger::Result DemoLedger::Create(const std::string& id, const std::string& amount,
                                      const std::string& record, const std::string& attempt,
                                      std::string* detail) {
  std::lock_guard lock(mu_);
  if (PQstatus(conn_) != CONNECTION_OK) PQreset(conn_);
  if (!Exec("BEGIN", detail)) return Result::kFailed;
  // The three lines a backend adds: BEGIN; SELECT idemgate_fence($1, $2); ...; COMMIT.
  if (fence_ && !record.empty()) {
    const char* fence_args[2] = {record.c_str(), attempt.c_str()};
    PgRes res(PQexecParams(conn_, "SELECT idemgate_fence($1, $2)", 2, nullptr, fence_args, nullptr,
                           nullptr, 0));
    if (PQresultStatus(res.r) != PGRES_TUPLES_OK) {
      const char* state = PQresultErrorField(res.r, PG_DIAG_SQLSTATE);
      *detail = Trim(PQresultErrorMessage(res.r));
      std::string ignored;
      Exec("ROLLBACK", &ignored);
      return state != nullptr && std::string(state) == "IG001" ? Result::kFenced : Result::kFailed;
    }
  }
  const char* args[4] = {id.c_str(), amount.c_str(), record.empty() ? nullptr : record.c_str(),
                         record.empty() ? nullptr : attempt.c_str()};
  PgRes ins(PQexecParams(conn_,
                         "INSERT INTO demo_intents (id, amount, record, attempt)"
                         " VALUES ($1, $2, $3, $4)",
                         4, nullptr, args, nullptr, nullptr, 0));
  if (PQresultStatus(ins.r) != PGRES_COMMAND_OK) {
    *detail = Trim(PQresultErrorMessage(ins.r));
    std::string ignored;
    Exec("ROLLBACK", &ignored);
    return Result::kFailed;
  }
  return Exec("COMMIT", detail) ? Result::kCreated : Result::kFailed;
}

}  // namespace idemgate::test

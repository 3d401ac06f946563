// The demo payment API's intents in PostgreSQL -- the gateway's own database -- with the fence
// in the transaction that creates an intent (SPEC §12 A2, docs/fencing.md): what a backend that
// adopts fencing does, as users would copy it. Blocking libpq, one connection (a test backend).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace idemgate::test {

class DemoLedger {
 public:
  DemoLedger() = default;
  ~DemoLedger();
  DemoLedger(const DemoLedger&) = delete;
  DemoLedger& operator=(const DemoLedger&) = delete;

  // Connects and creates demo_intents if absent. `fence`: call idemgate_fence in every
  // transaction that carries a record (false: the control, a backend that does not fence).
  bool Open(const std::string& dsn, bool fence, std::string* error);

  enum class Result { kCreated, kFenced, kFailed };
  // One transaction: [SELECT idemgate_fence(record, attempt);] INSERT the intent; COMMIT.
  // `record` empty (a request without a key): no fence. kFenced: the fence refused (SQLSTATE
  // IG001, rolled back, nothing written); kFailed: any other error (*detail says which).
  Result Create(const std::string& id, const std::string& amount, const std::string& record,
                const std::string& attempt, std::string* detail);

 private:
  bool Exec(const char* sql, std::string* error);
  PGconn* conn_ = nullptr;
  bool fence_ = true;
  std::mutex mu_;
};

}  // namespace idemgate::test

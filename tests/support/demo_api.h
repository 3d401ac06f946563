// The demo payment API (README "What a client sees"): payment intents over evhttp, on its own
// loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "tests/support/demo_ledger.h"
#include "tests/support/ev_util.h"

namespace idemgate::test {

// Returns the amount as digits when `body` holds "amount":"<positive integer>", else an error
// sentence in `detail` and an empty string. Minimal extraction: the body is not fully parsed.
std::string ExtractAmount(std::string_view body, std::string* detail);

// POST /v1/payment_intents, GET /v1/payment_intents/{id}, GET /_demo/stats.
class DemoApi {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 0;  // 0: the kernel picks one; read it back with port()
    int delay_ms = 0;   // every POST answer waits this long (an evtimer; the loop keeps running)
    // Non-empty: intents are written to this PostgreSQL database (the gateway's), one
    // transaction each, which calls idemgate_fence first when `fence` (docs/fencing.md).
    std::string pg_dsn;
    bool fence = true;
    // PostgreSQL mode: the first POST waits this long before its transaction (-1: it never
    // runs, the request is held until Stop): an attempt that reaches the database late.
    int hold_first_ms = 0;
  };

  DemoApi();
  ~DemoApi();
  DemoApi(const DemoApi&) = delete;
  DemoApi& operator=(const DemoApi&) = delete;

  // Binds (and, with pg_dsn, connects), then runs the loop on a new thread. False when binding
  // or connecting fails, or already started.
  bool Start(const Options& options);
  bool Start(uint16_t port = 0);
  // Stops the loop and joins its thread; pending delayed answers are dropped. Idempotent.
  void Stop();

  uint16_t port() const { return port_; }
  const std::string& host() const { return options_.host; }
  // Every POST that reached the handler, whatever its answer.
  int64_t executions() const { return executions_.load(); }
  // Waits until executions() >= n; false on timeout.
  bool WaitForExecutions(int64_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Intents created (201 answers).
  int64_t created() const { return created_.load(); }
  // PostgreSQL mode: attempts whose fence was refused (rolled back, nothing done).
  int64_t fenced() const { return fenced_.load(); }

 private:
  struct Pending;  // a delayed POST answer

  static void OnRequest(evhttp_request* req, void* arg);
  static void OnDelayElapsed(evutil_socket_t, short, void* arg);
  void Execute(Pending* pending);  // the intent: in memory, or in PostgreSQL (fenced)
  void HandlePost(evhttp_request* req);
  void HandleGet(evhttp_request* req, std::string_view path);
  void Reply(evhttp_request* req, int status, const std::string& body, const std::string& location);
  std::string CreateIntent(const std::string& amount, std::string* id,
                           const std::string& given_id = {});

  Options options_;
  uint16_t port_ = 0;
  EventBasePtr base_;
  EvhttpPtr http_;
  LoopThread loop_;
  std::atomic<int64_t> executions_{0};
  std::atomic<int64_t> created_{0};
  std::atomic<int64_t> fenced_{0};
  std::mutex mu_;
  std::condition_variable cv_;                            // signalled on every execution
  std::map<std::string, std::string> intents_;            // id -> JSON; guarded by mu_
  std::map<Pending*, std::unique_ptr<Pending>> pending_;  // loop thread only
  std::unique_ptr<DemoLedger> ledger_;                    // pg_dsn set
  int64_t posts_ = 0;                                     // loop thread only
};

}  // namespace idemgate::test

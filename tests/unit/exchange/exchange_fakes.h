// In-process fakes for driving an Exchange with no loop, no sockets, no threads and no sleeps:
// a store that applies the real claim rules to a map but answers only when the test says so, an
// upstream whose calls wait for the test's answer, timers on a fake clock, and a recording sink.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conf/config.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/wait_registry.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/metrics.h"
#include "store/claim_rules.h"

namespace idemgate::test {

// The store's ops wait in a queue until Step()/RunAll(); each is decided by the real rules
// (store/claim_rules) against an in-memory map at the time it runs.
class QueuedStore final : public Store {
 public:
  explicit QueuedStore(FakeClock* clock) : clock_(clock) {}

  void Claim(ClaimRequest request, ClaimCallback done) override {
    ops_.push_back([this, request = std::move(request), done = std::move(done)]() mutable {
      ++claims;
      ClaimResult result;
      if (TakeFailure(&result.status)) return done(std::move(result));
      std::string key = MakeRecordKey(request.scope, request.key);
      ClaimDecision d = DecideClaim(Find(key), request, key, ClaimTime{clock_->NowMs(), clock_->NowMs()}, ++next_owner_);
      if (d.result.outcome == ClaimOutcome::kTakeover && fenced.count(key) != 0) {
        d.result.fenced_attempt = fenced[key];  // as PgStore reports a backend's fence
      }
      Apply(key, d.action, d.record);
      done(std::move(d.result));
    });
  }
  void Complete(ClaimToken token, StoredResponse response, StatusCallback done) override {
    ops_.push_back([this, token, response = std::move(response), done = std::move(done)] {
      ++completes;
      StoreStatus status;
      if (TakeFailure(&status)) return done(status);
      CasDecision d = DecideComplete(Find(token.record_key), token, response, clock_->NowMs());
      Apply(token.record_key, d.action, d.record);
      done(d.status);
    });
  }
  void Release(ClaimToken token, StatusCallback done) override {
    ops_.push_back([this, token, done = std::move(done)] {
      ++releases;
      StoreStatus status;
      if (TakeFailure(&status)) return done(status);
      CasDecision d = DecideRelease(Find(token.record_key), token, clock_->NowMs());
      Apply(token.record_key, d.action, d.record);
      done(d.status);
    });
  }
  LookupResult Lookup(const ScopeId& scope, std::string_view key, LookupMode mode) override {
    LookupResult r;
    if (shared && mode == LookupMode::kNoWait) {  // as PgStore: nothing at hand, ask Claim
      r.outcome = LookupOutcome::kNotCached;
      return r;
    }
    ++lookups;
    std::optional<Record> found = Find(MakeRecordKey(scope, key));
    if (found && !found->ExpiredAt(clock_->NowMs())) {
      r.outcome = LookupOutcome::kFound;
      r.record = *found;
      r.now_ms = clock_->NowMs();
    }
    return r;
  }
  void Delete(const ScopeId& scope, std::string key, StatusCallback done) override {
    records.erase(MakeRecordKey(scope, key));
    done({});
  }
  StoreStatus GetMeta(std::string_view, std::optional<std::string>* value) override {
    value->reset();
    return {};
  }
  StoreStatus PutMeta(std::string_view, std::string_view) override { return {}; }
  uint64_t ApproximateRecords() override { return records.size(); }
  void Close() override {}
  bool Shared() const override { return shared; }

  // Runs the oldest queued op (its callback runs here, as on the store's thread).
  bool Step() {
    if (ops_.empty()) return false;
    auto op = std::move(ops_.front());
    ops_.pop_front();
    op();
    return true;
  }
  size_t queued() const { return ops_.size(); }
  // The next `count` ops fail with `code` (nothing written).
  void FailNext(StoreCode code, int count = 1) {
    fail_code_ = code;
    fail_count_ = count;
  }

  std::map<std::string, Record> records;
  std::map<std::string, uint32_t> fenced;  // record key -> the attempt a backend fenced
  bool shared = false;  // as PostgreSQL: other instances write it; kNoWait reads nothing
  int claims = 0, completes = 0, releases = 0, lookups = 0;

 private:
  std::optional<Record> Find(const std::string& key) const {
    auto it = records.find(key);
    if (it == records.end()) return std::nullopt;
    return it->second;
  }
  void Apply(const std::string& key, WriteAction action, const Record& record) {
    if (action == WriteAction::kPut) records[key] = record;
    if (action == WriteAction::kDelete) records.erase(key);
  }
  bool TakeFailure(StoreStatus* status) {
    if (fail_count_ == 0) return false;
    --fail_count_;
    *status = {fail_code_, "injected store failure"};
    return true;
  }

  FakeClock* clock_;
  std::deque<std::function<void()>> ops_;
  uint64_t next_owner_ = 0;
  StoreCode fail_code_ = StoreCode::kIoError;
  int fail_count_ = 0;
};

struct UpstreamCall {
  std::string request;
  UpstreamLimits limits;
  UpstreamCallback done;
};

struct SentAnswer {
  StoredResponse response;
  bool replayed = false;
  std::string extra_headers;  // Age, Preference-Applied
};

class RecordingSink final : public ResponseSink {
 public:
  void SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                    std::string_view extra_headers) override {
    answers.push_back({*response, replayed, std::string(extra_headers)});
  }
  std::vector<SentAnswer> answers;
};

// The loop: posted work and timers run when the test says so; time is a FakeClock (wall) plus
// a monotonic counter that moves with it.
class FakeEnv final : public ExchangeEnv {
 public:
  FakeEnv(Store* store, FakeClock* clock) : clock_(clock), store_(store) {}

  void Post(std::function<void()> fn) override { posted_.push_back(std::move(fn)); }
  std::unique_ptr<LoopTimer> NewTimer(std::function<void()> fn) override;
  int64_t MonoUs() const override { return mono_us_; }
  const Clock& clock() const override { return *clock_; }
  Store& store() override { return *store_; }
  ReplayCache* replay_cache() override { return nullptr; }
  WaitRegistry& waits() override { return *waits_; }
  bool draining() const override { return draining_now; }
  void SendUpstream(std::string request, bool, const UpstreamLimits& limits,
                    UpstreamCallback done) override {
    upstream.push_back({std::move(request), limits, std::move(done)});
  }
  void RecordStoreOp(StoreOp, int64_t) override {}
  bool WantsAccessEntry() const override { return true; }
  void RecordExchange(const ExchangeSample& sample, const AccessEntry* entry) override {
    samples.push_back(sample);
    log_lines.push_back(FormatAccessLine(*entry));
  }
  void Finished(Exchange* exchange) override { finished.push_back(exchange); }

  // Runs everything posted so far (and what that posts), like one loop turn.
  void RunPosted() {
    while (!posted_.empty()) {
      auto batch = std::move(posted_);
      posted_.clear();
      for (auto& fn : batch) fn();
    }
  }
  // Moves both clocks and fires the timers that came due.
  void Advance(int64_t ms);

  FakeClock* clock_;
  std::vector<UpstreamCall> upstream;
  std::vector<ExchangeSample> samples;
  std::vector<std::string> log_lines;
  std::vector<Exchange*> finished;
  bool draining_now = false;
  // Shared by every FakeEnv of a test that passes one (several loops); else this env's own.
  WaitRegistry* waits_ = &own_waits_;
  WaitRegistry own_waits_;

 private:
  friend class FakeTimer;
  struct TimerSlot {
    int64_t due_us = -1;  // -1: not armed
    std::function<void()> fn;
  };
  Store* store_;
  std::vector<std::function<void()>> posted_;
  int64_t mono_us_ = 1'000'000'000;
  std::vector<std::shared_ptr<TimerSlot>> timers_;
};

class FakeTimer final : public LoopTimer {
 public:
  FakeTimer(FakeEnv* env, std::shared_ptr<FakeEnv::TimerSlot> slot) : env_(env), slot_(slot) {}
  ~FakeTimer() override { slot_->due_us = -1; }
  void Arm(int64_t ms) override { slot_->due_us = env_->MonoUs() + ms * 1000; }
  void Cancel() override { slot_->due_us = -1; }

 private:
  FakeEnv* env_;
  std::shared_ptr<FakeEnv::TimerSlot> slot_;
};

inline std::unique_ptr<LoopTimer> FakeEnv::NewTimer(std::function<void()> fn) {
  auto slot = std::make_shared<TimerSlot>();
  slot->fn = std::move(fn);
  timers_.push_back(slot);
  return std::make_unique<FakeTimer>(this, slot);
}

inline void FakeEnv::Advance(int64_t ms) {
  int64_t end = mono_us_ + ms * 1000;
  for (;;) {
    std::shared_ptr<TimerSlot> next;
    for (auto& t : timers_) {
      if (t->due_us >= 0 && t->due_us <= end && (!next || t->due_us < next->due_us)) next = t;
    }
    if (!next) break;
    clock_->Advance((next->due_us - mono_us_) / 1000);
    mono_us_ = next->due_us;
    next->due_us = -1;
    next->fn();
    RunPosted();
  }
  clock_->Advance((end - mono_us_) / 1000);
  mono_us_ = end;
}

// The fixture every Exchange test builds on: a fake clock, a queued store, one loop (env_; a test
// with more loops adds them to envs_), exchanges started by Begin and freed, as the worker frees
// them, once they report Finished.
class ExchangeFixture : public ::testing::Test {
 protected:
  ExchangeFixture() {
    auto config = std::make_shared<Config>();
    config->idempotency.lease_ms = 30'000;
    config->upstream.connect_timeout_ms = 5'000;
    config->upstream.response_timeout_ms = 20'000;
    config_ = config;
  }
  ~ExchangeFixture() override { FreeAll(); }
  void FreeAll() {
    for (auto& ex : live_) delete ex.second;
    live_.clear();
  }

  // Starts an exchange for `request` on `env` (env_ by default); it answers into sinks_[id].
  int Begin(Request request, FakeEnv* env = nullptr) {
    int id = static_cast<int>(sinks_.size());
    sinks_.push_back(std::make_unique<RecordingSink>());
    auto* ex = new Exchange(env ? env : &env_, sinks_.back().get(), config_, std::move(request),
                            "10.0.0.1", false);
    live_[id] = ex;
    ex->Start();
    Reap();
    return id;
  }
  Exchange* Get(int id) { return live_.count(id) ? live_[id] : nullptr; }
  // Frees what reported Finished, as the worker does on its next turn.
  void Reap() {
    for (FakeEnv* env : envs_) {
      for (Exchange* done : env->finished) {
        for (auto it = live_.begin(); it != live_.end(); ++it) {
          if (it->second == done) {
            EXPECT_EQ(done->phase(), Phase::kDone);
            delete done;
            live_.erase(it);
            break;
          }
        }
      }
      env->finished.clear();
    }
  }
  // Runs the store's queued ops and the loops until both are quiet.
  void Settle() {
    do {
      while (store_.Step()) {
      }
      for (FakeEnv* env : envs_) env->RunPosted();
    } while (store_.queued() > 0);
    Reap();
  }
  void AnswerUpstream(FakeEnv& env, size_t call, UpstreamResult result) {
    auto done = std::move(env.upstream.at(call).done);
    done(std::move(result));
    Reap();
  }
  void AnswerUpstream(size_t call, UpstreamResult result) {
    AnswerUpstream(env_, call, std::move(result));
  }
  const SentAnswer& Only(int id) {
    EXPECT_EQ(sinks_[id]->answers.size(), 1u);
    return sinks_[id]->answers.back();
  }

  FakeClock clock_;
  QueuedStore store_{&clock_};
  FakeEnv env_{&store_, &clock_};
  std::vector<FakeEnv*> envs_{&env_};
  std::shared_ptr<const Config> config_;
  std::vector<std::unique_ptr<RecordingSink>> sinks_;
  std::map<int, Exchange*> live_;
};

}  // namespace idemgate::test

// SPDX-License-Identifier: Apache-2.0
// Metrics: shard aggregation, histogram buckets, and the Prometheus 0.0.4 text format.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "proxy/ops/metrics.h"

namespace idemgate {
namespace {

double Value(const std::string& text, const std::string& series) {
  std::string needle = "\n" + series + " ";
  size_t at = ("\n" + text).find(needle);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + needle.size() - 1, nullptr);
}

TEST(MetricsRender, ZeroSeriesArePresentBeforeAnyTraffic) {
  Metrics metrics(2);
  std::string text = metrics.Render();
  EXPECT_EQ(Value(text, "idemgate_requests_total{outcome=\"fresh\"}"), 0);
  EXPECT_EQ(Value(text, "idemgate_requests_total{outcome=\"rejected\",code=\"bad_request\"}"), 0);
  EXPECT_EQ(Value(text, "idemgate_upstream_responses_total{class=\"1xx\"}"), 0);
  EXPECT_EQ(Value(text, "idemgate_upstream_errors_total{kind=\"too_large\"}"), 0);
  EXPECT_EQ(Value(text, "idemgate_store_batch_size_count"), 0);
  EXPECT_EQ(Value(text, "idemgate_connections_open"), 0);
  EXPECT_EQ(text.find("requests_total{outcome=\"rejected\"}"), std::string::npos);  // + code
}

// A 409 counts under in_flight and a 422 under mismatch, never under rejected: no rejected
// series for those codes (nor for the upstream's, which are answered after a claim or as
// passthrough), since such a series could never move.
TEST(MetricsRender, NoRejectedSeriesForCodesThatAreNeverRejected) {
  Metrics metrics(1);
  std::string text = metrics.Render();
  for (const char* code :
       {"idempotency_key_in_use", "idempotency_key_reused", "upstream_unavailable",
        "upstream_failed", "not_forwarded", "upstream_timeout"}) {
    EXPECT_EQ(text.find("outcome=\"rejected\",code=\"" + std::string(code) + "\""),
              std::string::npos)
        << code;
    EXPECT_EQ(Value(text, "idemgate_error_responses_total{code=\"" + std::string(code) + "\"}"), 0);
  }
  for (const char* code :
       {"bad_request", "missing_credentials", "idempotency_key_missing", "idempotency_key_invalid",
        "request_timeout", "request_too_large", "headers_too_large", "store_unavailable"}) {
    EXPECT_EQ(Value(text, "idemgate_requests_total{outcome=\"rejected\",code=\"" +
                              std::string(code) + "\"}"),
              0)
        << code;
  }
}

// SPEC §10: waiters now (a gauge read at scrape time), waits by how they ended, wait durations.
TEST(MetricsRender, WaitsByEndAndDuration) {
  Metrics metrics(2);
  uint64_t parked = 7;
  metrics.SetWaitersSource([&] { return parked; });
  ExchangeSample replayed;
  replayed.outcome = Outcome::kReplay;
  replayed.wait_end = WaitEnd::kReplayed;
  replayed.wait_us = 250'000;
  metrics.shard(0).RecordExchange(replayed);
  metrics.shard(1).RecordExchange(replayed);
  ExchangeSample gone;
  gone.wait_end = WaitEnd::kClientGone;
  gone.wait_us = 1'000;
  metrics.shard(1).RecordExchange(gone);
  metrics.shard(1).RecordExchange({});  // did not wait: not counted
  std::string t = metrics.Render();
  EXPECT_EQ(Value(t, "idemgate_waiters"), 7);
  EXPECT_EQ(Value(t, "idemgate_waits_total{end=\"replayed\"}"), 2);
  EXPECT_EQ(Value(t, "idemgate_waits_total{end=\"client_gone\"}"), 1);
  EXPECT_EQ(Value(t, "idemgate_waits_total{end=\"timed_out\"}"), 0);
  EXPECT_EQ(Value(t, "idemgate_waits_total{end=\"claimed\"}"), 0);
  EXPECT_EQ(Value(t, "idemgate_wait_duration_seconds_count"), 3);
  EXPECT_DOUBLE_EQ(Value(t, "idemgate_wait_duration_seconds_sum"), 0.501);
  EXPECT_EQ(t.find("end=\"none\""), std::string::npos);
}

TEST(MetricsRender, EveryLineIsValidExposition) {
  Metrics metrics(1);
  metrics.shard(0).RecordExchange({});
  std::istringstream in(metrics.Render());
  static const std::regex kSample(
      R"re([a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+)re");
  static const std::regex kMeta(R"re(# (HELP|TYPE) [a-z_]+ .+)re");
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#", 0) == 0) {
      EXPECT_TRUE(std::regex_match(line, kMeta)) << line;
    } else {
      EXPECT_TRUE(std::regex_match(line, kSample)) << line;
      ++samples;
    }
  }
  EXPECT_GT(samples, 50);
}

TEST(MetricsRender, ShardsAreSummedAtScrape) {
  Metrics metrics(3);
  ExchangeSample fresh;
  fresh.outcome = Outcome::kFresh;
  fresh.upstream_status = 201;
  fresh.total_us = 700;       // bucket le=0.001
  fresh.upstream_us = 3'000;  // bucket le=0.005
  ExchangeSample rejected;
  rejected.outcome = Outcome::kRejected;
  rejected.error = ErrorCode::kIdempotencyKeyInvalid;
  rejected.total_us = 40'000'000;  // +Inf only
  metrics.shard(0).RecordExchange(fresh);
  metrics.shard(2).RecordExchange(fresh);
  metrics.shard(1).RecordExchange(rejected);
  metrics.shard(1).ConnectionOpened();
  metrics.shard(2).ConnectionOpened();
  metrics.shard(2).ConnectionClosed(CloseReason::kIdleTimeout);
  metrics.shard(0).RecordStoreOp(StoreOp::kComplete, 120);
  metrics.ObserveBatch(3, 180);
  metrics.ObserveBatch(1000, 30'000);
  metrics.SetRecordsSource([] { return uint64_t{77}; });
  metrics.SetAccessLogDroppedSource([] { return uint64_t{5}; });

  std::string t = metrics.Render();
  EXPECT_EQ(Value(t, "idemgate_requests_total{outcome=\"fresh\"}"), 2);
  EXPECT_EQ(Value(t, "idemgate_connections_closed_total{reason=\"idle_timeout\"}"), 1);
  EXPECT_EQ(Value(t, "idemgate_connections_closed_total{reason=\"shutdown\"}"), 0);
  EXPECT_EQ(
      Value(t, "idemgate_requests_total{outcome=\"rejected\",code=\"idempotency_key_invalid\"}"),
      1);
  EXPECT_EQ(Value(t, "idemgate_error_responses_total{code=\"idempotency_key_invalid\"}"), 1);
  EXPECT_EQ(Value(t, "idemgate_upstream_responses_total{class=\"2xx\"}"), 2);
  // Request duration by outcome: the two fresh ones, and the rejected one apart.
  const std::string fresh_h = "idemgate_request_duration_seconds_bucket{outcome=\"fresh\",";
  EXPECT_EQ(Value(t, fresh_h + "le=\"0.0005\"}"), 0);
  EXPECT_EQ(Value(t, fresh_h + "le=\"0.001\"}"), 2);
  EXPECT_EQ(Value(t, fresh_h + "le=\"+Inf\"}"), 2);
  EXPECT_EQ(Value(t, "idemgate_request_duration_seconds_count{outcome=\"fresh\"}"), 2);
  EXPECT_DOUBLE_EQ(Value(t, "idemgate_request_duration_seconds_sum{outcome=\"fresh\"}"), 0.0014);
  const std::string rejected_h = "idemgate_request_duration_seconds_bucket{outcome=\"rejected\",";
  EXPECT_EQ(Value(t, rejected_h + "le=\"30\"}"), 0);
  EXPECT_EQ(Value(t, rejected_h + "le=\"+Inf\"}"), 1);
  EXPECT_DOUBLE_EQ(Value(t, "idemgate_request_duration_seconds_sum{outcome=\"rejected\"}"), 40);
  EXPECT_EQ(Value(t, "idemgate_request_duration_seconds_count{outcome=\"replay\"}"), 0);
  EXPECT_EQ(Value(t, "idemgate_request_duration_seconds_count"), -1);  // no unlabelled series
  EXPECT_EQ(Value(t, "idemgate_upstream_duration_seconds_bucket{le=\"0.0025\"}"), 0);
  EXPECT_EQ(Value(t, "idemgate_upstream_duration_seconds_bucket{le=\"0.005\"}"), 2);
  EXPECT_EQ(Value(t, "idemgate_upstream_duration_seconds_count"), 2);  // not the rejected one
  EXPECT_EQ(
      Value(t, "idemgate_store_operation_duration_seconds_bucket{op=\"complete\",le=\"0.00025\"}"),
      1);
  EXPECT_EQ(Value(t, "idemgate_store_operation_duration_seconds_count{op=\"claim\"}"), 0);
  EXPECT_EQ(Value(t, "idemgate_store_batch_size_bucket{le=\"4\"}"), 1);
  EXPECT_EQ(Value(t, "idemgate_store_batch_size_bucket{le=\"1024\"}"), 2);
  EXPECT_EQ(Value(t, "idemgate_store_batch_size_sum"), 1003);
  EXPECT_EQ(Value(t, "idemgate_store_write_duration_seconds_bucket{le=\"0.00025\"}"), 1);
  EXPECT_EQ(Value(t, "idemgate_store_write_duration_seconds_bucket{le=\"0.025\"}"), 1);
  EXPECT_EQ(Value(t, "idemgate_store_write_duration_seconds_bucket{le=\"0.05\"}"), 2);
  EXPECT_DOUBLE_EQ(Value(t, "idemgate_store_write_duration_seconds_sum"), 0.03018);
  EXPECT_EQ(Value(t, "idemgate_connections_open"), 1);
  EXPECT_EQ(Value(t, "idemgate_store_records"), 77);
  EXPECT_EQ(Value(t, "idemgate_access_log_dropped_total"), 5);
}

TEST(MetricsRender, ConcurrentWritersLoseNothing) {
  Metrics metrics(4);
  std::vector<std::thread> threads;
  ExchangeSample replay;
  replay.outcome = Outcome::kReplay;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&metrics, i, replay] {
      for (int n = 0; n < 10'000; ++n) metrics.shard(i).RecordExchange(replay);
    });
  }
  std::thread batches([&metrics] {
    for (int n = 0; n < 10'000; ++n) metrics.ObserveBatch(2, 150);
  });
  // Scrapes while writers run must not crash or go backwards.
  double last = 0;
  for (int s = 0; s < 20; ++s) {
    double now = Value(metrics.Render(), "idemgate_requests_total{outcome=\"replay\"}");
    EXPECT_GE(now, last);
    last = now;
  }
  for (auto& t : threads) t.join();
  batches.join();
  std::string t = metrics.Render();
  EXPECT_EQ(Value(t, "idemgate_requests_total{outcome=\"replay\"}"), 40'000);
  EXPECT_EQ(Value(t, "idemgate_store_batch_size_count"), 10'000);
  EXPECT_EQ(Value(t, "idemgate_store_write_duration_seconds_count"), 10'000);
}

}  // namespace
}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics: per-worker shards of relaxed atomic counters and histograms, written on
// the data plane without locks and summed only when /metrics is scraped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/conn/conn_types.h"
#include "proxy/exchange/report_types.h"
#include "proxy/policy/errors.h"
#include "proxy/upstream/upstream_types.h"

namespace idemgate {

class MetricsWriter;
class UpstreamStats;

inline constexpr size_t kOutcomeCount = static_cast<size_t>(Outcome::kRejected) + 1;
inline constexpr size_t kErrorCodeCount = static_cast<size_t>(ErrorCode::kUpstreamTimeout) + 1;

// The codes an answer with outcome "rejected" can carry: those the gateway answers before
// anything went upstream, outside the in_flight (409) and mismatch (422) outcomes. Only these get
// an idemgate_requests_total{outcome="rejected",code} series, so no series stays 0 forever.
bool CanBeRejected(ErrorCode code);

// A Prometheus label value: backslash, quote and line break escaped, as the text format asks.
std::string LabelEscape(std::string_view text);

// Fixed upper bounds (inclusive, in the histogram's unit); +Inf is implicit.
class Histogram {
 public:
  explicit Histogram(std::vector<uint64_t> bounds);
  void Observe(uint64_t value);  // thread-safe (relaxed)
  // Adds this histogram's counts into `counts` (size bounds+1) and `sum`.
  void AddTo(std::vector<uint64_t>* counts, uint64_t* sum) const;
  const std::vector<uint64_t>& bounds() const { return bounds_; }

 private:
  std::vector<uint64_t> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<uint64_t> sum_{0};
};

// One worker's counters. Written by its loop (and nothing else on the hot path).
class MetricsShard {
 public:
  MetricsShard();
  void RecordExchange(const ExchangeSample& sample);
  void RecordStoreOp(StoreOp op, int64_t micros);
  void ConnectionOpened() { connections_.fetch_add(1, std::memory_order_relaxed); }
  void ConnectionClosed(CloseReason reason) {
    connections_.fetch_sub(1, std::memory_order_relaxed);
    Inc(closed_[static_cast<size_t>(reason)]);
  }
  void ConnectionRefused() { Inc(connections_refused_); }  // limits.max_connections
  void AcceptError() { Inc(accept_errors_); }
  void AnswerDropped() { Inc(answers_dropped_); }  // limits.max_unsent_bytes

 private:
  friend class Metrics;
  static void Inc(std::atomic<uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
  }

  std::array<std::atomic<uint64_t>, kOutcomeCount> outcomes_{};
  std::array<std::atomic<uint64_t>, kProtocolCount> protocols_{};  // every request, by protocol
  std::array<std::atomic<uint64_t>, kErrorCodeCount> rejected_{};  // outcome rejected, by code
  std::array<std::atomic<uint64_t>, kErrorCodeCount> errors_{};    // every error answer
  std::array<std::atomic<uint64_t>, 5> status_classes_{};          // upstream 1xx..5xx
  std::array<std::atomic<uint64_t>, kUpstreamErrorKinds> upstream_errors_{};
  std::atomic<int64_t> connections_{0};
  std::atomic<uint64_t> connections_refused_{0};
  std::array<std::atomic<uint64_t>, kCloseReasonCount> closed_{};  // by CloseReason
  std::atomic<uint64_t> accept_errors_{0};
  std::atomic<uint64_t> answers_dropped_{0};
  std::deque<Histogram> request_latency_;  // by Outcome (a deque: Histogram does not move)
  Histogram upstream_latency_;
  std::array<std::atomic<uint64_t>, kWaitEndCount> waits_{};  // §10: by WaitEnd (kNone unused)
  Histogram wait_latency_;
  std::array<Histogram, kStoreOpCount> store_latency_;  // by StoreOp
};

class Metrics {
 public:
  explicit Metrics(int shards);
  ~Metrics();
  MetricsShard& shard(int index) { return *shards_[index]; }
  int shard_count() const { return static_cast<int>(shards_.size()); }

  // One group commit, from the store's writer thread (thread-safe): how many records it wrote,
  // and how long its write took (with store.sync, the WAL's fdatasync included).
  void ObserveBatch(size_t records, int64_t write_us) {
    batch_size_.Observe(records);
    batch_write_.Observe(static_cast<uint64_t>(write_us < 0 ? 0 : write_us));
  }
  // Gauges read at scrape time (set once at start-up, before any scrape).
  void SetRecordsSource(std::function<uint64_t()> fn) { records_ = std::move(fn); }
  void SetAccessLogDroppedSource(std::function<uint64_t()> fn) { log_dropped_ = std::move(fn); }
  // More families, rendered at scrape time after these (build, process, reload: ops_metrics.h).
  void SetExtraSource(std::function<std::string()> fn) { extra_ = std::move(fn); }
  void SetUnsentBytesSource(std::function<uint64_t()> fn) { unsent_bytes_ = std::move(fn); }
  // POST /backup's outcome (the admin thread); `unix_ms`: when a written one finished.
  void BackupFinished(bool written, int64_t unix_ms) {
    (written ? backups_written_ : backups_failed_).fetch_add(1, std::memory_order_relaxed);
    if (written) last_backup_ms_.store(unix_ms, std::memory_order_relaxed);
  }
  void SetWaitersSource(std::function<uint64_t()> fn) { waiters_ = std::move(fn); }
  // Every upstream group's servers, in every loop (written by the loops, read at scrape and by
  // /readyz).
  UpstreamStats& upstream_stats() { return *upstream_stats_; }
  const UpstreamStats& upstream_stats() const { return *upstream_stats_; }

  // The Prometheus text exposition format, version 0.0.4.
  std::string Render() const;

 private:
  void RenderHistograms(MetricsWriter* w) const;
  void RenderGauges(MetricsWriter* w) const;
  void RenderConnectionLimits(MetricsWriter* w) const;
  void RenderWaits(MetricsWriter* w) const;
  void RenderUpstreamServers(MetricsWriter* w) const;

  std::vector<std::unique_ptr<MetricsShard>> shards_;
  Histogram batch_size_;
  Histogram batch_write_;  // microseconds
  std::function<uint64_t()> records_;
  std::function<uint64_t()> log_dropped_;
  std::function<std::string()> extra_;
  std::function<uint64_t()> unsent_bytes_;
  std::atomic<uint64_t> backups_written_{0};
  std::atomic<uint64_t> backups_failed_{0};
  std::atomic<int64_t> last_backup_ms_{0};  // 0: none written since start
  std::function<uint64_t()> waiters_;
  std::unique_ptr<UpstreamStats> upstream_stats_;
};

inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace idemgate

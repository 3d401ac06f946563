// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics: lock-free per-worker recording, aggregation and text rendering at scrape.
#include "proxy/ops/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "proxy/upstream/upstream_stats.h"

namespace idemgate {

namespace {

// Latencies are recorded in microseconds and rendered in seconds.
const std::vector<uint64_t>& RequestBoundsUs() {
  static const std::vector<uint64_t> bounds = {
      500,     1'000,   2'500,     5'000,     10'000,    25'000,     50'000,    100'000,
      250'000, 500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000, 30'000'000};
  return bounds;
}

const std::vector<uint64_t>& StoreBoundsUs() {
  static const std::vector<uint64_t> bounds = {100,     250,     500,      1'000,  2'500,
                                               5'000,   10'000,  25'000,   50'000, 100'000,
                                               250'000, 500'000, 1'000'000};
  return bounds;
}

const std::vector<uint64_t>& BatchBounds() {
  static const std::vector<uint64_t> bounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return bounds;
}

const char* UpstreamErrorName(UpstreamError error) {
  switch (error) {
    case UpstreamError::kNone:
      return "none";
    case UpstreamError::kUnavailable:
      return "unavailable";
    case UpstreamError::kFailed:
      return "failed";
    case UpstreamError::kTooLarge:
      return "too_large";
    case UpstreamError::kTimeout:
      return "timeout";
  }
  return "unknown";
}

const char* StoreOpName(size_t op) {
  static const char* kNames[kStoreOpCount] = {"claim", "complete", "release"};
  return kNames[op];
}

uint64_t Load(const std::atomic<uint64_t>& value) { return value.load(std::memory_order_relaxed); }

}  // namespace

// A line builder for the exposition format.
class MetricsWriter {
 public:
  void Family(const char* name, const char* type, const char* help) {
    Printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  }
  void Sample(const char* name, const std::string& labels, uint64_t value) {
    Printf("%s%s%s%s %" PRIu64 "\n", name, labels.empty() ? "" : "{", labels.c_str(),
           labels.empty() ? "" : "}", value);
  }
  // `scale` turns the recorded unit into the rendered one (1e-6: microseconds -> seconds).
  void HistogramSamples(const char* name, const std::string& labels,
                        const std::vector<uint64_t>& bounds, const std::vector<uint64_t>& counts,
                        uint64_t sum, double scale) {
    std::string prefix = labels.empty() ? "" : labels + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cumulative += counts[i];
      Printf("%s_bucket{%sle=\"%.9g\"} %" PRIu64 "\n", name, prefix.c_str(), bounds[i] * scale,
             cumulative);
    }
    cumulative += counts[bounds.size()];
    Printf("%s_bucket{%sle=\"+Inf\"} %" PRIu64 "\n", name, prefix.c_str(), cumulative);
    std::string braces = labels.empty() ? "" : "{" + labels + "}";
    Printf("%s_sum%s %.9g\n", name, braces.c_str(), sum * scale);
    Printf("%s_count%s %" PRIu64 "\n", name, braces.c_str(), cumulative);
  }
  std::string Take() { return std::move(out_); }

 private:
  template <typename... Args>
  void Printf(const char* format, Args... args) {
    char buf[512];
    int n = snprintf(buf, sizeof(buf), format, args...);
    if (n > 0) out_.append(buf, std::min<size_t>(n, sizeof(buf) - 1));
  }
  std::string out_;
};

Histogram::Histogram(std::vector<uint64_t> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(uint64_t value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::AddTo(std::vector<uint64_t>* counts, uint64_t* sum) const {
  counts->resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) (*counts)[i] += Load(counts_[i]);
  *sum += Load(sum_);
}

std::string LabelEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

bool CanBeRejected(ErrorCode code) {
  switch (code) {
    case ErrorCode::kIdempotencyKeyInUse:   // outcome in_flight
    case ErrorCode::kIdempotencyKeyReused:  // outcome mismatch
    case ErrorCode::kUpstreamUnavailable:   // passthrough, or fresh/takeover (claim released)
    case ErrorCode::kUpstreamFailed:        // sent upstream: fresh, takeover, lost_attempt, ...
    case ErrorCode::kNotForwarded:          // a claim that ran out: fresh or takeover
    case ErrorCode::kUpstreamTimeout:
      return false;
    default:
      return true;
  }
}

MetricsShard::MetricsShard()
    : upstream_latency_(RequestBoundsUs()),
      wait_latency_(RequestBoundsUs()),
      store_latency_{Histogram(StoreBoundsUs()), Histogram(StoreBoundsUs()),
                     Histogram(StoreBoundsUs())} {
  for (size_t i = 0; i < kOutcomeCount; ++i) request_latency_.emplace_back(RequestBoundsUs());
}

void MetricsShard::RecordExchange(const ExchangeSample& s) {
  Inc(outcomes_[static_cast<size_t>(s.outcome)]);
  Inc(protocols_[static_cast<size_t>(s.protocol)]);
  if (s.error) {
    Inc(errors_[static_cast<size_t>(*s.error)]);
    if (s.outcome == Outcome::kRejected) Inc(rejected_[static_cast<size_t>(*s.error)]);
  }
  if (s.upstream_status >= 100 && s.upstream_status < 600) {
    Inc(status_classes_[s.upstream_status / 100 - 1]);
  }
  if (s.upstream_error && *s.upstream_error != UpstreamError::kNone) {
    Inc(upstream_errors_[static_cast<size_t>(*s.upstream_error)]);
  }
  request_latency_[static_cast<size_t>(s.outcome)].Observe(
      static_cast<uint64_t>(std::max<int64_t>(0, s.total_us)));
  if (s.upstream_us >= 0) upstream_latency_.Observe(static_cast<uint64_t>(s.upstream_us));
  if (s.wait_end != WaitEnd::kNone) {
    Inc(waits_[static_cast<size_t>(s.wait_end)]);
    wait_latency_.Observe(static_cast<uint64_t>(std::max<int64_t>(0, s.wait_us)));
  }
}

void MetricsShard::RecordStoreOp(StoreOp op, int64_t micros) {
  uint64_t value = static_cast<uint64_t>(std::max<int64_t>(0, micros));
  store_latency_[static_cast<size_t>(op)].Observe(value);
}

Metrics::~Metrics() = default;

Metrics::Metrics(int shards)
    : batch_size_(BatchBounds()),
      batch_write_(StoreBoundsUs()),
      upstream_stats_(std::make_unique<UpstreamStats>()) {
  for (int i = 0; i < std::max(1, shards); ++i) shards_.push_back(std::make_unique<MetricsShard>());
}

namespace {

// Sums one counter array over every shard.
template <size_t N, typename Member>
std::array<uint64_t, N> SumArray(const std::vector<std::unique_ptr<MetricsShard>>& shards,
                                 Member member) {
  std::array<uint64_t, N> out{};
  for (const auto& shard : shards) {
    const auto& values = member(*shard);
    for (size_t i = 0; i < N; ++i) out[i] += Load(values[i]);
  }
  return out;
}

std::string Label(const char* name, const char* value) {
  return std::string(name) + "=\"" + value + "\"";
}

// A label from the config (a group name, a host), its value escaped.
std::string Escaped(const char* name, const std::string& value) {
  return std::string(name) + "=\"" + LabelEscape(value) + "\"";
}

}  // namespace

std::string Metrics::Render() const {
  MetricsWriter w;
  auto outcomes = SumArray<kOutcomeCount>(
      shards_, [](auto& s) -> auto& { return s.outcomes_; });
  auto rejected = SumArray<kErrorCodeCount>(
      shards_, [](auto& s) -> auto& { return s.rejected_; });
  auto errors = SumArray<kErrorCodeCount>(
      shards_, [](auto& s) -> auto& { return s.errors_; });
  auto protocols = SumArray<kProtocolCount>(
      shards_, [](auto& s) -> auto& { return s.protocols_; });
  auto classes = SumArray<5>(
      shards_, [](auto& s) -> auto& { return s.status_classes_; });
  auto upstream_errors = SumArray<kUpstreamErrorKinds>(
      shards_, [](auto& s) -> auto& { return s.upstream_errors_; });

  w.Family("idemgate_requests_total", "counter",
           "Requests by how they ended; rejected ones also by error code.");
  for (size_t i = 0; i < kOutcomeCount; ++i) {
    auto outcome = static_cast<Outcome>(i);
    if (outcome == Outcome::kRejected) continue;
    w.Sample("idemgate_requests_total", Label("outcome", OutcomeName(outcome)), outcomes[i]);
  }
  for (size_t i = 0; i < kErrorCodeCount; ++i) {
    if (!CanBeRejected(static_cast<ErrorCode>(i))) continue;
    const char* code = GetErrorInfo(static_cast<ErrorCode>(i)).code;
    w.Sample("idemgate_requests_total", Label("outcome", "rejected") + "," + Label("code", code),
             rejected[i]);
  }
  w.Family("idemgate_requests_by_protocol_total", "counter",
           "Requests (every outcome) by the protocol the client spoke.");
  for (size_t i = 0; i < kProtocolCount; ++i) {
    w.Sample("idemgate_requests_by_protocol_total",
             Label("protocol", ProtocolName(static_cast<Protocol>(i))), protocols[i]);
  }
  w.Family("idemgate_error_responses_total", "counter",
           "Error answers written by the gateway itself, by error code (any outcome).");
  for (size_t i = 0; i < kErrorCodeCount; ++i) {
    const char* code = GetErrorInfo(static_cast<ErrorCode>(i)).code;
    w.Sample("idemgate_error_responses_total", Label("code", code), errors[i]);
  }
  w.Family("idemgate_upstream_responses_total", "counter", "Upstream responses by status class.");
  for (size_t i = 0; i < 5; ++i) {
    std::string cls = std::to_string(i + 1) + "xx";
    w.Sample("idemgate_upstream_responses_total", Label("class", cls.c_str()), classes[i]);
  }
  w.Family("idemgate_upstream_errors_total", "counter", "Upstream failures by kind.");
  for (size_t i = 1; i < kUpstreamErrorKinds; ++i) {
    w.Sample("idemgate_upstream_errors_total",
             Label("kind", UpstreamErrorName(static_cast<UpstreamError>(i))), upstream_errors[i]);
  }
  RenderUpstreamServers(&w);
  RenderHistograms(&w);
  RenderGauges(&w);
  std::string out = w.Take();
  if (extra_) out += extra_();
  return out;
}

// Each server of each upstream group, summed over the worker loops (each has its own copy of
// the group, so a server taken out after a refused connect is out in the loop that saw it).
void Metrics::RenderUpstreamServers(MetricsWriter* w) const {
  const std::vector<UpstreamStats::Server> servers = upstream_stats_->Snapshot();
  auto labels = [](const UpstreamStats::Server& s) {
    return Escaped("group", s.group) + "," + Escaped("server", s.server) + "," +
           Escaped("address", s.address);
  };
  w->Family("idemgate_upstream_server_requests_total", "counter",
            "Calls sent to each server of an upstream group (health checks not counted).");
  for (const auto& s : servers) {
    w->Sample("idemgate_upstream_server_requests_total", labels(s), s.requests);
  }
  w->Family("idemgate_upstream_server_errors_total", "counter",
            "Failed calls to each server of an upstream group, by kind.");
  for (const auto& s : servers) {
    for (size_t i = 1; i < kUpstreamErrorKinds; ++i) {
      w->Sample("idemgate_upstream_server_errors_total",
                labels(s) + "," + Label("kind", UpstreamErrorName(static_cast<UpstreamError>(i))),
                s.errors[i]);
    }
  }
  w->Family("idemgate_upstream_server_taken_out_total", "counter",
            "Times a server was taken out: a connect that failed (nothing sent), or a failed "
            "health check.");
  for (const auto& s : servers) {
    w->Sample("idemgate_upstream_server_taken_out_total", labels(s) + ",reason=\"connect\"",
              s.taken_out);
    w->Sample("idemgate_upstream_server_taken_out_total", labels(s) + ",reason=\"health_check\"",
              s.health_failed);
  }
  w->Family("idemgate_upstream_server_state", "gauge",
            "Worker loops that see each server in each state now (up, taken_out, "
            "health_check_failed); they sum to server.workers.");
  for (const auto& s : servers) {
    if (s.loops_up + s.loops_out + s.loops_health_down == 0) continue;  // gone
    w->Sample("idemgate_upstream_server_state", labels(s) + ",state=\"up\"", s.loops_up);
    w->Sample("idemgate_upstream_server_state", labels(s) + ",state=\"taken_out\"", s.loops_out);
    w->Sample("idemgate_upstream_server_state", labels(s) + ",state=\"health_check_failed\"",
              s.loops_health_down);
  }
}

void Metrics::RenderHistograms(MetricsWriter* w) const {
  auto render = [&](const char* name, const char* help, const std::string& labels, auto pick,
                    bool family, double scale) {
    if (family) w->Family(name, "histogram", help);
    std::vector<uint64_t> counts;
    uint64_t sum = 0;
    const Histogram* first = nullptr;
    for (const auto& shard : shards_) {
      const Histogram& h = pick(*shard);
      if (!first) first = &h;
      h.AddTo(&counts, &sum);
    }
    w->HistogramSamples(name, labels, first->bounds(), counts, sum, scale);
  };
  for (size_t i = 0; i < kOutcomeCount; ++i) {
    render(
        "idemgate_request_duration_seconds",
        "Time from a complete request to its answer, by outcome.",
        Label("outcome", OutcomeName(static_cast<Outcome>(i))),
        [i](const MetricsShard& s) -> const Histogram& { return s.request_latency_[i]; }, i == 0,
        1e-6);
  }
  render(
      "idemgate_upstream_duration_seconds", "Time from sending upstream to its outcome.", "",
      [](const MetricsShard& s) -> const Histogram& { return s.upstream_latency_; }, true, 1e-6);
  for (size_t op = 0; op < kStoreOpCount; ++op) {
    render(
        "idemgate_store_operation_duration_seconds",
        "Time from a store call to its callback, by operation.", Label("op", StoreOpName(op)),
        [op](const MetricsShard& s) -> const Histogram& { return s.store_latency_[op]; }, op == 0,
        1e-6);
  }
  // The store's writer thread keeps these two alone: one histogram each, not one per shard.
  auto render_one = [&](const char* name, const char* help, const Histogram& h, double scale) {
    w->Family(name, "histogram", help);
    std::vector<uint64_t> counts;
    uint64_t sum = 0;
    h.AddTo(&counts, &sum);
    w->HistogramSamples(name, "", h.bounds(), counts, sum, scale);
  };
  render_one("idemgate_store_batch_size", "Records written per group commit.", batch_size_, 1.0);
  render_one("idemgate_store_write_duration_seconds",
             "Time of each group commit's write to the store (with store.sync, its WAL sync).",
             batch_write_, 1e-6);
}

void Metrics::RenderGauges(MetricsWriter* w) const {
  int64_t open = 0;
  for (const auto& shard : shards_) open += shard->connections_.load(std::memory_order_relaxed);
  w->Family("idemgate_connections_open", "gauge", "Client connections currently open.");
  w->Sample("idemgate_connections_open", "", static_cast<uint64_t>(std::max<int64_t>(0, open)));
  w->Family("idemgate_store_records", "gauge", "Approximate number of records stored.");
  w->Sample("idemgate_store_records", "", records_ ? records_() : 0);
  w->Family("idemgate_access_log_dropped_total", "counter",
            "Access log lines dropped because the write buffer was full.");
  w->Sample("idemgate_access_log_dropped_total", "", log_dropped_ ? log_dropped_() : 0);
  w->Family("idemgate_backups_total", "counter", "POST /backup calls by result.");
  w->Sample("idemgate_backups_total", Label("result", "written"), Load(backups_written_));
  w->Sample("idemgate_backups_total", Label("result", "failed"), Load(backups_failed_));
  w->Family("idemgate_backup_last_written_timestamp_seconds", "gauge",
            "When the last backup was written (Unix time; 0: none since the gateway started).");
  w->Sample("idemgate_backup_last_written_timestamp_seconds", "",
            static_cast<uint64_t>(last_backup_ms_.load(std::memory_order_relaxed) / 1000));
  RenderConnectionLimits(w);
  RenderWaits(w);
}

// SPEC §10: duplicates waiting now, how their waits ended, and how long they were.
void Metrics::RenderWaits(MetricsWriter* w) const {
  w->Family("idemgate_waiters", "gauge",
            "Duplicates waiting now for the first answer of their key (limits.max_waiters).");
  w->Sample("idemgate_waiters", "", waiters_ ? waiters_() : 0);
  auto waits = SumArray<kWaitEndCount>(
      shards_, [](auto& s) -> auto& { return s.waits_; });
  w->Family("idemgate_waits_total", "counter",
            "Duplicates that waited for a first answer, by how the wait ended.");
  for (size_t i = 1; i < kWaitEndCount; ++i) {
    w->Sample("idemgate_waits_total", Label("end", WaitEndName(static_cast<WaitEnd>(i))), waits[i]);
  }
  w->Family("idemgate_wait_duration_seconds", "histogram",
            "Time a duplicate waited for the first answer of its key.");
  std::vector<uint64_t> counts;
  uint64_t sum = 0;
  for (const auto& shard : shards_) shard->wait_latency_.AddTo(&counts, &sum);
  w->HistogramSamples("idemgate_wait_duration_seconds", "", shards_[0]->wait_latency_.bounds(),
                      counts, sum, 1e-6);
}

// What limits.max_connections, limits.max_unsent_bytes and the descriptor limit turned away.
void Metrics::RenderConnectionLimits(MetricsWriter* w) const {
  uint64_t refused = 0, accept_errors = 0, dropped = 0;
  for (const auto& shard : shards_) {
    refused += Load(shard->connections_refused_);
    accept_errors += Load(shard->accept_errors_);
    dropped += Load(shard->answers_dropped_);
  }
  w->Family("idemgate_connections_closed_total", "counter",
            "Client connections closed, by why they were closed.");
  for (size_t i = 0; i < kCloseReasonCount; ++i) {
    uint64_t n = 0;
    for (const auto& shard : shards_) n += Load(shard->closed_[i]);
    w->Sample("idemgate_connections_closed_total",
              Label("reason", CloseReasonName(static_cast<CloseReason>(i))), n);
  }
  w->Family("idemgate_connections_refused_total", "counter",
            "Connections closed at accept because limits.max_connections were open.");
  w->Sample("idemgate_connections_refused_total", Label("reason", "max_connections"), refused);
  w->Family("idemgate_accept_errors_total", "counter",
            "Failed accept() calls (descriptor limit reached, ...); each pauses accepting.");
  w->Sample("idemgate_accept_errors_total", "", accept_errors);
  w->Family("idemgate_answers_dropped_total", "counter",
            "Connections closed instead of queueing an answer past limits.max_unsent_bytes.");
  w->Sample("idemgate_answers_dropped_total", Label("reason", "max_unsent_bytes"), dropped);
  w->Family("idemgate_unsent_bytes", "gauge",
            "Bytes of answers queued for clients that have not read them (shared bodies once).");
  w->Sample("idemgate_unsent_bytes", "", unsent_bytes_ ? unsent_bytes_() : 0);
}

}  // namespace idemgate

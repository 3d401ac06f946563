// SPDX-License-Identifier: Apache-2.0
// What one finished request reports, built in one place for every kind of request: the
// exchange (guarded), the passthrough relay and the errors a connection answers itself. The
// metrics' sample and the access-log entry are both made from one RequestReport.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "proxy/exchange/report_types.h"
#include "store/record.h"

namespace idemgate {

struct RequestReport {
  Outcome outcome = Outcome::kPassthrough;
  Protocol protocol = Protocol::kHttp11;  // what the client spoke
  std::optional<ErrorCode> error;         // the gateway's own error answer, if any
  int status = 0;                         // what the client was answered
  int upstream_status = 0;                // 0: no upstream response
  std::optional<UpstreamError> upstream_error;
  int64_t total_us = 0;
  int64_t upstream_us = -1;           // -1: nothing went upstream
  WaitEnd wait_end = WaitEnd::kNone;  // a duplicate that waited for a first answer (§10)
  int64_t wait_us = -1;               // -1: did not wait
  std::string_view method, path, client_ip, request_id, error_detail;
  uint32_t attempt = 0;  // fresh and takeover only
  uint64_t bytes_out = 0;
  bool client_closed = false;      // the client went away before its answer
  const ScopeId* scope = nullptr;  // a guarded request's scope and key (hashed for the log)
  std::string_view key;
};

ExchangeSample SampleOf(const RequestReport& report);
// The access-log entry, stamped now; views into `report`, which must outlive it.
AccessEntry AccessEntryOf(const RequestReport& report);

// Counts `report` and, when `recorder` keeps an access log, writes its line. `Recorder` has
// WantsAccessEntry() and RecordExchange(sample, entry) (ExchangeEnv, ClientEnv).
template <class Recorder>
void RecordReport(Recorder& recorder, const RequestReport& report) {
  const ExchangeSample sample = SampleOf(report);
  if (!recorder.WantsAccessEntry()) return recorder.RecordExchange(sample, nullptr);
  const AccessEntry entry = AccessEntryOf(report);
  recorder.RecordExchange(sample, &entry);
}

}  // namespace idemgate

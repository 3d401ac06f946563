// SPDX-License-Identifier: Apache-2.0
// The one report builder (see report.h).
#include "proxy/exchange/report.h"

#include "proxy/policy/digest.h"

namespace idemgate {

const char* ProtocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kHttp10:
      return "HTTP/1.0";
    case Protocol::kHttp2:
      return "HTTP/2";
    default:
      return "HTTP/1.1";
  }
}

Protocol ProtocolOf(int http_major, int http_minor) {
  if (http_major >= 2) return Protocol::kHttp2;
  return http_minor == 0 ? Protocol::kHttp10 : Protocol::kHttp11;
}

ExchangeSample SampleOf(const RequestReport& report) {
  ExchangeSample sample;
  sample.outcome = report.outcome;
  sample.protocol = report.protocol;
  sample.error = report.error;
  sample.upstream_status = report.upstream_status;
  sample.upstream_error = report.upstream_error;
  sample.total_us = report.total_us;
  sample.upstream_us = report.upstream_us;
  sample.wait_end = report.wait_end;
  sample.wait_us = report.wait_us;
  return sample;
}

AccessEntry AccessEntryOf(const RequestReport& report) {
  AccessEntry entry;
  entry.time = std::chrono::system_clock::now();
  entry.method = report.method;
  entry.path = report.path;
  entry.protocol = ProtocolName(report.protocol);
  entry.client_ip = report.client_ip;
  entry.request_id = report.request_id;
  entry.status = report.status;
  entry.outcome = OutcomeName(report.outcome);
  entry.error = report.error;
  entry.error_detail = report.error_detail;
  entry.attempt = report.attempt;
  entry.total_us = report.total_us;
  entry.upstream_us = report.upstream_us;
  entry.wait_us = report.wait_us;
  entry.bytes_out = report.bytes_out;
  entry.client_closed = report.client_closed;
  if (report.scope != nullptr) entry.key_hash = KeyHash(*report.scope, report.key);
  return entry;
}

}  // namespace idemgate

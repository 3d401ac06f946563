// SPDX-License-Identifier: Apache-2.0
// A record as the admin API shows it (see record_json.h).
#include "proxy/ops/record_json.h"

#include "proxy/ops/access_log.h"
#include "proxy/policy/guard.h"

namespace idemgate {

std::string RecordJson(const Record& record, const std::string& record_id) {
  bool completed = record.state == RecordState::kCompleted;
  std::string out = "{\"record_id\":\"" + record_id + "\",\"state\":\"";
  out += completed ? "completed" : "in_flight";
  out += "\",\"attempt\":" + std::to_string(record.attempt);
  out += ",\"created\":\"" + FormatRfc3339(record.created_ms, false) + "\"";
  out += ",\"expires\":\"" + FormatRfc3339(record.expires_ms, false) + "\"";
  out += ",\"fingerprint\":\"" + FingerprintPrefix(record.fingerprint) + "\"";
  if (completed) {
    out += ",\"status\":" + std::to_string(record.response.status);
  } else {
    out += ",\"lease_until\":\"" + FormatRfc3339(record.lease_until_ms, false) + "\"";
  }
  return out + "}";
}

std::string StateName(const Record& record, TimeMs now) {
  if (record.state == RecordState::kCompleted) return "completed";
  return now < record.lease_until_ms ? "in_flight" : "in_flight_expired";
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// A record as the admin API shows it (GET and DELETE /records, the key_hash lookup).
#pragma once

#include <string>

#include "store/record.h"

namespace idemgate {

// The record's JSON object: its id, state, attempt, times, fingerprint prefix, and the stored
// status or the lease. `record_id`: what a backend sees in Idempotency-Record (SPEC §12 A1).
std::string RecordJson(const Record& record, const std::string& record_id);

// "completed", "in_flight" (lease alive) or "in_flight_expired" (a retry may take it over).
std::string StateName(const Record& record, TimeMs now);

}  // namespace idemgate

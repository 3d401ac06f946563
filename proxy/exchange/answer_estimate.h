// SPDX-License-Identifier: Apache-2.0
// When a first attempt's answer is likely there, for a 409's Retry-After (SPEC §5): the p90 of
// the route's recent guarded upstream times, kept per worker thread (no lock on the request
// path), minus how long the attempt has run; at least 1 s and never past the lease left.
#pragma once

#include <cstdint>
#include <memory>

#include "conf/config.h"

namespace idemgate {

// A guarded attempt under `route` (its effective config) took `upstream_us` upstream.
void RecordGuardedUpstreamTime(const std::shared_ptr<const Config>& route, int64_t upstream_us);

// Retry-After seconds for a retry of an attempt under `route` that has run `elapsed_ms`, its
// lease ending in `lease_left_s` (>= 1): lease_left_s while the route has no recent times.
int64_t EstimateRetryAfterSeconds(const std::shared_ptr<const Config>& route, int64_t elapsed_ms,
                                  int64_t lease_left_s);

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// [[routes]]: ordered path-prefix rules, each running its requests with the top-level config
// plus the keys it sets (a subset of [idempotency] and [limits], same names and checks, read
// through the key table), an upstream group, and statuses answered but not stored.
#pragma once

#include <string>
#include <string_view>

#include "conf/config.h"
#include "conf/config_keys.h"
#include "conf/config_reader.h"

namespace idemgate::conf {

// Whether a route may set the key (in its [routes.idempotency] / [routes.limits] table).
bool IsRouteKey(const KeySpec& key);

// Reads every [[routes]] entry into config->routes, after the top-level sections (and their
// cross-key checks) were read: each route's keys, its group, and C4 for its lease, ttl and its
// group's timeouts. Throws ConfigError naming the route and the key.
void ReadRoutes(const Context& ctx, Config* config);

// Re-derives each route's effective config from config's top level (after a reload kept the
// running value of restart-only top-level keys), keeping the keys each route sets.
void RebuildRoutes(Config* config);

// Whether every route's effective config passes C4 (after RebuildRoutes: a reload keeps the
// running named groups, whose timeouts may outlast a lease the new file shortened).
bool RoutesFitC4(const Config& config);

// Whether the two route tables agree in what only a restart applies: the order, each route's
// prefix, host and upstream group, and the methods and fingerprint_headers a route sets (they
// decide which requests are guarded and how they are fingerprinted). True: the new table
// applies live.
bool SameRoutesShape(const Config& a, const Config& b);

}  // namespace idemgate::conf

// Config reload (SIGHUP): which keys take effect live and which wait for a restart.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "conf/config.h"

namespace idemgate {

struct ReloadPlan {
  std::shared_ptr<const Config> config;  // the new config, with restart-only keys kept as running
  std::vector<std::string> ignored;      // restart-only keys whose value changed
};

// Each key's reload class is declared in its row of the key table (conf/config_keys.cc).
// Restart-only: listen.*, upstream.url/servers/ca_file/balance/health_*/fail_timeout/
// resolve_interval and the named groups [upstreams.*], store.*, server.workers, admin.address,
// log.access, scope.* (a new scope secret or header would turn every in-flight retry into a
// fresh key), and idempotency.header/methods/fingerprint_headers (they decide which requests are
// guarded and how they are fingerprinted: changed under live records, a retry would pass through
// and execute again, or get 422). Everything else (limits, timeouts, ttl, lease, require_key,
// admin.token, server.shutdown_grace) applies to exchanges that start after the reload.
// [[routes]]: see conf::SameRoutesShape; a route's ttl, lease, require_key, takeover, limits and
// no_store_statuses are live, the rest of the table restart-only (kept whole when it changed).
ReloadPlan PlanReload(const Config& running, const Config& next);

}  // namespace idemgate

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

// Live: limits, timeouts, idempotency (header, methods, ttl, lease, require_key,
// fingerprint_headers), admin.token, server.shutdown_grace. Restart-only: listen.*,
// upstream.url/ca_file, store.*, server.workers, admin.address, log.access, and scope.* (a new
// scope secret or header would turn every in-flight retry into a fresh key: it must be a
// deliberate restart, never a side effect of a reload).
ReloadPlan PlanReload(const Config& running, const Config& next);

}  // namespace idemgate

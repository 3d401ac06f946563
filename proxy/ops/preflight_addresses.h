// SPDX-License-Identifier: Apache-2.0
// Preflight of the listening addresses: the admin listener and the data listener must not share
// an address (the second bind would fail after the store has been opened), and, for
// --check-config, neither may already be bound by another process.
#pragma once

#include <vector>

#include "conf/config.h"
#include "proxy/ops/preflight.h"

namespace idemgate {

// Appends a problem for an admin.address that overlaps listen.address (the same port on the same
// host, or either on a wildcard host). With `probe_bound`, also one for each address that another
// socket already holds (a test bind, released at once) or that this host cannot bind. An
// address an idemgate process listens on is not a problem: it is the running gateway's (the
// packaged unit checks the file before every reload).
void CheckListenAddresses(const Config& config, bool probe_bound,
                          std::vector<PreflightProblem>* out);

}  // namespace idemgate

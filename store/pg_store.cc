// SPDX-License-Identifier: Apache-2.0
// PgStore: a queue of statements on the store's libevent thread, spread over several libpq
// connections. A statement whose outcome is unknown (its connection broke, or its commit's
// replication wait was cancelled) is sent again until known: every statement here is safe to
// repeat with the same owner token. While no connection is up, new work fails at once (503).
#include "store/pg_store.h"

#include <event2/thread.h>

#include <random>

#include "store/pg_schema.h"
#include "store/pg_store_impl.h"

namespace idemgate {
namespace pg {

uint64_t NewOwner() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  uint64_t v;
  do v = rng();
  while (v == 0);
  return v;
}

void FailOp(Op& op, StoreStatus status) {
  if (op.claim_done) {
    ClaimResult r;
    r.status = std::move(status);
    op.claim_done(std::move(r));
  } else if (op.status_done) {
    op.status_done(std::move(status));
  } else if (op.lookup_done) {
    LookupResult r;
    r.outcome = LookupOutcome::kError;
    op.lookup_done(std::move(r));
  } else if (op.meta_done) {
    op.meta_done(std::move(status), std::nullopt);
  } else if (op.key_hash_done) {
    op.key_hash_done(std::move(status), {});
  }
}

// A primary that vanishes without a reset (a partition, a dead host) is noticed within about
// half a minute instead of the kernel's 15: TCP keepalives and a bound on unacknowledged data.
// The operator's own settings come later in the string and win; a URI is left as it is.
std::string WithNetworkDefaults(const std::string& dsn) {
  if (dsn.find("://") != std::string::npos) return dsn;
  return "keepalives=1 keepalives_idle=10 keepalives_interval=3 keepalives_count=3 "
         "tcp_user_timeout=30000 " +
         dsn;
}

}  // namespace pg

std::unique_ptr<Store> OpenPgStore(const PgStoreOptions& given, std::string* error) {
  PgStoreOptions options = given;
  options.dsn = pg::WithNetworkDefaults(given.dsn);
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });
  if (options.dsn.empty() || options.connections < 1) {
    *error = "store.postgres: dsn and connections >= 1 are required";
    return nullptr;
  }
  uint64_t records = 0;
  if (!pg::PrepareSchema(options.dsn, &records, error)) return nullptr;
  auto store = std::make_unique<pg::PgStore>(options);
  store->Start(records);
  if (!store->WaitUntilUp(std::chrono::seconds(10))) {
    *error = "PostgreSQL accepted the schema connection but no store connection came up";
    return nullptr;
  }
  return store;
}

}  // namespace idemgate

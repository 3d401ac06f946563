// Opens the configured store backend.
#include "store/store_factory.h"

#include <filesystem>

#include "store/pg_store.h"
#include "store/rocks_store.h"

namespace idemgate {

std::unique_ptr<Store> OpenStore(const Config& config, const StoreHooks& hooks,
                                 std::string* error) {
  if (config.store.backend == "postgres") {
    PgStoreOptions options;
    options.dsn = config.store.postgres.dsn;
    options.connections = static_cast<int>(config.store.postgres.connections);
    return OpenPgStore(options, error);
  }
  std::error_code ec;
  std::filesystem::create_directories(config.store.path, ec);
  RocksStoreOptions options;
  options.path = config.store.path;
  options.sync = config.store.sync;
  options.clock = hooks.clock;
  options.on_batch = hooks.on_batch;
  return OpenRocksStore(options, error);
}

std::string DescribeStore(const Config& config) {
  if (config.store.backend == "postgres") {
    return "postgres (" + std::to_string(config.store.postgres.connections) + " connections)";
  }
  return config.store.path + (config.store.sync ? " (sync=true)" : " (sync=false)");
}

}  // namespace idemgate

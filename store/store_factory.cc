// SPDX-License-Identifier: Apache-2.0
// Opens the configured store backend.
#include "store/store_factory.h"

#include <filesystem>
#include <map>

#include "store/pg_store.h"
#include "store/rocks_store.h"

namespace idemgate {

namespace {

std::unique_ptr<Store> OpenBackend(const Config& config, const StoreHooks& hooks,
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

}  // namespace

std::unique_ptr<Store> OpenStore(const Config& config, const StoreHooks& hooks,
                                 std::string* error) {
  // Always over the backend, even with no keys: a sealed record left from a run with encryption
  // on is then refused (503 naming its key), never replayed as it is stored.
  const Config::Store::Encryption& e = config.store.encryption;
  std::shared_ptr<const SealKeys> keys = LoadSealKeys(e.keys, e.active, error);
  if (!keys) return nullptr;
  std::unique_ptr<Store> store = OpenBackend(config, hooks, error);
  if (!store) return store;
  auto sealed = std::make_unique<SealedStore>(std::move(store), std::move(keys));
  if (hooks.sealed != nullptr) *hooks.sealed = sealed.get();
  return sealed;
}

bool ReloadStoreKeys(SealedStore* sealed, const Config& config, std::string* error) {
  const Config::Store::Encryption& e = config.store.encryption;
  std::shared_ptr<const SealKeys> keys = LoadSealKeys(e.keys, e.active, error);
  if (!keys) return false;
  sealed->SetKeys(std::move(keys));
  return true;
}

bool CheckStoreKeys(const Config& config, std::vector<std::string>* lines, std::string* error) {
  const Config::Store::Encryption& e = config.store.encryption;
  if (!LoadSealKeys(e.keys, e.active, error)) return false;
  for (const auto& [id, path] : e.keys) {
    lines->push_back("store.encryption key \"" + id + "\" (" + path + "): ok, " +
                     (id == e.active ? "seals new records and opens"
                                     : "opens only: needed until every record it sealed has "
                                       "expired (the longest ttl after it stopped sealing; see "
                                       "idemgate_store_key_last_seal_seconds)"));
  }
  return true;
}

std::string DescribeStore(const Config& config) {
  if (config.store.backend == "postgres") {
    return "postgres (" + std::to_string(config.store.postgres.connections) + " connections)";
  }
  return config.store.path + (config.store.sync ? " (sync=true)" : " (sync=false)");
}

}  // namespace idemgate

// Helpers for the store tests: temp directories and synchronous wrappers over the async Store.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>

#include "store/rocks_store.h"
#include "store/store.h"

namespace idemgate::testing {

// A fresh directory under $TMPDIR, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "idemgate-store-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A RocksDB store at `path` on `clock` (default options); null, with a test failure, if it fails.
inline std::unique_ptr<Store> OpenRocksAt(const std::string& path, const Clock* clock) {
  RocksStoreOptions options;
  options.path = path;
  options.clock = clock;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(options, &error);
  EXPECT_NE(store, nullptr) << error;
  return store;
}

inline ClaimResult ClaimNow(Store& store, ClaimRequest request) {
  std::promise<ClaimResult> p;
  auto f = p.get_future();
  store.Claim(std::move(request), [&p](ClaimResult r) { p.set_value(std::move(r)); });
  return f.get();
}

inline StoreStatus CompleteNow(Store& store, ClaimToken token, StoredResponse response) {
  std::promise<StoreStatus> p;
  auto f = p.get_future();
  store.Complete(std::move(token), std::move(response),
                 [&p](StoreStatus s) { p.set_value(std::move(s)); });
  return f.get();
}

inline StoreStatus ReleaseNow(Store& store, ClaimToken token) {
  std::promise<StoreStatus> p;
  auto f = p.get_future();
  store.Release(std::move(token), [&p](StoreStatus s) { p.set_value(std::move(s)); });
  return f.get();
}

inline StoreStatus DeleteNow(Store& store, const ScopeId& scope, std::string key) {
  std::promise<StoreStatus> p;
  auto f = p.get_future();
  store.Delete(scope, std::move(key), [&p](StoreStatus s) { p.set_value(std::move(s)); });
  return f.get();
}

inline Fingerprint Fp(uint8_t seed) {
  Fingerprint f{};
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(seed + i);
  return f;
}

inline ScopeId Scope(uint8_t seed) { return Fp(static_cast<uint8_t>(seed ^ 0x5a)); }

inline ClaimRequest Req(std::string key, uint8_t fp = 1, TimeMs lease_ms = 30'000,
                        TimeMs ttl_ms = 24 * 3'600'000LL) {
  ClaimRequest r;
  r.scope = Scope(7);
  r.key = std::move(key);
  r.fingerprint = Fp(fp);
  r.lease_ms = lease_ms;
  r.ttl_ms = ttl_ms;
  return r;
}

inline StoredResponse Resp(int status, std::string body) {
  StoredResponse r;
  r.status = status;
  r.reason = "OK";
  r.headers = {{"Content-Type", "application/json"}};
  r.body = std::move(body);
  return r;
}

}  // namespace idemgate::testing

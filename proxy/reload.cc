// Config reload: merge a freshly parsed config into the running one, key by key.
#include "proxy/reload.h"

namespace idemgate {

namespace {

// Keeps `running`'s value of a restart-only key in `next`, noting it when it changed.
template <typename T>
void KeepRunning(const T& running, T* next, const char* key, std::vector<std::string>* ignored) {
  if (!(running == *next)) {
    ignored->push_back(key);
    *next = running;
  }
}

}  // namespace

ReloadPlan PlanReload(const Config& running, const Config& next_in) {
  auto next = std::make_shared<Config>(next_in);
  std::vector<std::string> ignored;
  KeepRunning(running.listen.address, &next->listen.address, "listen.address", &ignored);
  next->listen.addr = running.listen.addr;
  KeepRunning(running.listen.tls_cert, &next->listen.tls_cert, "listen.tls_cert", &ignored);
  KeepRunning(running.listen.tls_key, &next->listen.tls_key, "listen.tls_key", &ignored);
  KeepRunning(running.upstream.url, &next->upstream.url, "upstream.url", &ignored);
  next->upstream.addr = running.upstream.addr;
  next->upstream.tls = running.upstream.tls;
  KeepRunning(running.upstream.ca_file, &next->upstream.ca_file, "upstream.ca_file", &ignored);
  KeepRunning(running.store.path, &next->store.path, "store.path", &ignored);
  KeepRunning(running.store.sync, &next->store.sync, "store.sync", &ignored);
  KeepRunning(running.server.workers, &next->server.workers, "server.workers", &ignored);
  KeepRunning(running.admin.address, &next->admin.address, "admin.address", &ignored);
  next->admin.addr = running.admin.addr;
  KeepRunning(running.log.access, &next->log.access, "log.access", &ignored);
  KeepRunning(running.scope.header, &next->scope.header, "scope.header", &ignored);
  KeepRunning(running.scope.secret_file, &next->scope.secret_file, "scope.secret_file", &ignored);
  KeepRunning(running.scope.secret, &next->scope.secret, "scope.secret (file contents)", &ignored);
  return ReloadPlan{std::move(next), std::move(ignored)};
}

}  // namespace idemgate

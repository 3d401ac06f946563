// SPDX-License-Identifier: Apache-2.0
#include "proxy/ops/preflight.h"

#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "proxy/net/tls.h"
#include "proxy/ops/preflight_addresses.h"

namespace idemgate {
namespace {

namespace fs = std::filesystem;

std::string Problem(const std::string& key, const std::string& what) {
  return "key '" + key + "': " + what;
}

// "" when `host` resolves, else the resolver's reason.
std::string ResolveError(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), "1", &hints, &res);
  if (res) freeaddrinfo(res);
  return rc == 0 ? "" : gai_strerror(rc);
}

void CheckHost(const std::string& key, const std::string& host,
               std::vector<PreflightProblem>* out) {
  if (host.empty()) return;
  std::string error = ResolveError(host);
  if (!error.empty()) {
    out->push_back({key, Problem(key, "host '" + host + "' does not resolve: " + error)});
  }
}

// The nearest existing ancestor of `path` (itself when it exists).
fs::path NearestExisting(const fs::path& path) {
  fs::path p = fs::absolute(path).lexically_normal();
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_relative_path()) p = p.parent_path();
  return p;
}

// "" when this process can create and write files in directory `path` (creating it if needed).
std::string DirectoryUsable(const std::string& path) {
  fs::path existing = NearestExisting(path);
  std::error_code ec;
  if (!fs::is_directory(existing, ec)) return "'" + existing.string() + "' is not a directory";
  if (access(existing.c_str(), W_OK | X_OK) != 0) {
    bool is_target = existing == fs::absolute(path).lexically_normal();
    return std::string(is_target ? "the directory" : "its parent") + " '" + existing.string() +
           "' is not writable by this user (uid " + std::to_string(geteuid()) +
           "): " + strerror(errno);
  }
  return "";
}

void CheckStore(const Config& config, std::vector<PreflightProblem>* out) {
  if (config.store.backend != "rocksdb") return;  // store.path is the embedded store's
  std::string error = DirectoryUsable(config.store.path);
  if (!error.empty()) {
    out->push_back({"store.path", Problem("store.path", "cannot use '" + config.store.path +
                                                            "' for the store: " + error)});
  }
}

void CheckAccessLog(const Config& config, std::vector<PreflightProblem>* out) {
  const std::string& dest = config.log.access;
  if (dest == "stdout" || dest == "off" || dest.empty()) return;
  fs::path dir = fs::absolute(dest).parent_path();
  std::error_code ec;
  std::string what;
  if (!fs::is_directory(dir, ec)) {
    what = "directory '" + dir.string() + "' does not exist (the gateway creates the file only)";
  } else if (access(dest.c_str(), F_OK) == 0 ? access(dest.c_str(), W_OK) != 0
                                             : access(dir.c_str(), W_OK | X_OK) != 0) {
    what = "'" + dest + "' is not writable by this user: " + strerror(errno);
  }
  if (!what.empty()) out->push_back({"log.access", Problem("log.access", what)});
}

// Every server of every group resolves (the gateway resolves them at start-up and would not
// start); each https group's ca_file loads.
void CheckGroups(const Config& config, std::vector<PreflightProblem>* out) {
  auto check = [out](const std::string& section, const Config::Upstream& group) {
    const std::string key = section + (group.servers.empty() ? ".url" : ".servers");
    std::vector<HostPort> servers = group.addrs;
    if (servers.empty()) servers.push_back(group.addr);
    for (const HostPort& server : servers) CheckHost(key, server.host, out);
    std::string error;
    if (!section.starts_with("upstreams.") || !group.tls) return;
    if (!MakeClientTlsContext(group.ca_file, &error)) {
      out->push_back({section + ".ca_file", Problem(section + ".ca_file", error)});
    }
  };
  check("upstream", config.upstream);
  for (const auto& [name, group] : config.upstream_groups) check("upstreams." + name, group);
}

void CheckTls(const Config& config, std::vector<PreflightProblem>* out) {
  std::string error;
  const Config::Listen& listen = config.listen;
  if (!listen.tls_cert.empty() && !MakeServerTlsContext(listen.tls_cert, listen.tls_key, &error)) {
    if (error.find("mismatch") != std::string::npos ||
        error.find("does not match") != std::string::npos) {
      error = Problem("listen.tls_key", "the key '" + listen.tls_key +
                                            "' does not match the certificate '" + listen.tls_cert +
                                            "' (listen.tls_cert)");
    }
    bool key = error.find("tls_key") != std::string::npos;
    out->push_back({key ? "listen.tls_key" : "listen.tls_cert", error});
  }
  // [[listen.certificates]]: the pairs after tls_cert/tls_key's.
  const std::vector<std::string>& files = listen.certificate_files;
  const size_t first = listen.tls_cert.empty() ? 0 : 2;
  for (size_t i = first; i + 1 < files.size(); i += 2) {
    if (MakeServerTlsContext(files[i], files[i + 1], &error)) continue;
    const std::string key = "listen.certificates[" + std::to_string((i - first) / 2 + 1) + "]";
    if (error.find("mismatch") != std::string::npos) {
      error = "the key '" + files[i + 1] + "' does not match the certificate '" + files[i] + "'";
    }
    out->push_back({key, Problem(key, error)});
  }
  if (config.upstream.tls && !MakeClientTlsContext(config.upstream.ca_file, &error)) {
    out->push_back({"upstream.ca_file", Problem("upstream.ca_file", error)});
  }
}

}  // namespace

std::vector<PreflightProblem> Preflight(const Config& config, bool probe_bound) {
  std::vector<PreflightProblem> out;
  CheckGroups(config, &out);
  CheckHost("listen.address", config.listen.addr.host, &out);
  if (!config.admin.address.empty()) CheckHost("admin.address", config.admin.addr.host, &out);
  CheckStore(config, &out);
  CheckAccessLog(config, &out);
  CheckTls(config, &out);
  CheckListenAddresses(config, probe_bound, &out);
  return out;
}

std::string PrepareStoreDirectory(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return "key 'store.path': cannot create '" + path + "': " + ec.message();
  if (chmod(path.c_str(), 0700) != 0) {
    return "key 'store.path': cannot make '" + path + "' private (chmod 0700): " + strerror(errno);
  }
  return "";
}

std::string ExplainStoreOpenError(const std::string& path, const std::string& error) {
  std::string cause;
  if (error.find("lock file") != std::string::npos &&
      (error.find("temporarily unavailable") != std::string::npos ||
       error.find("No locks available") != std::string::npos)) {
    cause =
        "another process has this store open (is another idemgate running with the same "
        "store.path?)";
  } else if (error.find("Permission denied") != std::string::npos ||
             error.find("Read-only file system") != std::string::npos) {
    cause = "the store's files are not writable by this user (uid " + std::to_string(geteuid()) +
            "); check the owner and mode of the directory and its files";
  } else if (error.find("No space left") != std::string::npos) {
    cause = "the disk holding the store is full";
  } else if (error.find("Corruption") != std::string::npos) {
    cause = "the store's files are damaged; restore it from a backup";
  }
  std::string out = "key 'store.path': cannot open the store at '" + path + "'";
  if (!cause.empty()) out += ": " + cause;
  return out + " (" + error + ")";
}

}  // namespace idemgate

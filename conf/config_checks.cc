// SPDX-License-Identifier: Apache-2.0
#include "conf/config_checks.h"

#include <algorithm>
#include <cstdlib>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "conf/config_values.h"

namespace idemgate::conf::checks {
namespace {

constexpr std::array<std::string_view, 4> kSafeMethods = {"GET", "HEAD", "OPTIONS", "TRACE"};

// A key file's path: relative to the config's directory; "$CREDENTIALS_DIRECTORY/NAME" is read
// from systemd's LoadCredential= directory (the variable set by systemd for the service).
std::string ResolveKeyPath(const Context& ctx, const SectionReader& r, const std::string& path) {
  constexpr std::string_view kCredentials = "$CREDENTIALS_DIRECTORY/";
  if (path.rfind(kCredentials, 0) != 0) return ctx.Resolve(path);
  const char* dir = std::getenv("CREDENTIALS_DIRECTORY");
  if (dir == nullptr || *dir == '\0') {
    r.Fail("keys", "\"" + path +
                       "\" names $CREDENTIALS_DIRECTORY, which is not set (systemd sets " +
                       "it for a unit with LoadCredential=)");
  }
  return std::string(dir) + "/" + path.substr(kCredentials.size());
}

}  // namespace

void CheckListenAddress(const Context&, const SectionReader& r, bool, Config* c) {
  std::string why;
  auto addr = ParseHostPort(c->listen.address, /*allow_port_zero=*/true, &why);
  if (!addr) r.Fail("address", "bad address \"" + c->listen.address + "\": " + why);
  c->listen.addr = std::move(*addr);
}

void CheckTrustedProxies(const Context&, const SectionReader& r, bool, Config* c) {
  c->listen.trusted.clear();
  for (const std::string& text : c->listen.trusted_proxies) {
    std::string why;
    std::optional<Cidr> cidr = ParseCidr(text, &why);
    if (!cidr) {
      r.Fail("trusted_proxies",
             "\"" + text + "\" is not an address block like \"10.0.0.0/8\": " + why);
      continue;
    }
    c->listen.trusted.push_back(*cidr);
  }
}

void CheckUpstreamUrl(const Context&, const SectionReader& r, bool, Config* c) {
  std::string why;
  auto url = ParseHttpUrl(c->upstream.url, &why);
  if (!url) r.Fail("url", "bad url \"" + c->upstream.url + "\": " + why);
  c->upstream.tls = url->tls;
  c->upstream.addr = std::move(url->addr);
  c->upstream.addrs = {c->upstream.addr};
}

// servers: instead of url; one scheme for all, no server twice.
void CheckUpstreamServers(const Context&, const SectionReader& r, bool present, Config* c) {
  Config::Upstream& up = c->upstream;
  if (!present || up.servers.empty()) return;  // [] = url
  if (r.Has("url")) r.Fail("servers", "set url (one server) or servers, not both");
  up.addrs.clear();
  for (const std::string& server : up.servers) {
    std::string why;
    auto url = ParseHttpUrl(server, &why);
    if (!url) r.Fail("servers", "bad url \"" + server + "\": " + why);
    if (up.addrs.empty()) up.tls = url->tls;
    if (url->tls != up.tls) {
      r.Fail("servers", "mixes http:// and https://; a group uses one scheme");
    }
    if (std::find(up.addrs.begin(), up.addrs.end(), url->addr) != up.addrs.end()) {
      r.Fail("servers", "\"" + server + "\" is listed more than once");
    }
    up.addrs.push_back(url->addr);
  }
  up.addr = up.addrs.front();
}

void CheckBalance(const Context&, const SectionReader& r, bool, Config* c) {
  const std::string& balance = c->upstream.balance;
  if (balance != "round_robin" && balance != "least_conn") {
    r.Fail("balance", "must be \"round_robin\" or \"least_conn\", not \"" + balance + "\"");
  }
}

void CheckHealthPath(const Context&, const SectionReader& r, bool, Config* c) {
  const std::string& path = c->upstream.health_path;
  if (path.empty()) return;
  if (path.front() != '/' || !IsVisibleAscii(path)) {
    r.Fail("health_path", "\"" + path + "\" must be a path starting with '/', without spaces");
  }
}

// The group's last key: also the checks across its keys (ca_file only for https).
void CheckUpstreamHost(const Context&, const SectionReader& r, bool, Config* c) {
  if (!IsVisibleAscii(c->upstream.host)) {
    r.Fail("host", "\"" + c->upstream.host + "\" must be a host[:port] without spaces");
  }
  if (!c->upstream.ca_file.empty() && !c->upstream.tls) {
    r.Fail("ca_file", "is set but the upstream is not https://");
  }
}

// Methods: upper-cased tokens, no safe methods (SPEC G1), no duplicates, at least one.
void CheckMethods(const Context&, const SectionReader& r, bool present, Config* c) {
  if (!present) return;
  std::vector<std::string>& methods = c->idempotency.methods;
  if (methods.empty()) r.Fail("methods", "must list at least one method, like [\"POST\"]");
  for (std::string& method : methods) {
    if (!IsHttpToken(method)) r.Fail("methods", "\"" + method + "\" is not a valid method");
    method = ToUpperAscii(method);
    if (std::find(kSafeMethods.begin(), kSafeMethods.end(), method) != kSafeMethods.end()) {
      r.Fail("methods", method + " is a safe method and cannot be guarded (it needs no key)");
    }
    if (std::count(methods.begin(), methods.end(), method) > 1) {
      r.Fail("methods", method + " is listed more than once");
    }
  }
}

void CheckRequireKey(const Context&, const SectionReader& r, bool, Config* c) {
  for (const std::string& prefix : c->idempotency.require_key) {
    if (prefix.empty() || prefix.front() != '/') {
      r.Fail("require_key", "\"" + prefix + "\" must be a path prefix starting with '/'");
    }
    if (!IsVisibleAscii(prefix)) {
      r.Fail("require_key", "\"" + prefix + "\" must be visible ASCII without spaces");
    }
  }
}

// Fingerprint headers: lower-cased tokens, no duplicates (each would be hashed twice).
void CheckFingerprintHeaders(const Context&, const SectionReader& r, bool, Config* c) {
  std::vector<std::string>& headers = c->idempotency.fingerprint_headers;
  for (std::string& header : headers) {
    if (!IsHttpToken(header)) {
      r.Fail("fingerprint_headers", "\"" + header + "\" is not a valid header name");
    }
    header = ToLowerAscii(header);
    if (std::count(headers.begin(), headers.end(), header) > 1) {
      r.Fail("fingerprint_headers", "\"" + header + "\" is listed more than once");
    }
  }
}

void ReadPathFile(const Context& ctx, const SectionReader& r, std::string_view key,
                  std::string* path, std::string* contents) {
  if (path->empty()) return;
  *path = ctx.Resolve(*path);
  std::string data;
  std::string why;
  if (!ReadWholeFile(*path, &data, &why)) r.Fail(key, "cannot read \"" + *path + "\": " + why);
  if (data.empty()) r.Fail(key, "the file \"" + *path + "\" is empty");
  if (contents != nullptr) *contents = std::move(data);
}

void LoadScopeSecret(const Context& ctx, const SectionReader& r, bool, Config* c) {
  ReadPathFile(ctx, r, "secret_file", &c->scope.secret_file, &c->scope.secret);
}

void CheckStorePath(const Context&, const SectionReader& r, bool, Config* c) {
  if (c->store.path.empty()) r.Fail("path", "must not be empty");
}

void CheckStoreBackend(const Context&, const SectionReader& r, bool, Config* c) {
  const std::string& backend = c->store.backend;
  if (backend != "rocksdb" && backend != "postgres") {
    r.Fail("backend", "must be \"rocksdb\" or \"postgres\", not \"" + backend + "\"");
  }
}

// The password never in the config file (SPEC M7): libpq reads it from its passfile.
void CheckPostgresDsn(const Context&, const SectionReader& r, bool, Config* c) {
  const std::string& dsn = c->store.postgres.dsn;
  const size_t scheme = dsn.find("://");
  const size_t at = dsn.find('@');
  if (dsn.find("password") != std::string::npos ||
      (scheme != std::string::npos && at != std::string::npos && dsn.find(':', scheme + 3) < at)) {
    r.Fail("dsn", "must not hold the password; put it in a libpq passfile (PGPASSFILE)");
  }
  if (c->store.backend == "postgres" && dsn.empty()) {
    r.Fail("dsn", "must be set when store.backend is \"postgres\"");
  }
}

// E1: key ids are short names; `active` is one of them (or "" = seal nothing). Encryption keys
// the fingerprints with a key derived from scope.secret (E3), so it needs one.
void CheckEncryptionKeys(const Context& ctx, const SectionReader& r, bool, Config* c) {
  Config::Store::Encryption& e = c->store.encryption;
  for (auto& [id, path] : e.keys) {
    const bool valid_id =
        !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                 ch == '.';
        });
    if (!valid_id) r.Fail("keys", "key id \"" + id + "\" must be 1 to 64 of [A-Za-z0-9._-]");
    if (path.empty()) r.Fail("keys", "key \"" + id + "\" has an empty path");
    path = ResolveKeyPath(ctx, r, path);
  }
  if (!e.active.empty() && e.keys.count(e.active) == 0) {
    r.Fail("active", "\"" + e.active + "\" is not one of the ids in store.encryption.keys");
  }
  e.enabled = !e.keys.empty();
  if (e.enabled && c->scope.secret.empty()) {
    r.Fail("keys",
           "encryption needs scope.secret_file: fingerprints are keyed with a key derived "
           "from it, and the scope ids of an encrypted store must be keyed too");
  }
}

void CheckAdminAddress(const Context&, const SectionReader& r, bool, Config* c) {
  if (c->admin.address.empty()) return;
  std::string why;
  auto addr = ParseHostPort(c->admin.address, /*allow_port_zero=*/true, &why);
  if (!addr) {
    r.Fail("address",
           "bad address \"" + c->admin.address + "\": " + why + " (\"\" disables admin)");
  }
  c->admin.addr = std::move(*addr);
}

void CheckLogAccess(const Context&, const SectionReader& r, bool, Config* c) {
  if (c->log.access.empty()) {
    r.Fail("access", "must not be empty (use \"stdout\", \"off\" or a file path)");
  }
}

}  // namespace idemgate::conf::checks

// TOML text -> immutable Config: every section and key checked, errors located as FILE:LINE.
#include "conf/config.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "conf/config_reader.h"
#include "conf/config_values.h"

namespace idemgate {
namespace {

using conf::ConfigError;
using conf::SectionReader;

constexpr std::array<std::string_view, 9> kSections = {
    "listen", "upstream", "idempotency", "scope", "store", "limits", "server", "admin", "log"};
constexpr std::array<std::string_view, 4> kSafeMethods = {"GET", "HEAD", "OPTIONS", "TRACE"};
constexpr int64_t kMaxWorkers = 64;
constexpr uint64_t kMaxStoredBody = 1ULL << 30;  // record.cc encodes body sizes in 32 bits

// Reads a whole file; on failure returns false with *why set to the reason.
bool ReadWholeFile(const std::string& path, std::string* out, std::string* why) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    *why = std::strerror(errno);
    return false;
  }
  std::string data;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) data.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    *why = std::strerror(error);
    return false;
  }
  *out = std::move(data);
  return true;
}

// What every section parser needs besides its own table.
struct Context {
  std::string file;           // as given, for messages
  std::filesystem::path dir;  // the config file's directory, for relative paths
  const toml::table* root = nullptr;

  SectionReader Section(std::string_view name, std::initializer_list<std::string_view> keys) const {
    const toml::node* node = root->get(name);
    SectionReader reader(node == nullptr ? nullptr : node->as_table(), std::string(name), file,
                         keys);
    reader.RejectUnknownKeys();
    return reader;
  }

  std::string Resolve(const std::string& path) const {
    if (path.empty() || std::filesystem::path(path).is_absolute() || dir.empty()) return path;
    return (dir / path).lexically_normal().string();
  }
};

// Reads a file-path key (relative to the config's directory), checking that it is readable.
void ReadPathKey(const Context& ctx, const SectionReader& r, std::string_view key,
                 std::string* path, std::string* contents = nullptr) {
  if (!r.String(key, path) || path->empty()) return;
  *path = ctx.Resolve(*path);
  std::string data;
  std::string why;
  if (!ReadWholeFile(*path, &data, &why)) r.Fail(key, "cannot read \"" + *path + "\": " + why);
  if (data.empty()) r.Fail(key, "the file \"" + *path + "\" is empty");
  if (contents != nullptr) *contents = std::move(data);
}

void ReadHeaderName(const SectionReader& r, std::string_view key, std::string* out) {
  if (!r.String(key, out)) return;
  if (out->empty()) r.Fail(key, "must not be empty");
  if (!conf::IsHttpToken(*out)) r.Fail(key, "\"" + *out + "\" is not a valid header name");
}

void ParseListen(const Context& ctx, Config::Listen* out) {
  SectionReader r = ctx.Section("listen", {"address", "tls_cert", "tls_key"});
  r.String("address", &out->address);
  std::string why;
  auto addr = conf::ParseHostPort(out->address, /*allow_port_zero=*/true, &why);
  if (!addr) r.Fail("address", "bad address \"" + out->address + "\": " + why);
  out->addr = std::move(*addr);
  ReadPathKey(ctx, r, "tls_cert", &out->tls_cert);
  ReadPathKey(ctx, r, "tls_key", &out->tls_key);
  if (out->tls_cert.empty() != out->tls_key.empty()) {
    const bool cert = !out->tls_cert.empty();
    r.Fail(cert ? "tls_cert" : "tls_key",
           cert ? "is set but listen.tls_key is not; TLS needs both"
                : "is set but listen.tls_cert is not; TLS needs both");
  }
}

SectionReader ParseUpstream(const Context& ctx, Config::Upstream* out) {
  SectionReader r =
      ctx.Section("upstream", {"url", "connect_timeout", "response_timeout", "ca_file"});
  r.String("url", &out->url);
  std::string why;
  auto url = conf::ParseHttpUrl(out->url, &why);
  if (!url) r.Fail("url", "bad url \"" + out->url + "\": " + why);
  out->tls = url->tls;
  out->addr = std::move(url->addr);
  r.Duration("connect_timeout", &out->connect_timeout_ms);
  r.Duration("response_timeout", &out->response_timeout_ms);
  ReadPathKey(ctx, r, "ca_file", &out->ca_file);
  if (!out->ca_file.empty() && !out->tls) {
    r.Fail("ca_file", "is set but upstream.url is not https://");
  }
  return r;
}

// Methods: upper-cased tokens, no safe methods (SPEC G1), no duplicates, at least one.
void CheckMethods(const SectionReader& r, std::vector<std::string>* methods) {
  if (methods->empty()) r.Fail("methods", "must list at least one method, like [\"POST\"]");
  for (std::string& method : *methods) {
    if (!conf::IsHttpToken(method)) r.Fail("methods", "\"" + method + "\" is not a valid method");
    method = conf::ToUpperAscii(method);
    if (std::find(kSafeMethods.begin(), kSafeMethods.end(), method) != kSafeMethods.end()) {
      r.Fail("methods", method + " is a safe method and cannot be guarded (it needs no key)");
    }
    if (std::count(methods->begin(), methods->end(), method) > 1) {
      r.Fail("methods", method + " is listed more than once");
    }
  }
}

void CheckRequireKey(const SectionReader& r, const std::vector<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    if (prefix.empty() || prefix.front() != '/') {
      r.Fail("require_key", "\"" + prefix + "\" must be a path prefix starting with '/'");
    }
    for (unsigned char c : prefix) {
      if (c <= 0x20 || c >= 0x7f) {
        r.Fail("require_key", "\"" + prefix + "\" must be visible ASCII without spaces");
      }
    }
  }
}

// Fingerprint headers: lower-cased tokens, no duplicates (each would be hashed twice).
void CheckFingerprintHeaders(const SectionReader& r, std::vector<std::string>* headers) {
  for (std::string& header : *headers) {
    if (!conf::IsHttpToken(header)) {
      r.Fail("fingerprint_headers", "\"" + header + "\" is not a valid header name");
    }
    header = conf::ToLowerAscii(header);
    if (std::count(headers->begin(), headers->end(), header) > 1) {
      r.Fail("fingerprint_headers", "\"" + header + "\" is listed more than once");
    }
  }
}

SectionReader ParseIdempotency(const Context& ctx, Config::Idempotency* out) {
  SectionReader r = ctx.Section(
      "idempotency", {"header", "methods", "ttl", "lease", "require_key", "fingerprint_headers"});
  ReadHeaderName(r, "header", &out->header);
  if (r.StringArray("methods", &out->methods)) CheckMethods(r, &out->methods);
  r.Duration("ttl", &out->ttl_ms);
  r.Duration("lease", &out->lease_ms);
  if (r.StringArray("require_key", &out->require_key)) CheckRequireKey(r, out->require_key);
  if (r.StringArray("fingerprint_headers", &out->fingerprint_headers)) {
    CheckFingerprintHeaders(r, &out->fingerprint_headers);
  }
  return r;
}

void ParseScope(const Context& ctx, Config::Scope* out) {
  SectionReader r = ctx.Section("scope", {"header", "secret_file"});
  ReadHeaderName(r, "header", &out->header);
  ReadPathKey(ctx, r, "secret_file", &out->secret_file, &out->secret);
}

// [store.postgres]: a libpq connection string without the password (libpq's passfile has it).
void ParseStorePostgres(const Context& ctx, const toml::node* node, Config::Store::Postgres* out) {
  SectionReader r(node == nullptr ? nullptr : node->as_table(), "store.postgres", ctx.file,
                  {"dsn", "connections"});
  r.RejectUnknownKeys();
  r.String("dsn", &out->dsn);
  const std::string& dsn = out->dsn;
  size_t scheme = dsn.find("://");
  size_t at = dsn.find('@');
  if (dsn.find("password") != std::string::npos ||
      (scheme != std::string::npos && at != std::string::npos &&
       dsn.find(':', scheme + 3) < at)) {
    r.Fail("dsn", "must not hold the password; put it in a libpq passfile (PGPASSFILE)");
  }
  if (r.Int("connections", &out->connections) &&
      (out->connections < 1 || out->connections > 256)) {
    r.Fail("connections", "must be between 1 and 256");
  }
}

void ParseStore(const Context& ctx, Config::Store* out) {
  SectionReader r = ctx.Section("store", {"backend", "path", "sync", "postgres"});
  if (r.String("backend", &out->backend) && out->backend != "rocksdb" &&
      out->backend != "postgres") {
    r.Fail("backend", "must be \"rocksdb\" or \"postgres\", not \"" + out->backend + "\"");
  }
  if (r.String("path", &out->path) && out->path.empty()) r.Fail("path", "must not be empty");
  r.Bool("sync", &out->sync);
  const toml::node* store = ctx.root->get("store");
  const toml::node* pg = store != nullptr && store->is_table() ? store->as_table()->get("postgres")
                                                               : nullptr;
  ParseStorePostgres(ctx, pg, &out->postgres);
  if (out->backend == "postgres" && out->postgres.dsn.empty()) {
    r.Fail("backend", "is \"postgres\" but store.postgres.dsn is not set");
  }
}

void ParseLimits(const Context& ctx, Config::Limits* out) {
  SectionReader r = ctx.Section("limits", {"max_request_body", "max_response_body",
                                           "max_header_bytes", "client_timeout", "idle_timeout"});
  r.Size("max_request_body", &out->max_request_body);
  if (r.Size("max_response_body", &out->max_response_body) &&
      out->max_response_body > kMaxStoredBody) {
    r.Fail("max_response_body", "must be at most 1GiB (a stored response is held in memory)");
  }
  r.Size("max_header_bytes", &out->max_header_bytes);
  r.Duration("client_timeout", &out->client_timeout_ms);
  r.Duration("idle_timeout", &out->idle_timeout_ms);
}

void ParseServer(const Context& ctx, Config::Server* out) {
  SectionReader r = ctx.Section("server", {"workers", "shutdown_grace"});
  int64_t workers = out->workers;
  if (r.Int("workers", &workers) && (workers < 0 || workers > kMaxWorkers)) {
    r.Fail("workers", "must be between 0 (one per core) and " + std::to_string(kMaxWorkers) +
                          ", got " + std::to_string(workers));
  }
  out->workers = static_cast<int>(workers);
  r.Duration("shutdown_grace", &out->shutdown_grace_ms);
}

void ParseAdmin(const Context& ctx, Config::Admin* out) {
  SectionReader r = ctx.Section("admin", {"address", "token"});
  r.String("address", &out->address);
  r.String("token", &out->token);
  if (out->address.empty()) return;
  std::string why;
  auto addr = conf::ParseHostPort(out->address, /*allow_port_zero=*/true, &why);
  if (!addr) {
    r.Fail("address", "bad address \"" + out->address + "\": " + why + " (\"\" disables admin)");
  }
  out->addr = std::move(*addr);
}

void ParseLog(const Context& ctx, Config::Log* out) {
  SectionReader r = ctx.Section("log", {"access"});
  if (r.String("access", &out->access) && out->access.empty()) {
    r.Fail("access", "must not be empty (use \"stdout\", \"off\" or a file path)");
  }
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// SPEC C4: lease > connect_timeout + response_timeout, and ttl > lease. The line is the key's,
// else its section's, else that of the upstream timeout that made the default lease too short.
void CheckLeaseAndTtl(const Context& ctx, const SectionReader& idem, const SectionReader& upstream,
                      const Config& config) {
  using conf::FormatDurationMs;
  const auto& up = config.upstream;
  const auto& id = config.idempotency;
  const int64_t upstream_ms = SaturatingAdd(up.connect_timeout_ms, up.response_timeout_ms);
  if (id.lease_ms <= upstream_ms) {
    uint32_t line = idem.Line("lease");
    if (line == 0)
      line =
          upstream.Line(upstream.Has("response_timeout") ? "response_timeout" : "connect_timeout");
    throw ConfigError(conf::FormatError(
        ctx.file, line, "idempotency.lease",
        "(" + FormatDurationMs(id.lease_ms) +
            ") must be longer than upstream.connect_timeout + upstream.response_timeout (" +
            FormatDurationMs(up.connect_timeout_ms) + " + " +
            FormatDurationMs(up.response_timeout_ms) + " = " + FormatDurationMs(upstream_ms) +
            "), or a slow attempt could be taken over while it still runs"));
  }
  if (id.ttl_ms <= id.lease_ms) {
    idem.Fail("ttl", "(" + FormatDurationMs(id.ttl_ms) +
                         ") must be longer than idempotency.lease (" +
                         FormatDurationMs(id.lease_ms) + ")");
  }
}

// Refuses top-level keys that are not known sections, and known sections that are not tables.
void CheckSections(const Context& ctx) {
  for (const auto& [key, node] : *ctx.root) {
    const uint32_t line = key.source().begin.line;
    if (std::find(kSections.begin(), kSections.end(), key.str()) == kSections.end()) {
      std::string known;
      for (std::string_view s : kSections) known += (known.empty() ? "" : ", ") + std::string(s);
      throw ConfigError(
          conf::FormatError(ctx.file, line, key.str(), "unknown section (known: " + known + ")"));
    }
    if (!node.is_table()) {
      throw ConfigError(conf::FormatError(ctx.file, line, key.str(),
                                          "expected a section [" + std::string(key.str()) +
                                              "], got " + std::string(conf::TypeName(node))));
    }
  }
}

Config BuildConfig(const Context& ctx) {
  CheckSections(ctx);
  Config config;
  ParseListen(ctx, &config.listen);
  SectionReader upstream = ParseUpstream(ctx, &config.upstream);
  SectionReader idem = ParseIdempotency(ctx, &config.idempotency);
  ParseScope(ctx, &config.scope);
  ParseStore(ctx, &config.store);
  ParseLimits(ctx, &config.limits);
  ParseServer(ctx, &config.server);
  ParseAdmin(ctx, &config.admin);
  ParseLog(ctx, &config.log);
  CheckLeaseAndTtl(ctx, idem, upstream, config);
  return config;
}

std::string SyntaxError(const std::string& file, const toml::parse_error& e) {
  const auto& begin = e.source().begin;
  return file + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column) +
         ": TOML syntax error: " + std::string(e.description());
}

}  // namespace

ConfigResult ParseConfig(std::string_view toml_text, const std::string& filename) {
  ConfigResult result;
  try {
    toml::table root;
    try {
      root = toml::parse(toml_text, filename);
    } catch (const toml::parse_error& e) {
      result.error = SyntaxError(filename, e);
      return result;
    }
    Context ctx{filename, std::filesystem::path(filename).parent_path(), &root};
    result.config = std::make_shared<const Config>(BuildConfig(ctx));
  } catch (const ConfigError& e) {
    result.error = e.what();
  } catch (const std::exception& e) {
    result.error = filename + ": " + e.what();
  } catch (...) {
    result.error = filename + ": unexpected error while reading the configuration";
  }
  return result;
}

ConfigResult LoadConfig(const std::string& path) {
  ConfigResult result;
  try {
    std::string text;
    std::string why;
    if (!ReadWholeFile(path, &text, &why)) {
      result.error = path + ": cannot read the configuration file: " + why;
      return result;
    }
    return ParseConfig(text, path);
  } catch (...) {
    result.error = path + ": cannot read the configuration file";
  }
  return result;
}

}  // namespace idemgate

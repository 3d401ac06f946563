// Config: the whole configuration, parsed once from TOML into an immutable value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace idemgate {

struct HostPort {
  std::string host;  // as written: "0.0.0.0", "127.0.0.1", "localhost", "::1"
  uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};

struct Config {
  struct Listen {
    std::string address = "0.0.0.0:8080";
    HostPort addr;         // parsed from address
    std::string tls_cert;  // PEM file; TLS on the client side when both are set
    std::string tls_key;
  } listen;

  struct Upstream {
    std::string url = "http://127.0.0.1:9000";
    bool tls = false;      // https://
    HostPort addr;         // parsed from url (default port 80 / 443)
    std::string ca_file;   // for https upstreams; empty = system CA store
    int64_t connect_timeout_ms = 5'000;
    int64_t response_timeout_ms = 20'000;
    // A pooled keep-alive connection idle this long is not reused: below the upstream's own
    // keep-alive, so the two ends do not close it together (gunicorn: 2 s, Node: 5 s).
    int64_t idle_timeout_ms = 1'000;
  } upstream;

  struct Idempotency {
    std::string header = "Idempotency-Key";
    std::vector<std::string> methods = {"POST", "PATCH"};  // upper-case
    int64_t ttl_ms = 24 * 3'600'000LL;
    int64_t lease_ms = 30'000;
    std::vector<std::string> require_key;          // path prefixes that must carry a key
    std::vector<std::string> fingerprint_headers;  // lower-cased
    bool takeover = true;  // C5: false = an expired attempt is answered 502, never re-executed
  } idempotency;

  struct Scope {
    std::string header = "Authorization";
    std::string secret_file;  // empty: plain SHA-256
    std::string secret;       // the file's bytes, loaded at parse time
  } scope;

  struct Store {
    std::string backend = "rocksdb";  // "rocksdb" (embedded, one instance) or "postgres" (shared)
    std::string path = "./data";
    bool sync = true;
    struct Postgres {
      std::string dsn;       // libpq connection string; never holds the password (passfile)
      int64_t connections = 8;
    } postgres;
  } store;

  struct Limits {
    uint64_t max_request_body = 1 << 20;
    uint64_t max_response_body = 8 << 20;
    uint64_t max_header_bytes = 64 << 10;
    int64_t client_timeout_ms = 10'000;
    int64_t idle_timeout_ms = 60'000;
    // Client connections open at once, per instance; past it a new one is closed at accept.
    int64_t max_connections = 10'000;
    // Bytes of answers queued for clients that have not read them yet, in total; an answer
    // past it closes its connection (a body shared by several replays counts once).
    uint64_t max_unsent_bytes = 256 << 20;
  } limits;

  struct Server {
    int workers = 0;  // 0 = the number of cores
    int64_t shutdown_grace_ms = 10'000;
  } server;

  struct Admin {
    std::string address = "127.0.0.1:9901";  // empty = no admin listener
    HostPort addr;
    std::string token;  // empty = the record API is off
    std::string backup_dir;  // where POST /backup writes checkpoints; empty = backups off
  } admin;

  struct Log {
    std::string access = "stdout";  // "stdout", "off" or a file path
  } log;
};

struct ConfigResult {
  std::shared_ptr<const Config> config;  // set on success
  std::string error;  // on failure: "FILE:LINE: key 'section.key': what is wrong"
  bool ok() const { return config != nullptr; }
};

// Parses TOML text; `filename` is used in error messages (and to resolve secret_file).
ConfigResult ParseConfig(std::string_view toml_text, const std::string& filename);
ConfigResult LoadConfig(const std::string& path);

// "250ms", "30s", "5m", "24h", "1d" -> milliseconds. nullopt when malformed.
std::optional<int64_t> ParseDurationMs(std::string_view text);
// "512", "64KiB", "1MiB", "2GiB", "10KB", "1MB" -> bytes. nullopt when malformed.
std::optional<uint64_t> ParseSize(std::string_view text);

}  // namespace idemgate

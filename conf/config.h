// SPDX-License-Identifier: Apache-2.0
// Config: the whole configuration, parsed once from TOML into an immutable value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate {

struct HostPort {
  std::string host;  // as written: "0.0.0.0", "127.0.0.1", "localhost", "::1"
  uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};

struct Route;

// An address block of listen.trusted_proxies: IPv4 as IPv4-mapped IPv6, so one compare serves
// both ("10.0.0.0/8" is ::ffff:10.0.0.0/104).
struct Cidr {
  unsigned char addr[16] = {};
  int bits = 0;  // prefix length, 0-128
  bool operator==(const Cidr&) const = default;
};

struct Config {
  struct Listen {
    std::string address = "0.0.0.0:8080";
    HostPort addr;         // parsed from address
    std::string tls_cert;  // PEM file; TLS on the client side when both are set
    std::string tls_key;
    bool http2 = true;  // SPEC §14 H1: h2 by ALPN (TLS) and by prior knowledge (plain)
    bool proxy_protocol = false;               // every connection starts with a PROXY v1/v2 header
    std::vector<std::string> trusted_proxies;  // CIDRs whose X-Forwarded-For is believed
    std::vector<Cidr> trusted;                 // parsed from trusted_proxies
    // Every certificate and key pair, in order (cert, key, cert, key, ...): tls_cert/tls_key
    // first when set, then each [[listen.certificates]]. Empty: plain HTTP.
    std::vector<std::string> certificate_files;
  } listen;

  // An upstream group: one server (url) or several (servers), all http:// or all https://.
  struct Upstream {
    std::string url = "http://127.0.0.1:9000";
    std::vector<std::string> servers;  // instead of url: "http://a:80", ...; empty = url
    bool tls = false;      // https://
    HostPort addr;         // parsed from url, or the first of servers (default port 80 / 443)
    std::vector<HostPort> addrs;  // every server: parsed from servers, else {addr}
    std::string balance = "round_robin";  // or "least_conn"
    std::string health_path;              // active GET health check path; "" = passive only
    int64_t health_interval_ms = 5'000;
    // A server that refused a connection (or failed its health check) is left out this long.
    int64_t fail_timeout_ms = 10'000;
    int64_t resolve_interval_ms = 0;  // re-resolve server names this often; 0 = once
    std::string host;                 // Host header sent upstream; "" = as the client sent it
    std::string ca_file;   // for https upstreams; empty = system CA store
    int64_t connect_timeout_ms = 5'000;
    int64_t response_timeout_ms = 20'000;
    // A pooled keep-alive connection idle this long is not reused: below the upstream's own
    // keep-alive, so the two ends do not close it together (gunicorn: 2 s, Node: 5 s).
    int64_t idle_timeout_ms = 1'000;
    bool operator==(const Upstream&) const = default;
  } upstream;  // the default group

  // Named groups, [upstreams.NAME], each with the keys of [upstream] (defaults as in Config{}).
  std::map<std::string, Upstream, std::less<>> upstream_groups;

  // The group a route names: "" or "default" is [upstream]; nullptr when there is none.
  const Upstream* FindUpstream(std::string_view name) const;
  bool HasUpstream(std::string_view name) const { return FindUpstream(name) != nullptr; }

  struct Idempotency {
    std::string header = "Idempotency-Key";
    std::vector<std::string> methods = {"POST", "PATCH"};  // upper-case
    int64_t ttl_ms = 24 * 3'600'000LL;
    int64_t lease_ms = 30'000;
    std::vector<std::string> require_key;          // path prefixes that must carry a key
    std::vector<std::string> fingerprint_headers;  // lower-cased
    bool takeover = true;  // C5: false = an expired attempt is answered 502, never re-executed
    // SPEC §10: how long a duplicate that finds its key in flight waits for the first answer
    // without Prefer: wait (0 = 409 at once), and the cap on a client's Prefer: wait (0 = off).
    int64_t wait_ms = 0;
    int64_t max_wait_ms = 30'000;
    // Upstream statuses answered but not stored (the claim is released: a retry executes
    // again). Set only by a route ([[routes]] no_store_statuses); none at the top level (R1).
    std::vector<int> no_store_statuses;
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
    // How long the store may leave a claim unconfirmed (then 503; a claim that lands later is
    // given back) and a completion past its lease (then 502, outcome unknown): a store that
    // cannot commit (PostgreSQL waiting for a synchronous standby that is gone, a stalled disk)
    // answers the client instead of leaving it waiting.
    int64_t confirm_timeout_ms = 10'000;
    struct Postgres {
      std::string dsn;       // libpq connection string; never holds the password (passfile)
      int64_t connections = 8;
    } postgres;
    // SPEC §13: stored answers sealed with AES-256-GCM (store/sealing.h reads the key files).
    struct Encryption {
      std::string active;                       // the key id that seals ("" = seal nothing)
      std::map<std::string, std::string> keys;  // key id -> key file (resolved); every one opens
      // Derived: keys were listed at start. Restart-only: it decides whether fingerprints are
      // keyed (E3), which must not change under live records.
      bool enabled = false;
    } encryption;
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
    // Duplicates waiting for a first answer at once (SPEC §10 W3), per instance; past it, 409.
    int64_t max_waiters = 10'000;
    // Concurrent HTTP/2 streams per client connection (SPEC §14 H5).
    int64_t http2_max_streams = 100;
  } limits;

  struct Server {
    int workers = 0;  // 0 = the number of cores
    // How long a worker keeps polling its sockets without sleeping after its last event
    // (0 = it sleeps at once).
    int64_t busy_poll_us = 0;
    int64_t shutdown_grace_ms = 10'000;
    // The Unix socket a new process takes the listeners over through (proxy/handover.h):
    // "" = next to the store (or the runtime directory), "off" = none.
    std::string handover_socket;
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

  // In order; empty in a route's effective config (conf/config_routes.cc).
  std::vector<Route> routes;
  // In a route's effective config: the group `upstream` is a copy of ("" = [upstream]).
  std::string upstream_group;
  // In a route's effective config: the route's host ("" = any). Part of a guarded request's
  // fingerprint when set, so one key sent to two host routes (two backends) is a 422, never
  // the other backend's replay.
  std::string route_host;
};

// One [[routes]] entry: requests whose path starts with `prefix` (and whose Host is `host`, when
// set) run with `effective`, the top-level config with the route's keys applied. First match wins.
struct Route {
  std::string prefix;        // as written; starts with '/', no dot segments, "//" or escapes
  std::string match_prefix;  // lower-cased: what a normalized request path is compared with
  std::string host;      // lower-cased, without port; "" = any host
  std::string upstream;  // the [upstreams.NAME] group; "" = the [upstream] group
  std::vector<int> no_store_statuses;
  std::vector<std::string> overridden;  // the keys the route sets, "idempotency.ttl", ...
  std::string label;                    // "routes[2] (prefix \"/v1/refunds\")", for messages
  std::shared_ptr<const Config> effective;
};

struct ConfigResult {
  std::shared_ptr<const Config> config;  // set on success
  std::string error;  // on failure: "FILE:LINE: key 'section.key': what is wrong"
  // On failure: every problem found in one reading (error is their lines joined by '\n'). A key
  // that fails keeps its default while the rest is read; the checks across keys run only when
  // every key read.
  std::vector<std::string> errors;
  bool ok() const { return config != nullptr; }
};

// Parses TOML text; `filename` is used in error messages (and to resolve secret_file).
ConfigResult ParseConfig(std::string_view toml_text, const std::string& filename);
ConfigResult LoadConfig(const std::string& path);

// "250ms", "30s", "5m", "24h", "1d" -> milliseconds. nullopt when malformed.
std::optional<int64_t> ParseDurationMs(std::string_view text);
// "200us", "1ms", "0s" -> microseconds; nullopt for any other unit or an overflow.
std::optional<int64_t> ParseDurationUs(std::string_view text);
// "512", "64KiB", "1MiB", "2GiB", "10KB", "1MB" -> bytes. nullopt when malformed.
std::optional<uint64_t> ParseSize(std::string_view text);

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// The table of configuration keys (see config_keys.h), their key-specific checks, and the
// generic reading, comparing and formatting of a key's value.
#include "conf/config_keys.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <map>
#include <type_traits>
#include <utility>

#include "conf/config_checks.h"
#include "conf/config_values.h"

namespace idemgate::conf {
namespace {

using namespace checks;  // the Check* functions the table names, and ReadPathFile

constexpr int64_t kSecond = 1'000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = 1 << 30;  // record.cc encodes body sizes in 32 bits

// ----- The table -----

#define FIELD(path) [](Config& c) -> FieldRef { return &c.path; }
constexpr Reload kLive = Reload::kLive;
constexpr Reload kRestart = Reload::kRestart;

const KeySpec kKeys[] = {
    {"listen", "address", Kind::kString, kRestart, FIELD(listen.address), 0, 0, CheckListenAddress,
     "Client-facing address, \"host:port\" or \"[v6]:port\"; port 0 picks a free port."},
    {"listen", "tls_cert", Kind::kPath, kRestart, FIELD(listen.tls_cert), 0, 0, nullptr,
     "PEM certificate chain for TLS towards clients; set together with tls_key (\"\" = plain "
     "HTTP)."},
    {"listen", "tls_key", Kind::kPath, kRestart, FIELD(listen.tls_key), 0, 0, nullptr,
     "PEM private key for tls_cert; set together with tls_cert."},
    {"listen", "http2", Kind::kBool, kRestart, FIELD(listen.http2), 0, 0, nullptr,
     "Accept HTTP/2 from clients: h2 by ALPN on TLS, the preface on plain HTTP (false: HTTP/1.1 "
     "only)."},
    {"listen", "proxy_protocol", Kind::kBool, kRestart, FIELD(listen.proxy_protocol), 0, 0, nullptr,
     "Every connection starts with a PROXY protocol v1 or v2 header (a TCP load balancer's); one "
     "without is closed."},
    {"listen", "trusted_proxies", Kind::kStrings, kLive, FIELD(listen.trusted_proxies), 0, 0,
     CheckTrustedProxies,
     "Address blocks (\"10.0.0.0/8\") of proxies whose X-Forwarded-For names the client ([] = "
     "none)."},

    {"upstream", "url", Kind::kString, kRestart, FIELD(upstream.url), 0, 0, CheckUpstreamUrl,
     "The origin: \"http://host[:port]\" or \"https://host[:port]\", no path (default port 80 "
     "/ 443)."},
    {"upstream", "servers", Kind::kStrings, kRestart, FIELD(upstream.servers), 0, 0,
     CheckUpstreamServers,
     "Instead of url: several servers, like [\"http://a:80\", \"http://b:80\"], one scheme for "
     "all ([] = url)."},
    {"upstream", "ca_file", Kind::kPath, kRestart, FIELD(upstream.ca_file), 0, 0, nullptr,
     "PEM CA bundle to verify an https:// upstream (\"\" = the system CA store); only for "
     "https://."},
    {"upstream", "connect_timeout", Kind::kDuration, kLive, FIELD(upstream.connect_timeout_ms), 0,
     10 * kMinute, nullptr,
     "How long to wait for a connection to the upstream (> 0, at most 10m)."},
    {"upstream", "response_timeout", Kind::kDuration, kLive, FIELD(upstream.response_timeout_ms), 0,
     kDay, nullptr,
     "How long to wait for the upstream's complete response once the request is sent (at most "
     "1d)."},
    {"upstream", "idle_timeout", Kind::kDuration, kLive, FIELD(upstream.idle_timeout_ms), 0, kHour,
     nullptr,
     "A pooled keep-alive connection idle this long is not reused; keep it below the upstream's "
     "keep-alive timeout."},
    {"upstream", "balance", Kind::kString, kRestart, FIELD(upstream.balance), 0, 0, CheckBalance,
     "How a request picks a server: \"round_robin\" or \"least_conn\" (fewest calls in "
     "progress)."},
    {"upstream", "health_path", Kind::kString, kRestart, FIELD(upstream.health_path), 0, 0,
     CheckHealthPath,
     "Path of an active GET health check (2xx/3xx = up) on every server (\"\" = passive "
     "checks only)."},
    {"upstream", "health_interval", Kind::kDuration, kRestart, FIELD(upstream.health_interval_ms),
     0, kHour, nullptr, "How often each server's health_path is checked (at most 1h)."},
    {"upstream", "fail_timeout", Kind::kDuration, kRestart, FIELD(upstream.fail_timeout_ms), 0,
     kHour, nullptr,
     "A server that refused a connection (or timed out connecting) is left out this long, then "
     "tried again (at most 1h)."},
    {"upstream", "resolve_interval", Kind::kDurationOrOff, kRestart,
     FIELD(upstream.resolve_interval_ms), 0, kDay, nullptr,
     "How often server names are resolved again (\"0s\" = once, at start-up; at most 1d)."},
    {"upstream", "host", Kind::kString, kLive, FIELD(upstream.host), 0, 0, CheckUpstreamHost,
     "Host header sent to the upstream (\"\" = the client's own Host)."},

    // header, methods and fingerprint_headers decide which requests are guarded and how they are
    // fingerprinted: changed under live records, a retry would pass through or get 422.
    {"idempotency", "header", Kind::kHeaderName, kRestart, FIELD(idempotency.header), 0, 0, nullptr,
     "The request header that carries the idempotency key (a valid header name; restart-only)."},
    {"idempotency", "methods", Kind::kStrings, kRestart, FIELD(idempotency.methods), 0, 0,
     CheckMethods,
     "Methods guarded when they carry a key (restart-only); GET, HEAD, OPTIONS, TRACE are "
     "refused."},
    {"idempotency", "ttl", Kind::kDuration, kLive, FIELD(idempotency.ttl_ms), 0, 365 * kDay,
     nullptr,
     "How long a record (and its stored response) lives after creation; must exceed lease; at "
     "most 365d."},
    {"idempotency", "lease", Kind::kDuration, kLive, FIELD(idempotency.lease_ms), 0, 7 * kDay,
     nullptr,
     "How long an in-flight attempt owns its key; > connect_timeout + response_timeout; at "
     "most 7d."},
    {"idempotency", "require_key", Kind::kStrings, kLive, FIELD(idempotency.require_key), 0, 0,
     CheckRequireKey,
     "Path prefixes where a guarded method must carry a key, each starting with '/', e.g. "
     "[\"/v1/pay\"]."},
    {"idempotency", "fingerprint_headers", Kind::kStrings, kRestart,
     FIELD(idempotency.fingerprint_headers), 0, 0, CheckFingerprintHeaders,
     "Request headers in the fingerprint (case-insensitive, stored lower-cased; restart-only)."},
    {"idempotency", "takeover", Kind::kBool, kLive, FIELD(idempotency.takeover), 0, 0, nullptr,
     "After a lost attempt (crash or pause past its lease): true = a retry executes again; "
     "false = never twice: the retry gets a stored 502 upstream_failed (C5)."},
    {"idempotency", "wait", Kind::kDurationOrOff, kLive, FIELD(idempotency.wait_ms), 0, kHour,
     nullptr,
     "How long a duplicate whose key is in flight waits for the first answer without Prefer: "
     "wait (0s = 409 at once); at most max_wait."},
    {"idempotency", "max_wait", Kind::kDurationOrOff, kLive, FIELD(idempotency.max_wait_ms), 0,
     kHour, nullptr,
     "Cap on a client's Prefer: wait=N (0s = the preference is ignored); shorter than lease."},

    {"scope", "header", Kind::kHeaderName, kRestart, FIELD(scope.header), 0, 0, nullptr,
     "The credential header whose value namespaces keys (never stored in clear; see secret_file)."},
    {"scope", "secret_file", Kind::kString, kRestart, FIELD(scope.secret_file), 0, 0,
     LoadScopeSecret,
     "File whose bytes are the HMAC secret for scope ids (\"\" = plain SHA-256); must not be "
     "empty."},

    {"store", "backend", Kind::kString, kRestart, FIELD(store.backend), 0, 0, CheckStoreBackend,
     "\"rocksdb\": the embedded store (one instance); \"postgres\": one database shared by "
     "several instances."},
    {"store", "path", Kind::kString, kRestart, FIELD(store.path), 0, 0, CheckStorePath,
     "Directory of the embedded record store (RocksDB)."},
    {"store", "sync", Kind::kBool, kRestart, FIELD(store.sync), 0, 0, nullptr,
     "true: every claim and completion is synced to the write-ahead log before it is acted on."},
    {"store", "confirm_timeout", Kind::kDuration, kLive, FIELD(store.confirm_timeout_ms), 1, kHour,
     nullptr,
     "How long the store may leave a claim unconfirmed (then 503 store_unavailable; a late "
     "claim is given back) and a completion past its lease (then 502 outcome unknown); <= 1h."},
    {"store.postgres", "dsn", Kind::kString, kRestart, FIELD(store.postgres.dsn), 0, 0,
     CheckPostgresDsn,
     "libpq connection string, no password (libpq reads ~/.pgpass or PGPASSFILE); needed by "
     "\"postgres\"."},
    {"store.postgres", "connections", Kind::kInt, kRestart, FIELD(store.postgres.connections), 1,
     256, nullptr, "Connections to the database, each running one statement at a time (1 to 256)."},

    {"store.encryption", "active", Kind::kString, kLive, FIELD(store.encryption.active), 0, 0,
     nullptr,
     "Id of the key that seals new records (\"\" = seal nothing; every listed key opens)."},
    {"store.encryption", "keys", Kind::kStringTable, kLive, FIELD(store.encryption.keys), 0, 0,
     CheckEncryptionKeys,
     "Key id = file of 64 hex digits, mode 0600/0400, owned by the gateway's user ({} = off)."},

    {"limits", "max_request_body", Kind::kSize, kLive, FIELD(limits.max_request_body), 0, kGiB,
     nullptr,
     "Largest body of a guarded request (413 above it; at most 1GiB). Passthrough: no cap, it "
     "streams."},
    {"limits", "max_response_body", Kind::kSize, kLive, FIELD(limits.max_response_body), 0, kGiB,
     nullptr,
     "Largest response stored for a guarded request (502 above it; at most 1GiB). Passthrough: "
     "no cap."},
    {"limits", "max_header_bytes", Kind::kSize, kLive, FIELD(limits.max_header_bytes), 0, kMiB,
     nullptr,
     "Largest request head (request line and headers) accepted (431 above it; at most 1MiB)."},
    {"limits", "client_timeout", Kind::kDuration, kLive, FIELD(limits.client_timeout_ms), 0, kHour,
     nullptr,
     "Time a client has to send its whole request, from its first byte (408 after it; at most "
     "1h)."},
    {"limits", "idle_timeout", Kind::kDuration, kLive, FIELD(limits.idle_timeout_ms), 0, kDay,
     nullptr,
     "Time a keep-alive connection may sit idle between requests before it is closed (at most "
     "1d)."},
    {"limits", "max_connections", Kind::kInt, kLive, FIELD(limits.max_connections), 1, 10'000'000,
     nullptr,
     "Client connections open at once (per instance, all workers); past it a new one is closed at "
     "once."},
    {"limits", "max_unsent_bytes", Kind::kSize, kLive, FIELD(limits.max_unsent_bytes), 0, 64 * kGiB,
     nullptr,
     "Bytes of answers queued for clients that have not read them, in total; an answer past it "
     "closes its connection."},
    {"limits", "max_waiters", Kind::kInt, kLive, FIELD(limits.max_waiters), 0, 10'000'000, nullptr,
     "Duplicates waiting for a first answer at once (per instance); past it a duplicate gets 409 "
     "at once."},
    {"limits", "http2_max_streams", Kind::kInt, kLive, FIELD(limits.http2_max_streams), 1, 10'000,
     nullptr,
     "Concurrent HTTP/2 streams per client connection (1 to 10000); a new connection takes a "
     "change."},

    {"server", "workers", Kind::kInt, kRestart, FIELD(server.workers), 0, 64, nullptr,
     "Worker event-loop threads: 0 = one per CPU core, otherwise 1 to 64."},
    {"server", "busy_poll", Kind::kDurationUs, kRestart, FIELD(server.busy_poll_us), 0, 10'000,
     nullptr,
     "How long a worker keeps polling without sleeping after its last event (\"200us\", at most "
     "10ms; \"0s\" = off): lower latency where waking an idle CPU is slow, a busy CPU meanwhile."},
    {"server", "shutdown_grace", Kind::kDuration, kLive, FIELD(server.shutdown_grace_ms), 0, kHour,
     nullptr,
     "On SIGTERM/SIGINT, how long in-flight requests may run before the gateway exits (at "
     "most 1h)."},
    {"server", "handover_socket", Kind::kString, kRestart, FIELD(server.handover_socket), 0, 0,
     nullptr,
     "Unix socket through which `idemgate --take-over` takes the listeners over (\"\" = "
     "store.path + \".handover\", or $RUNTIME_DIRECTORY/handover with PostgreSQL; \"off\")."},

    {"admin", "address", Kind::kString, kRestart, FIELD(admin.address), 0, 0, CheckAdminAddress,
     "Admin listener address, \"host:port\" (\"\" = no admin listener)."},
    {"admin", "token", Kind::kString, kLive, FIELD(admin.token), 0, 0, nullptr,
     "Bearer token for the admin record and backup API (\"\" = both are off)."},
    {"admin", "backup_dir", Kind::kString, kLive, FIELD(admin.backup_dir), 0, 0, nullptr,
     "Directory where POST /backup (admin token) writes store checkpoints (\"\" = backups off)."},

    {"log", "access", Kind::kString, kRestart, FIELD(log.access), 0, 0, CheckLogAccess,
     "Access log destination: \"stdout\", \"off\" or a file path (appended to)."},
};

const DerivedField kDerived[] = {
    {"", FIELD(listen.addr)},
    {"", FIELD(upstream.addr)},
    {"", FIELD(upstream.tls)},
    {"", FIELD(upstream.addrs)},
    {"", FIELD(admin.addr)},
    {"listen.certificates (the certificate and key files)", FIELD(listen.certificate_files)},
    // The file may be rewritten in place: its bytes change the scope ids as much as its path.
    {"scope.secret (file contents)", FIELD(scope.secret)},
    {"store.encryption (turned on or off)", FIELD(store.encryption.enabled)},
};
#undef FIELD

bool ReadHeaderName(const SectionReader& r, std::string_view key, std::string* out) {
  if (!r.String(key, out)) return false;
  if (out->empty()) r.Fail(key, "must not be empty");
  if (!IsHttpToken(*out)) r.Fail(key, "\"" + *out + "\" is not a valid header name");
  return true;
}

bool ReadInt(const SectionReader& r, const KeySpec& key, FieldRef field) {
  int64_t value = 0;
  if (!r.Int(key.name, &value)) return false;
  if (value < key.min || value > key.max) {
    r.Fail(key.name, "must be between " + std::to_string(key.min) + " and " +
                         std::to_string(key.max) + ", got " + std::to_string(value));
  }
  if (auto* narrow = std::get_if<int*>(&field)) {
    **narrow = static_cast<int>(value);
  } else {
    *std::get<int64_t*>(field) = value;
  }
  return true;
}

// A table whose every value is a string ({ "a" = "x" } or a [section.key] sub-table).
bool ReadStringTable(const SectionReader& r, std::string_view key,
                     std::map<std::string, std::string>* out) {
  const toml::table* table = r.Table(key);
  if (table == nullptr) return false;
  out->clear();
  for (const auto& [name, node] : *table) {
    const std::string* value = node.is_string() ? &node.as_string()->get() : nullptr;
    if (value == nullptr) {
      r.Fail(key, "\"" + std::string(name.str()) + "\" must be a string, not " +
                      std::string(TypeName(node)));
    }
    (*out)[std::string(name.str())] = *value;
  }
  return true;
}

std::string Quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

}  // namespace

std::span<const KeySpec> ConfigKeys() { return kKeys; }
std::span<const DerivedField> DerivedFields() { return kDerived; }

std::vector<std::string_view> ConfigSections() {
  std::vector<std::string_view> sections;
  for (const KeySpec& key : kKeys) {
    if (sections.empty() || sections.back() != key.section) sections.push_back(key.section);
  }
  return sections;
}

void ReadKey(const KeySpec& key, const Context& ctx, const SectionReader& r, Config* config) {
  FieldRef field = key.field(*config);
  bool present = false;
  switch (key.kind) {
    case Kind::kString:
      present = r.String(key.name, std::get<std::string*>(field));
      break;
    case Kind::kHeaderName:
      present = ReadHeaderName(r, key.name, std::get<std::string*>(field));
      break;
    case Kind::kPath:
      present = r.String(key.name, std::get<std::string*>(field));
      ReadPathFile(ctx, r, key.name, std::get<std::string*>(field), nullptr);
      break;
    case Kind::kBool:
      present = r.Bool(key.name, std::get<bool*>(field));
      break;
    case Kind::kInt:
      present = ReadInt(r, key, field);
      break;
    case Kind::kDuration:
    case Kind::kDurationOrOff:
      present = r.Duration(key.name, std::get<int64_t*>(field), key.max,
                           key.kind == Kind::kDurationOrOff);
      break;
    case Kind::kDurationUs:
      present = r.DurationUs(key.name, std::get<int64_t*>(field), key.max);
      break;
    case Kind::kSize:
      present = r.Size(key.name, std::get<uint64_t*>(field), static_cast<uint64_t>(key.max));
      break;
    case Kind::kStrings:
      present = r.StringArray(key.name, std::get<std::vector<std::string>*>(field));
      break;
    case Kind::kStringTable:
      present = ReadStringTable(r, key.name, std::get<std::map<std::string, std::string>*>(field));
      break;
  }
  if (key.check != nullptr) key.check(ctx, r, present, config);
}

// The field functions only take the address of a member; reading through it never writes.
bool SameValue(FieldFn field, const Config& a, const Config& b) {
  FieldRef ra = field(const_cast<Config&>(a));
  FieldRef rb = field(const_cast<Config&>(b));
  return std::visit(
      [&rb](auto* pa) {
        using T = std::remove_pointer_t<decltype(pa)>;
        return *pa == *std::get<T*>(rb);
      },
      ra);
}

void CopyValue(FieldFn field, const Config& from, Config* to) {
  FieldRef src = field(const_cast<Config&>(from));
  FieldRef dst = field(*to);
  std::visit(
      [&src](auto* pd) {
        using T = std::remove_pointer_t<decltype(pd)>;
        *pd = *std::get<T*>(src);
      },
      dst);
}

std::string FormatDefault(const KeySpec& key) {
  Config defaults;
  FieldRef field = key.field(defaults);
  switch (key.kind) {
    case Kind::kBool:
      return *std::get<bool*>(field) ? "true" : "false";
    case Kind::kInt:
      if (auto* narrow = std::get_if<int*>(&field)) return std::to_string(**narrow);
      return std::to_string(*std::get<int64_t*>(field));
    case Kind::kDuration:
    case Kind::kDurationOrOff: {
      const int64_t ms = *std::get<int64_t*>(field);
      return Quoted(ms == 0 ? "0s" : FormatDurationMs(ms));
    }
    case Kind::kDurationUs: {
      const int64_t us = *std::get<int64_t*>(field);
      return Quoted(us == 0 ? "0s" : FormatDurationUs(us));
    }
    case Kind::kSize:
      return Quoted(FormatSize(*std::get<uint64_t*>(field)));
    case Kind::kStrings: {
      std::string out = "[";
      for (const std::string& s : *std::get<std::vector<std::string>*>(field)) {
        out += (out.size() > 1 ? ", " : "") + Quoted(s);
      }
      return out + "]";
    }
    case Kind::kStringTable: {
      std::string out = "{";
      for (const auto& [name, value] : *std::get<std::map<std::string, std::string>*>(field)) {
        out += (out.size() > 1 ? ", " : " ") + Quoted(name) + " = " + Quoted(value);
      }
      return out.size() > 1 ? out + " }" : "{}";
    }
    default:
      return Quoted(*std::get<std::string*>(field));
  }
}

}  // namespace idemgate::conf

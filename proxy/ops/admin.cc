// SPDX-License-Identifier: Apache-2.0
// The admin listener: evhttp on its own thread; metrics, health, readiness (its probes are in
// probes.cc) and the record API.
#include "proxy/ops/admin.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>

#include "common/hex.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "proxy/net/tls.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/admin_key_hash.h"
#include "proxy/ops/metrics.h"
#include "proxy/ops/record_json.h"
#include "proxy/policy/digest.h"
#include "proxy/policy/errors.h"
#include "proxy/policy/guard.h"
#include "proxy/policy/record_id.h"
#include "store/claim_rules.h"

namespace idemgate {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kStoreProbeTimeout{2'000};
constexpr milliseconds kUpstreamProbeMaxTimeout{2'000};
constexpr milliseconds kStoreCallTimeout{5'000};
constexpr int kAdminTimeoutS = 10;  // an admin connection's read/write timeout
constexpr char kCredentialHeader[] = "X-Idemgate-Credential";

void Reply(evhttp_request* req, int code, const char* reason, const char* content_type,
           const std::string& body) {
  evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", content_type);
  evhttp_add_header(headers, "Cache-Control", "no-store");
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(req, code, reason, out);
  evbuffer_free(out);
}

// How many times the request carries header `name` (case-insensitive, as evhttp looks it up):
// a credential or token given twice is refused, as on the data plane (S3), not read as its first.
int CountInputHeader(evhttp_request* req, const char* name) {
  int count = 0;
  const evkeyvalq* headers = evhttp_request_get_input_headers(req);
  for (const evkeyval* h = headers->tqh_first; h != nullptr; h = h->next.tqe_next) {
    if (strcasecmp(h->key, name) == 0) ++count;
  }
  return count;
}

void ReplyJson(evhttp_request* req, int code, const char* reason, const std::string& body) {
  Reply(req, code, reason, "application/json", body + "\n");
}

void ReplyError(evhttp_request* req, int code, const char* reason, const char* error,
                const std::string& detail) {
  ReplyJson(req, code, reason,
            std::string("{\"error\":\"") + error + "\",\"detail\":\"" + JsonEscape(detail) + "\"}");
}

// "Bearer <token>" with the scheme compared case-insensitively; empty when absent.
std::string BearerToken(const char* header) {
  if (header == nullptr) return {};
  std::string_view value(header);
  if (value.size() < 7 || strncasecmp(value.data(), "bearer ", 7) != 0) return {};
  value.remove_prefix(7);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return std::string(value);
}

// The query parameters; false when the query string is malformed.
class Query {
 public:
  explicit Query(evhttp_request* req) {
    params_.tqh_first = nullptr;  // TAILQ_INIT
    params_.tqh_last = &params_.tqh_first;
    const char* query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    ok_ = query == nullptr || evhttp_parse_query_str(query, &params_) == 0;
  }
  ~Query() { evhttp_clear_headers(&params_); }
  bool ok() const { return ok_; }
  const char* Get(const char* name) { return evhttp_find_header(&params_, name); }

 private:
  evkeyvalq params_;
  bool ok_ = false;
};

// The admin client's address, as evhttp saw it.
std::string PeerAddress(evhttp_request* req) {
  evhttp_connection* conn = evhttp_request_get_connection(req);
  char* address = nullptr;
  uint16_t port = 0;
  if (conn != nullptr) evhttp_connection_get_peer(conn, &address, &port);
  return address == nullptr ? std::string("unknown") : std::string(address);
}

// One stderr line per admin delete: who asked, which record, its state, forced, the outcome.
void LogDelete(evhttp_request* req, const ScopeId& scope, const std::string& key,
               const std::string& state, bool force, const char* outcome) {
  LogF(LogLevel::kInfo, "admin", "delete: client=%s record=%s state=%s forced=%s result=%s",
       PeerAddress(req).c_str(), KeyHash(scope, key).c_str(), state.c_str(),
       force ? "true" : "false", outcome);
}

// 404 for a lookup that found nothing, naming the scope it looked in (16 hex digits of the scope
// id) and the key_hash the access log would show for this key in that scope: a credential given
// without its scheme ("sk_..." for "Bearer sk_...") names another scope, and this tells so.
void ReplyNoRecord(evhttp_request* req, const ScopeId& scope, const std::string& key) {
  const std::string scope_hex = LowerHex(scope.data(), 8);
  const std::string key_hash = KeyHash(scope, key);
  std::string detail = "No live record for this key in scope " + scope_hex + " (key_hash " +
                       key_hash +
                       " in the access log). The scope comes from X-Idemgate-Credential, which "
                       "must be the caller's whole credential header value (e.g. \"Bearer "
                       "sk_...\", not the bare token).";
  ReplyJson(req, 404, "Not Found",
            "{\"error\":\"not_found\",\"detail\":\"" + JsonEscape(detail) + "\",\"scope\":\"" +
                scope_hex + "\",\"key_hash\":\"" + key_hash + "\"}");
}

// 409 for a non-forced delete of an in-flight record, saying what forcing would risk.
void RefuseInFlight(evhttp_request* req, const Record& record, TimeMs now) {
  if (now < record.lease_until_ms) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After",
                      std::to_string(RetryAfterSeconds(record.lease_until_ms, now)).c_str());
    return ReplyError(
        req, 409, "Conflict", "record_in_flight",
        "An attempt for this key is still running upstream (lease until " +
            FormatRfc3339(record.lease_until_ms, false) +
            "). Deleting it now lets a retry execute the request a second time while the first "
            "may still succeed; wait for the lease to end, or add force=true to accept that risk.");
  }
  ReplyError(req, 409, "Conflict", "record_in_flight",
             "The attempt for this key ended without a stored result (its lease ran out, e.g. "
             "after a crash); the next retry of the same request takes it over without a delete. "
             "A delete could remove the record of a retry that has just taken over, so that "
             "another retry executes the request a second time; add force=true to accept that "
             "risk.");
}

}  // namespace

AdminServer::AdminServer(Gateway* gateway, Metrics* metrics)
    : gateway_(gateway), metrics_(metrics) {}

AdminServer::~AdminServer() { Stop(); }

bool AdminServer::Start(const HostPort& addr, uint16_t* bound_port, std::string* error,
                        int listening_fd) {
  base_.reset(event_base_new());
  http_ = base_ ? evhttp_new(base_.get()) : nullptr;
  if (!http_) {
    *error = "cannot create the admin listener";
    return false;
  }
  // Every method evhttp knows reaches Handle, which answers a wrong one with a JSON 405 (a
  // method left out here would get evhttp's own 501 HTML page).
  evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE |
                                        EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH |
                                        EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
  evhttp_set_max_headers_size(http_, 16 << 10);
  evhttp_set_max_body_size(http_, 0);
  evhttp_set_timeout(http_, kAdminTimeoutS);
  evhttp_set_gencb(http_, &AdminServer::OnRequest, this);
  backup_done_ev_.reset(
      event_new(base_.get(), -1, 0, &EventTrampoline<AdminServer, &AdminServer::OnBackupDone>,
                this));
  evhttp_bound_socket* bound =
      listening_fd >= 0 ? evhttp_accept_socket_with_handle(http_, listening_fd)
                        : evhttp_bind_socket_with_handle(http_, addr.host.c_str(), addr.port);
  if (!bound) {
    *error = "cannot listen on admin address " + addr.host + ":" + std::to_string(addr.port) +
             ": " + strerror(errno);
    return false;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  listen_fd_ = evhttp_bound_socket_get_fd(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  thread_ = std::thread([this] { event_base_loop(base_.get(), EVLOOP_NO_EXIT_ON_EMPTY); });
  NameThread(thread_, "idg-admin");
  return true;
}

void AdminServer::Stop() {
  if (thread_.joinable()) {
    // loopexit, not loopbreak: a break asked for before the thread has entered its loop is
    // cleared when the loop starts (a start-up that failed just after Start() then waited in
    // join() for ever); loopexit queues an event that the loop runs whenever it starts.
    event_base_loopexit(base_.get(), nullptr);  // thread-safe: evthread_use_pthreads() ran first
    thread_.join();
  }
  // A backup still being written is finished (the store must outlive it); nobody hears of it.
  if (backup_thread_.joinable()) backup_thread_.join();
  if (http_) evhttp_free(http_);  // with the requests still waiting for an answer
  http_ = nullptr;
  backup_done_ev_.reset();
  base_.reset();
}

void AdminServer::OnRequest(evhttp_request* req, void* arg) {
  static_cast<AdminServer*>(arg)->Handle(req);
}

void AdminServer::Handle(evhttp_request* req) {
  const char* raw_path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
  std::string path = raw_path ? raw_path : "";
  evhttp_cmd_type method = evhttp_request_get_command(req);
  bool get = method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD;
  if (path == "/records") return HandleRecords(req);
  if (path == "/backup") return HandleBackup(req);
  if (!get && (path == "/metrics" || path == "/healthz" || path == "/readyz")) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
    return ReplyError(req, 405, "Method Not Allowed", "method_not_allowed",
                      "Use GET on " + path + ".");
  }
  if (path == "/metrics") return HandleMetrics(req);
  if (path == "/healthz") return Reply(req, 200, "OK", "text/plain; charset=utf-8", "ok\n");
  if (path == "/readyz") return HandleReady(req);
  ReplyError(req, 404, "Not Found", "not_found",
             "Admin paths: /metrics, /healthz, /readyz, /records, /backup.");
}

void AdminServer::HandleMetrics(evhttp_request* req) {
  std::string body = metrics_ ? metrics_->Render() : std::string();
  Reply(req, 200, "OK", kPrometheusContentType, body);
}

void AdminServer::HandleReady(evhttp_request* req) {
  std::shared_ptr<const Config> config = gateway_->Snapshot();
  std::string store = ProbeStore(gateway_->store, kStoreProbeTimeout);
  milliseconds connect_timeout(
      std::min<int64_t>(config->upstream.connect_timeout_ms, kUpstreamProbeMaxTimeout.count()));
  std::string upstream =
      ProbeUpstreamGroup(config->upstream, connect_timeout, gateway_->upstream_tls);
  bool draining = draining_.load(std::memory_order_relaxed);
  bool ready = store.empty() && upstream.empty() && !draining;
  std::string body = std::string("{\"ready\":") + (ready ? "true" : "false");
  body += ",\"store\":\"" + (store.empty() ? std::string("ok") : JsonEscape(store)) + "\"";
  body += ",\"upstream\":\"" + (upstream.empty() ? std::string("ok") : JsonEscape(upstream)) + "\"";
  if (draining) body += ",\"draining\":true";
  if (metrics_) body += RouteGroupsDownJson(metrics_->upstream_stats());
  body += "}";
  if (ready) return ReplyJson(req, 200, "OK", body);
  ReplyJson(req, 503, "Service Unavailable", body);
}

bool AdminServer::Authorize(evhttp_request* req, const Config& config) {
  if (config.admin.token.empty()) {
    ReplyError(req, 404, "Not Found", "not_found",
               "The record and backup API is off: [admin] token is not configured.");
    return false;
  }
  if (CountInputHeader(req, "Authorization") > 1) {
    ReplyError(req, 400, "Bad Request", "bad_request",
               "The Authorization header was given more than once; give it once.");
    return false;
  }
  const char* header = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
  std::string given = BearerToken(header);
  // Compare digests so neither the content nor the length of the token leaks through timing.
  std::string a = Sha256Digest(given), b = Sha256Digest(config.admin.token);
  if (given.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) != 0) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                      "Bearer realm=\"idemgate-admin\"");
    ReplyError(
        req, 401, "Unauthorized", "unauthorized",
        header ? "The admin token is wrong." : "Authorization: Bearer <admin token> is required.");
    return false;
  }
  return true;
}

// POST /backup: a checkpoint of the store, written under [admin] backup_dir while the gateway
// serves (on backup_thread_: neither this loop nor the data-plane loops wait for it). Logged like
// a delete.
void AdminServer::HandleBackup(evhttp_request* req) {
  std::shared_ptr<const Config> config = gateway_->Snapshot();
  if (!Authorize(req, *config)) return;
  if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
    return ReplyError(req, 405, "Method Not Allowed", "method_not_allowed", "Use POST on /backup.");
  }
  const std::string& root = config->admin.backup_dir;
  if (root.empty()) {
    return ReplyError(req, 404, "Not Found", "not_found",
                      "Backups are off: [admin] backup_dir is not configured.");
  }
  // The answer waits for the backup (and any before it), not for the connection's idle timeout.
  if (evhttp_connection* conn = evhttp_request_get_connection(req)) {
    evhttp_connection_set_timeout(conn, 24 * 3600);
  }
  if (backup_running_) {
    backup_queue_.emplace_back(req, root);  // started when the running one is answered
    return;
  }
  StartBackup(req, root);
}

void AdminServer::StartBackup(evhttp_request* req, const std::string& root) {
  backup_running_ = true;
  if (backup_thread_.joinable()) backup_thread_.join();  // the last one's: it has finished
  Backup b;
  b.req = req;
  b.client = PeerAddress(req);  // now: the client may be gone when the answer is ready
  const auto now = std::chrono::system_clock::now();
  b.unix_ms = std::chrono::duration_cast<milliseconds>(now.time_since_epoch()).count();
  std::string stamp = FormatRfc3339(b.unix_ms, true);  // 2026-11-30T19:01:02.345Z
  std::erase(stamp, ':');
  b.dir = root + "/idemgate-" + stamp;
  backup_thread_ = std::thread([this, b = std::move(b), root]() mutable {
    const auto started = std::chrono::steady_clock::now();
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    b.status = ec ? StoreStatus{StoreCode::kIoError, "cannot create " + root + ": " + ec.message()}
                  : gateway_->store->Checkpoint(b.dir);
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    {
      std::lock_guard<std::mutex> lock(backup_mu_);
      backup_done_ = std::move(b);
    }
    event_active(backup_done_ev_.get(), 0, 0);  // thread-safe: evthread_use_pthreads() ran first
  });
}

void AdminServer::OnBackupDone() {
  std::optional<Backup> done;
  {
    std::lock_guard<std::mutex> lock(backup_mu_);
    done.swap(backup_done_);
  }
  if (!done) return;
  const Backup& b = *done;
  if (metrics_) metrics_->BackupFinished(b.status.ok(), b.unix_ms);
  LogF(b.status.ok() ? LogLevel::kInfo : LogLevel::kError, "admin",
       "backup: client=%s path=%s result=%s%s", b.client.c_str(), b.dir.c_str(),
       b.status.ok() ? "written" : "failed: ", b.status.message.c_str());
  if (evhttp_connection* conn = evhttp_request_get_connection(b.req)) {  // null: client gone
    evhttp_connection_set_timeout(conn, kAdminTimeoutS);
  }
  if (!b.status.ok()) {
    ReplyError(b.req, 500, "Internal Server Error", "backup_failed",
               "The backup was not written: " + b.status.message);
  } else {
    char took[32];
    snprintf(took, sizeof(took), "%.3f", b.seconds);
    ReplyJson(b.req, 200, "OK",
              "{\"backup\":\"" + JsonEscape(b.dir) +
                  "\",\"records\":" + std::to_string(gateway_->store->ApproximateRecords()) +
                  ",\"seconds\":" + took + "}");
  }
  backup_running_ = false;
  if (!backup_queue_.empty()) {
    auto [req, root] = std::move(backup_queue_.front());
    backup_queue_.pop_front();
    StartBackup(req, root);
  }
}

void AdminServer::HandleRecords(evhttp_request* req) {
  evhttp_cmd_type method = evhttp_request_get_command(req);
  std::shared_ptr<const Config> config = gateway_->Snapshot();
  if (!Authorize(req, *config)) return;
  if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD && method != EVHTTP_REQ_DELETE) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD, DELETE");
    return ReplyError(req, 405, "Method Not Allowed", "method_not_allowed",
                      "Use GET or DELETE on /records.");
  }
  Query query(req);
  if (const char* key_hash = query.ok() ? query.Get("key_hash") : nullptr) {
    if (method == EVHTTP_REQ_DELETE) {
      return ReplyError(req, 400, "Bad Request", "bad_request",
                        "A delete names its record by key= and X-Idemgate-Credential; key_hash= "
                        "is for lookups.");
    }
    AdminAnswer answer = KeyHashLookup(gateway_->store, key_hash, [](const KeyHashMatch& m) {
      return RecordJson(m.record, RecordIdHex(m.scope, m.key));
    });
    return ReplyJson(req, answer.code, answer.reason, answer.body);
  }
  // The credential comes from a header only: a query string would turn a base64 '+' into a
  // space (form decoding) and so name another scope, and it would land in URL logs.
  const char* credential =
      evhttp_find_header(evhttp_request_get_input_headers(req), kCredentialHeader);
  const char* raw_key = query.Get("key");
  const char* force = query.Get("force");
  std::string key;
  if (query.ok() && query.Get("credential") != nullptr) {
    return ReplyError(req, 400, "Bad Request", "bad_request",
                      "The credential= query parameter is not accepted (URL decoding would alter "
                      "'+' in it): send the caller's credential header value in "
                      "X-Idemgate-Credential.");
  }
  if (CountInputHeader(req, kCredentialHeader) > 1) {
    return ReplyError(req, 400, "Bad Request", "bad_request",
                      "The X-Idemgate-Credential header was given more than once; give it once.");
  }
  if (!query.ok() || credential == nullptr || *credential == '\0' || raw_key == nullptr) {
    return ReplyError(req, 400, "Bad Request", "bad_request",
                      "Give key=<Idempotency-Key value> and the caller's credential header value "
                      "in the X-Idemgate-Credential header, or key_hash=<an access-log line's "
                      "key_hash>.");
  }
  if (force != nullptr && std::strcmp(force, "true") != 0 && std::strcmp(force, "false") != 0) {
    return ReplyError(req, 400, "Bad Request", "bad_request", "force= must be true or false.");
  }
  if (!ParseIdempotencyKey(raw_key, &key)) {
    return ReplyError(req, 400, "Bad Request", "idempotency_key_invalid",
                      GetErrorInfo(ErrorCode::kIdempotencyKeyInvalid).default_detail);
  }
  ScopeId scope = ComputeScopeId(config->scope.header, credential, config->scope.secret);
  if (method == EVHTTP_REQ_DELETE) {
    return DeleteRecord(req, scope, key, force != nullptr && std::strcmp(force, "true") == 0);
  }
  LookupRecord(req, scope, key);
}

void AdminServer::LookupRecord(evhttp_request* req, const ScopeId& scope, const std::string& key) {
  LookupResult found = gateway_->store->Lookup(scope, key);
  if (found.outcome == LookupOutcome::kError) {
    return ReplyError(req, 503, "Service Unavailable", "store_unavailable",
                      "The store could not be read.");
  }
  if (found.outcome == LookupOutcome::kMiss) return ReplyNoRecord(req, scope, key);
  ReplyJson(req, 200, "OK", RecordJson(found.record, RecordIdHex(scope, key)));
}

void AdminServer::DeleteRecord(evhttp_request* req, const ScopeId& scope, const std::string& key,
                               bool force) {
  LookupResult found = gateway_->store->Lookup(scope, key);
  if (found.outcome == LookupOutcome::kMiss) {
    LogDelete(req, scope, key, "none", force, "not_found");
    return ReplyError(req, 404, "Not Found", "not_found", "No live record for this key.");
  }
  const bool readable = found.outcome == LookupOutcome::kFound;
  if (!readable && !force) {  // a corrupt record, or the store is reopening
    return ReplyError(req, 503, "Service Unavailable", "store_unavailable",
                      "The record could not be read, so its state is unknown; force=true deletes "
                      "it anyway (if an attempt is still running, a retry may execute again).");
  }
  const TimeMs now = gateway_->clock->NowMs();
  const Record& record = found.record;
  const std::string state = readable ? StateName(record, now) : "unreadable";
  // Only a completed record is stable between this read and the delete: an in-flight one may be
  // running upstream, or be taken over by a retry at any moment (its lease ended).
  if (readable && record.state == RecordState::kInFlight && !force) {
    LogDelete(req, scope, key, state, force, "refused");
    return RefuseInFlight(req, record, now);
  }
  auto done = std::make_shared<std::promise<StoreStatus>>();
  std::future<StoreStatus> result = done->get_future();
  gateway_->store->Delete(scope, key, [done](StoreStatus s) { done->set_value(std::move(s)); });
  if (result.wait_for(kStoreCallTimeout) != std::future_status::ready) {
    LogDelete(req, scope, key, state, force, "unconfirmed");
    return ReplyError(req, 503, "Service Unavailable", "store_unavailable",
                      "The store did not confirm the delete in time.");
  }
  StoreStatus status = result.get();
  if (!status.ok()) {
    LogDelete(req, scope, key, state, force, "failed");
    return ReplyError(req, 503, "Service Unavailable", "store_unavailable",
                      "The delete failed: " + status.message);
  }
  LogDelete(req, scope, key, state, force, "deleted");
  std::string body = "{\"deleted\":true";
  if (force) body += ",\"forced\":true";
  if (readable) body += ",\"record\":" + RecordJson(record, RecordIdHex(scope, key));
  ReplyJson(req, 200, "OK", body + "}");
}

}  // namespace idemgate

// The demo payment API: creates and serves payment intents, counting every POST it executes.
#include "tests/support/demo_api.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include <cctype>
#include <cstdio>
#include <ctime>

#include "tests/support/http_text.h"

namespace idemgate::test {
namespace {

constexpr std::string_view kCollection = "/v1/payment_intents";
constexpr size_t kMaxAmountDigits = 30;

std::string ErrorJson(std::string_view code, std::string_view detail) {
  return std::string("{\"error\":\"") + std::string(code) + "\",\"detail\":\"" +
         std::string(detail) + "\"}";
}

std::string RandomIntentId() {
  unsigned char bytes[12];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "pi_";
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 0xF];
  }
  return id;
}

std::string RequestBody(evhttp_request* req) {
  evbuffer* in = evhttp_request_get_input_buffer(req);
  size_t len = evbuffer_get_length(in);
  std::string body(len, '\0');
  if (len > 0) evbuffer_copyout(in, body.data(), len);
  return body;
}

size_t SkipSpaces(std::string_view s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

}  // namespace

std::string ExtractAmount(std::string_view body, std::string* detail) {
  size_t key = body.find("\"amount\"");
  if (key == std::string_view::npos) {
    *detail = "The body must carry \\\"amount\\\" as a string of digits.";
    return {};
  }
  size_t i = SkipSpaces(body, key + 8);
  if (i < body.size() && body[i] == ':') i = SkipSpaces(body, i + 1);
  size_t end = i < body.size() && body[i] == '"' ? body.find('"', i + 1) : std::string_view::npos;
  if (end == std::string_view::npos) {
    *detail = "The amount must be a JSON string of digits, such as \\\"100\\\".";
    return {};
  }
  std::string_view digits = body.substr(i + 1, end - i - 1);
  bool all_digits = !digits.empty() && digits.size() <= kMaxAmountDigits;
  for (char c : digits) all_digits = all_digits && c >= '0' && c <= '9';
  if (!all_digits || digits[0] == '0') {
    *detail = "The amount must be a positive integer in minor units, without leading zeros.";
    return {};
  }
  return std::string(digits);
}

struct DemoApi::Pending {
  evhttp_request* req = nullptr;
  int status = 0;
  std::string body;
  std::string location;
  std::string amount;           // what Execute creates
  std::string record, attempt;  // the fencing headers (SPEC §12 A1), empty when absent
  bool execute_later = false;   // hold_first_ms: Execute runs when the timer fires
  DemoApi* api = nullptr;
  EventPtr timer;
};

DemoApi::DemoApi() = default;
DemoApi::~DemoApi() { Stop(); }

bool DemoApi::Start(uint16_t port) {
  Options options;
  options.port = port;
  return Start(options);
}

bool DemoApi::Start(const Options& options) {
  if (base_) return false;
  InitLibeventOnce();
  options_ = options;
  if (!options_.pg_dsn.empty()) {
    ledger_ = std::make_unique<DemoLedger>();
    std::string error;
    if (!ledger_->Open(options_.pg_dsn, options_.fence, &error)) {
      std::fprintf(stderr, "demo ledger: %s\n", error.c_str());
      ledger_.reset();
      return false;
    }
  }
  base_.reset(event_base_new());
  http_.reset(evhttp_new(base_.get()));
  if (!base_ || !http_) return false;
  evhttp_set_max_body_size(http_.get(), 1 << 20);
  evhttp_set_gencb(http_.get(), &DemoApi::OnRequest, this);
  evhttp_bound_socket* bound =
      evhttp_bind_socket_with_handle(http_.get(), options_.host.c_str(), options_.port);
  if (bound == nullptr) {
    http_.reset();
    base_.reset();
    return false;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return loop_.Start(base_.get());
}

void DemoApi::Stop() {
  if (!base_) return;
  loop_.Stop();
  pending_.clear();  // timers first: their requests die with their connections below
  http_.reset();
  base_.reset();
}

bool DemoApi::WaitForExecutions(int64_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return executions_.load() >= n; });
}

void DemoApi::OnRequest(evhttp_request* req, void* arg) {
  auto* self = static_cast<DemoApi*>(arg);
  std::string_view uri = evhttp_request_get_uri(req);
  std::string_view path = uri.substr(0, uri.find('?'));
  evhttp_cmd_type cmd = evhttp_request_get_command(req);
  if (path == kCollection) {
    if (cmd == EVHTTP_REQ_POST) return self->HandlePost(req);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
    return self->Reply(req, 405, ErrorJson("method_not_allowed", "Use POST."), "");
  }
  if (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD) return self->HandleGet(req, path);
  self->Reply(req, 404, ErrorJson("not_found", "No such resource."), "");
}

void DemoApi::HandlePost(evhttp_request* req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    executions_.fetch_add(1);
  }
  cv_.notify_all();
  auto pending = std::make_unique<Pending>();
  pending->req = req;
  pending->api = this;
  std::string detail;
  pending->amount = ExtractAmount(RequestBody(req), &detail);
  evkeyvalq* in = evhttp_request_get_input_headers(req);
  const char* record = evhttp_find_header(in, "Idempotency-Record");
  const char* attempt = evhttp_find_header(in, "Idempotency-Attempt");
  if (record != nullptr && attempt != nullptr) {
    pending->record = record;
    pending->attempt = attempt;
  }
  int delay_ms = options_.delay_ms;
  if (posts_++ == 0 && ledger_ && options_.hold_first_ms != 0) {
    pending->execute_later = true;
    delay_ms = options_.hold_first_ms;
  }
  if (pending->amount.empty()) {
    pending->status = 400;
    pending->body = ErrorJson("invalid_amount", detail);
  } else if (!pending->execute_later) {
    Execute(pending.get());
  }
  if (delay_ms == 0) return Reply(req, pending->status, pending->body, pending->location);
  Pending* raw = pending.get();
  pending_.emplace(raw, std::move(pending));
  if (delay_ms < 0) return;  // held until Stop
  raw->timer.reset(evtimer_new(base_.get(), &DemoApi::OnDelayElapsed, raw));
  timeval tv{delay_ms / 1000, (delay_ms % 1000) * 1000};
  evtimer_add(raw->timer.get(), &tv);
}

void DemoApi::Execute(Pending* pending) {
  std::string id;
  if (!ledger_) {
    pending->status = 201;
    pending->body = CreateIntent(pending->amount, &id);
    pending->location = std::string(kCollection) + "/" + id;
    return;
  }
  id = RandomIntentId();
  std::string detail;
  switch (ledger_->Create(id, pending->amount, pending->record, pending->attempt, &detail)) {
    case DemoLedger::Result::kCreated:
      pending->status = 201;
      pending->body = CreateIntent(pending->amount, &id, id);
      pending->location = std::string(kCollection) + "/" + id;
      return;
    case DemoLedger::Result::kFenced:  // a stale attempt: rolled back, nothing was done
      fenced_.fetch_add(1);
      pending->status = 409;
      pending->body = ErrorJson("attempt_fenced", "This attempt was superseded; nothing was done.");
      return;
    case DemoLedger::Result::kFailed:
      std::fprintf(stderr, "demo ledger: %s\n", detail.c_str());
      pending->status = 503;
      pending->body =
          ErrorJson("ledger_unavailable", "The payment ledger failed; nothing was done.");
      return;
  }
}

void DemoApi::OnDelayElapsed(evutil_socket_t, short, void* arg) {
  auto* pending = static_cast<Pending*>(arg);
  DemoApi* self = pending->api;
  if (pending->execute_later && !pending->amount.empty()) self->Execute(pending);
  self->Reply(pending->req, pending->status, pending->body, pending->location);
  self->pending_.erase(pending);
}

void DemoApi::HandleGet(evhttp_request* req, std::string_view path) {
  if (path == "/_demo/stats") {
    std::string body = "{\"executions\":" + std::to_string(executions_.load()) +
                       ",\"created\":" + std::to_string(created_.load()) + "}";
    return Reply(req, 200, body, "");
  }
  std::string prefix = std::string(kCollection) + "/";
  if (path.starts_with(prefix)) {
    std::string id(path.substr(prefix.size()));
    std::string json;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = intents_.find(id);
      if (it != intents_.end()) json = it->second;
    }
    if (!json.empty()) return Reply(req, 200, json, "");
  }
  Reply(req, 404, ErrorJson("not_found", "No such payment intent."), "");
}

std::string DemoApi::CreateIntent(const std::string& amount, std::string* id,
                                  const std::string& given_id) {
  *id = given_id.empty() ? RandomIntentId() : given_id;
  std::string json = "{\"id\":\"" + *id + "\",\"state\":\"created\",\"version\":1,\"amount\":\"" +
                     amount + "\",\"created_at\":" + std::to_string(std::time(nullptr)) + "}";
  {
    std::lock_guard<std::mutex> lock(mu_);
    intents_[*id] = json;
  }
  created_.fetch_add(1);
  return json;
}

void DemoApi::Reply(evhttp_request* req, int status, const std::string& body,
                    const std::string& location) {
  evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", "application/json");
  if (!location.empty()) evhttp_add_header(headers, "Location", location.c_str());
  evbuffer* out = evbuffer_new();
  evbuffer_add(out, body.data(), body.size());
  evhttp_send_reply(req, status, ReasonPhrase(status), out);
  evbuffer_free(out);
}

}  // namespace idemgate::test

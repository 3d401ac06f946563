// SPDX-License-Identifier: Apache-2.0
// FakeUpstream: reads requests off raw bufferevents, records them, then answers or misbehaves.
#include "tests/support/fake_upstream.h"

#include <event2/buffer.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace idemgate::test {
namespace {

constexpr size_t kMaxHeaderBytes = 1 << 20;

bool WantsClose(const RecordedRequest& r) {
  std::optional<std::string> conn = r.Header("Connection");
  bool close_token = conn && conn->find("close") != std::string::npos;
  bool keep_token = conn && conn->find("keep-alive") != std::string::npos;
  return close_token || (r.version == "HTTP/1.0" && !keep_token);
}

// Parses the request line and header block (without the final CRLF CRLF) into `r`.
bool ParseHead(std::string_view head, RecordedRequest* r) {
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return false;
  r->method = line.substr(0, sp1);
  r->target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r->version = line.substr(sp2 + 1);
  if (eol == std::string_view::npos) return true;
  return ParseHeaderLines(head.substr(eol + 2), &r->headers);
}

std::string StatusHead(const UpstreamBehavior& b) {
  std::string out = "HTTP/1.1 " + std::to_string(b.status) + " " +
                    (b.reason.empty() ? ReasonPhrase(b.status) : b.reason) + "\r\n";
  for (const auto& [name, value] : b.headers) out += name + ": " + value + "\r\n";
  return out;
}

std::string Chunked(std::string_view body) {
  std::string out;
  size_t piece = body.size() / 3 + 1;
  for (size_t i = 0; i < body.size(); i += piece) {
    std::string_view chunk = body.substr(i, piece);
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
    out += size;
    out.append(chunk);
    out += "\r\n";
  }
  return out + "0\r\n\r\n";
}

}  // namespace

UpstreamBehavior UpstreamBehavior::Respond(int status, std::string body, HeaderList headers) {
  UpstreamBehavior b;
  b.status = status;
  b.body = std::move(body);
  b.headers = std::move(headers);
  return b;
}

UpstreamBehavior UpstreamBehavior::Act(UpstreamAction action) {
  UpstreamBehavior b;
  b.action = action;
  b.body = "fake upstream body";
  return b;
}

UpstreamBehavior UpstreamBehavior::BigBody(size_t n) {
  UpstreamBehavior b;
  b.action = UpstreamAction::kBigBody;
  b.big_body_size = n;
  return b;
}

std::optional<std::string> RecordedRequest::Header(std::string_view name) const {
  return FindHeader(headers, name);
}

int RecordedRequest::HeaderCount(std::string_view name) const { return CountHeader(headers, name); }

struct FakeUpstream::Conn {
  FakeUpstream* owner = nullptr;
  BuffereventPtr bev;
  EventPtr timer;
  int index = 0;
  bool busy = false;               // acting on a request (delayed or hanging)
  bool close_after_write = false;  // close once the output drains
  bool keep_alive = true;          // of the request being acted on
  UpstreamBehavior behavior;       // of the request being acted on
};

FakeUpstream::FakeUpstream() = default;
FakeUpstream::~FakeUpstream() { Stop(); }

bool FakeUpstream::Start(const std::string& ip, uint16_t port) {
  if (base_) return false;
  InitLibeventOnce();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) return false;
  base_.reset(event_base_new());
  if (!base_) return false;
  listener_.reset(
      evconnlistener_new_bind(base_.get(), &FakeUpstream::OnAccept, this,
                              LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                              128, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
  if (!listener_) {
    base_.reset();
    return false;
  }
  socklen_t len = sizeof(addr);
  getsockname(evconnlistener_get_fd(listener_.get()), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  return loop_.Start(base_.get());
}

void FakeUpstream::Stop() {
  if (!base_) return;
  loop_.Stop();
  conns_.clear();
  listener_.reset();
  base_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  connections_open_ = 0;
}

void FakeUpstream::SetBehavior(UpstreamBehavior behavior) {
  std::lock_guard<std::mutex> lock(mu_);
  behavior_ = std::move(behavior);
}

void FakeUpstream::EnqueueBehavior(UpstreamBehavior behavior) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_.push_back(std::move(behavior));
}

int FakeUpstream::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(received_.size());
}

int FakeUpstream::connections_accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_accepted_;
}

int FakeUpstream::connections_open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_open_;
}

std::vector<RecordedRequest> FakeUpstream::received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return received_;
}

std::optional<RecordedRequest> FakeUpstream::last_request() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (received_.empty()) return std::nullopt;
  return received_.back();
}

bool FakeUpstream::WaitForRequests(int n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return static_cast<int>(received_.size()) >= n; });
}

bool FakeUpstream::WaitForConnections(int n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return connections_accepted_ >= n; });
}

void FakeUpstream::OnAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
  auto* self = static_cast<FakeUpstream*>(arg);
  auto conn = std::make_unique<Conn>();
  conn->owner = self;
  conn->bev.reset(bufferevent_socket_new(self->base_.get(), fd, BEV_OPT_CLOSE_ON_FREE));
  if (!conn->bev) {
    evutil_closesocket(fd);
    return;
  }
  Conn* raw = conn.get();
  raw->timer.reset(evtimer_new(self->base_.get(), &FakeUpstream::OnTimer, raw));
  bufferevent_setcb(raw->bev.get(), &FakeUpstream::OnRead, &FakeUpstream::OnWrite,
                    &FakeUpstream::OnEvent, raw);
  bufferevent_enable(raw->bev.get(), EV_READ | EV_WRITE);
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    raw->index = ++self->connections_accepted_;
    ++self->connections_open_;
  }
  self->conns_.emplace(raw, std::move(conn));
  self->cv_.notify_all();
}

void FakeUpstream::OnRead(bufferevent*, void* arg) {
  auto* conn = static_cast<Conn*>(arg);
  conn->owner->ProcessInput(conn);
}

void FakeUpstream::OnWrite(bufferevent*, void* arg) {
  auto* conn = static_cast<Conn*>(arg);
  if (conn->close_after_write) conn->owner->Close(conn, /*reset=*/false);
}

void FakeUpstream::OnEvent(bufferevent*, short what, void* arg) {
  auto* conn = static_cast<Conn*>(arg);
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) conn->owner->Close(conn, /*reset=*/false);
}

void FakeUpstream::OnTimer(evutil_socket_t, short, void* arg) {
  auto* conn = static_cast<Conn*>(arg);
  if (conn->owner->Act(conn)) conn->owner->ProcessInput(conn);  // pipelined requests
}

// Reads whole requests off the connection, one at a time, and acts on each.
void FakeUpstream::ProcessInput(Conn* conn) {
  evbuffer* in = bufferevent_get_input(conn->bev.get());
  while (!conn->busy && !conn->close_after_write) {
    evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, nullptr);
    if (end.pos < 0) {
      if (evbuffer_get_length(in) > kMaxHeaderBytes) Close(conn, /*reset=*/false);
      return;
    }
    size_t head_len = static_cast<size_t>(end.pos);
    std::string head(head_len, '\0');
    evbuffer_copyout(in, head.data(), head_len);
    RecordedRequest request;
    std::optional<size_t> body_len = 0;
    bool ok = ParseHead(head, &request);
    if (std::optional<std::string> cl = request.Header("Content-Length")) {
      body_len = ParseContentLength(*cl);
    }
    if (!ok || !body_len) return Close(conn, /*reset=*/false);
    if (evbuffer_get_length(in) < head_len + 4 + *body_len) return;
    evbuffer_drain(in, head_len + 4);
    request.body.resize(*body_len);
    evbuffer_remove(in, request.body.data(), *body_len);
    request.connection = conn->index;
    conn->keep_alive = !WantsClose(request);
    conn->behavior = Record(std::move(request));
    conn->busy = true;
    if (conn->behavior.delay_ms > 0) {
      int ms = conn->behavior.delay_ms;
      timeval tv{ms / 1000, (ms % 1000) * 1000};
      evtimer_add(conn->timer.get(), &tv);
      return;
    }
    if (!Act(conn)) return;  // the connection is gone
  }
}

// Stores the request, wakes waiters, and returns the behaviour to apply to it.
UpstreamBehavior FakeUpstream::Record(RecordedRequest request) {
  UpstreamBehavior behavior;
  {
    std::lock_guard<std::mutex> lock(mu_);
    received_.push_back(std::move(request));
    if (!queued_.empty()) {
      behavior = std::move(queued_.front());
      queued_.pop_front();
    } else {
      behavior = behavior_;
    }
  }
  cv_.notify_all();
  return behavior;
}

// Applies the connection's current behaviour; false when it closed (and freed) the connection.
bool FakeUpstream::Act(Conn* conn) {
  const UpstreamBehavior& b = conn->behavior;
  switch (b.action) {
    case UpstreamAction::kResetAfterRequest:
      Close(conn, /*reset=*/true);
      return false;
    case UpstreamAction::kCloseAfterRequest:
      Close(conn, /*reset=*/false);
      return false;
    case UpstreamAction::kHang:
      return true;  // stays busy: later requests on this connection are never read
    case UpstreamAction::kMalformed: {
      static constexpr char kGarbage[] = "HTTP/1.1 2x0 N\x01T\r\nthis is not http\x7f\xff\r\n\r\n";
      bufferevent_write(conn->bev.get(), kGarbage, sizeof(kGarbage) - 1);
      conn->close_after_write = true;
      return true;
    }
    default:
      break;
  }
  WriteResponse(conn, b);
  conn->busy = false;
  bool closes = b.action == UpstreamAction::kPartial || b.action == UpstreamAction::kCloseDelimited;
  if (closes || !conn->keep_alive) conn->close_after_write = true;
  return true;
}

void FakeUpstream::WriteResponse(Conn* conn, const UpstreamBehavior& b) {
  std::string out;
  if (b.action == UpstreamAction::kInterim100) out = "HTTP/1.1 100 Continue\r\n\r\n";
  out += StatusHead(b);
  bool framed =
      FindHeader(b.headers, "Content-Length") || FindHeader(b.headers, "Transfer-Encoding");
  if (!conn->keep_alive || b.action == UpstreamAction::kCloseDelimited) {
    if (!FindHeader(b.headers, "Connection")) out += "Connection: close\r\n";
  }
  switch (b.action) {
    case UpstreamAction::kPartial:
      out += "Content-Length: 100\r\n\r\n" + (b.body + std::string(10, 'p')).substr(0, 10);
      break;
    case UpstreamAction::kChunked:
      out += (framed ? "\r\n" : "Transfer-Encoding: chunked\r\n\r\n") + Chunked(b.body);
      break;
    case UpstreamAction::kCloseDelimited:
      out += "\r\n" + b.body;
      break;
    case UpstreamAction::kBigBody: {
      out += "Content-Length: " + std::to_string(b.big_body_size) + "\r\n\r\n";
      out.reserve(out.size() + b.big_body_size);
      for (size_t i = 0; i < b.big_body_size; ++i) out += static_cast<char>('a' + i % 26);
      break;
    }
    default:  // kRespond, kInterim100
      if (!framed) out += "Content-Length: " + std::to_string(b.body.size()) + "\r\n";
      out += "\r\n" + b.body;
      break;
  }
  bufferevent_write(conn->bev.get(), out.data(), out.size());
}

void FakeUpstream::Close(Conn* conn, bool reset) {
  if (reset) {
    linger lg{1, 0};
    setsockopt(bufferevent_getfd(conn->bev.get()), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  conns_.erase(conn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --connections_open_;
  }
  cv_.notify_all();
}

}  // namespace idemgate::test

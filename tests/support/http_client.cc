// SPDX-License-Identifier: Apache-2.0
// TestClient: blocking sockets, poll() deadlines, and a deliberately simple response parser.
#include "tests/support/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <latch>
#include <thread>

namespace idemgate::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxHead = 1 << 20;

enum class Framing { kNone, kLength, kChunked, kUntilEof };
enum class BodyState { kDone, kNeedMore, kBad };

bool ParseHead(std::string_view head, HttpResponse* r) {
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos || !line.starts_with("HTTP/")) return false;
  r->version = line.substr(0, sp);
  std::string_view rest = line.substr(sp + 1);
  if (rest.size() < 3) return false;
  r->status = 0;
  for (int i = 0; i < 3; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return false;
    r->status = r->status * 10 + (rest[i] - '0');
  }
  r->reason = rest.size() > 4 ? rest.substr(4) : std::string_view();
  if (eol == std::string_view::npos) return true;
  return ParseHeaderLines(head.substr(eol + 2), &r->headers);
}

Framing ChooseFraming(const HttpResponse& r, bool head_request, size_t* length) {
  if (head_request || r.status < 200 || r.status == 204 || r.status == 304) return Framing::kNone;
  std::optional<std::string> te = r.Header("Transfer-Encoding");
  if (te && te->find("chunked") != std::string::npos) return Framing::kChunked;
  if (std::optional<std::string> cl = r.Header("Content-Length")) {
    std::optional<size_t> n = ParseContentLength(*cl);
    *length = n.value_or(0);
    return n ? Framing::kLength : Framing::kUntilEof;
  }
  return Framing::kUntilEof;
}

// Decodes a chunked body starting at data[0]; on kDone, *consumed covers the trailer too.
BodyState DecodeChunked(std::string_view data, std::string* body, size_t* consumed) {
  body->clear();
  size_t pos = 0;
  for (;;) {
    size_t eol = data.find("\r\n", pos);
    if (eol == std::string_view::npos) return BodyState::kNeedMore;
    std::string_view size_line = data.substr(pos, eol - pos);
    size_line = size_line.substr(0, size_line.find(';'));
    if (size_line.empty()) return BodyState::kBad;
    size_t size = 0;
    for (char c : size_line) {
      int lower = c | 0x20;
      int d =
          c >= '0' && c <= '9' ? c - '0' : (lower >= 'a' && lower <= 'f' ? lower - 'a' + 10 : -1);
      if (d < 0 || size > (size_t{1} << 40)) return BodyState::kBad;
      size = size * 16 + static_cast<size_t>(d);
    }
    pos = eol + 2;
    if (size == 0) break;
    if (data.size() < pos + size + 2) return BodyState::kNeedMore;
    if (data.substr(pos + size, 2) != "\r\n") return BodyState::kBad;
    body->append(data.substr(pos, size));
    pos += size + 2;
  }
  for (;;) {  // trailer fields, then the empty line
    size_t eol = data.find("\r\n", pos);
    if (eol == std::string_view::npos) return BodyState::kNeedMore;
    bool last = eol == pos;
    pos = eol + 2;
    if (last) break;
  }
  *consumed = pos;
  return BodyState::kDone;
}

}  // namespace

std::optional<std::string> HttpResponse::Header(std::string_view name) const {
  return FindHeader(headers, name);
}

int HttpResponse::HeaderCount(std::string_view name) const { return CountHeader(headers, name); }

void PrintTo(const HttpResponse& r, std::ostream* os) {
  *os << "HttpResponse{status=" << r.status << ", error=\"" << r.error << "\", raw=\""
      << r.raw.substr(0, 2000) << (r.raw.size() > 2000 ? "...\"}" : "\"}");
}

bool TestClient::Connect(uint16_t port, const std::string& host) {
  Close();
  port_ = port;
  host_ = host;
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(*v6);
  } else {
    return false;
  }
  UniqueFd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval send_timeout{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  fd_ = std::move(fd);
  return true;
}

void TestClient::Close() {
  fd_.Reset();
  buffer_.clear();
  eof_ = false;
}

void TestClient::ShutdownWrite() {
  if (fd_.valid()) shutdown(fd_.get(), SHUT_WR);
}

bool TestClient::SendRaw(std::string_view bytes) {
  if (!fd_.valid()) return false;
  while (!bytes.empty()) {
    ssize_t n = send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

TestClient::Fill TestClient::ReadMore(Clock::time_point deadline) {
  if (!fd_.valid()) return Fill::kError;
  if (eof_) return Fill::kEof;
  for (;;) {
    auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now()).count();
    pollfd p{fd_.get(), POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return Fill::kTimeout;
    char buf[65536];
    ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
      return Fill::kData;
    }
    eof_ = true;
    return n == 0 ? Fill::kEof : (errno == ECONNRESET ? Fill::kReset : Fill::kError);
  }
}

HttpResponse TestClient::Fail(std::string error, bool consume) {
  HttpResponse r;
  r.error = std::move(error);
  r.raw = buffer_;
  if (consume) buffer_.clear();
  return r;
}

static const char* FillError(int fill) {
  static const char* kNames[] = {"", "eof", "reset", "timeout", "read failed"};
  return kNames[fill];
}

HttpResponse TestClient::ReadResponse(Ms timeout, bool head_request) {
  if (!fd_.valid()) return Fail("not connected", false);
  auto deadline = Clock::now() + timeout;
  size_t head_end;
  while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (buffer_.size() > kMaxHead) return Fail("malformed", true);
    Fill f = ReadMore(deadline);
    if (f != Fill::kData) return Fail(FillError(static_cast<int>(f)), f != Fill::kTimeout);
  }
  HttpResponse r;
  if (!ParseHead(std::string_view(buffer_).substr(0, head_end), &r)) return Fail("malformed", true);
  size_t head_len = head_end + 4;
  size_t length = 0;
  Framing framing = ChooseFraming(r, head_request, &length);
  size_t total = 0;
  for (;;) {
    BodyState state = BodyState::kNeedMore;
    std::string_view rest = std::string_view(buffer_).substr(head_len);
    if (framing == Framing::kNone) {
      state = BodyState::kDone;
    } else if (framing == Framing::kLength && rest.size() >= length) {
      r.body = rest.substr(0, length);
      state = BodyState::kDone;
    } else if (framing == Framing::kChunked) {
      state = DecodeChunked(rest, &r.body, &length);
    }
    if (state == BodyState::kBad) return Fail("malformed", true);
    if (state == BodyState::kDone) {
      total = head_len + (framing == Framing::kNone ? 0 : length);
      break;
    }
    Fill f = ReadMore(deadline);
    if (f == Fill::kEof && framing == Framing::kUntilEof) {
      r.body = rest;
      total = buffer_.size();
      break;
    }
    if (f != Fill::kData) return Fail(FillError(static_cast<int>(f)), f != Fill::kTimeout);
  }
  r.raw = buffer_.substr(0, total);
  buffer_.erase(0, total);
  return r;
}

std::string TestClient::BuildRequest(const RequestSpec& spec, std::string_view host) {
  std::string out = spec.method + " " + spec.target + " HTTP/1.1\r\n";
  if (!FindHeader(spec.headers, "Host")) out += "Host: " + std::string(host) + "\r\n";
  for (const auto& [name, value] : spec.headers) out += name + ": " + value + "\r\n";
  bool framed =
      FindHeader(spec.headers, "Content-Length") || FindHeader(spec.headers, "Transfer-Encoding");
  bool has_body_method = spec.method == "POST" || spec.method == "PUT" || spec.method == "PATCH";
  if (!framed && (!spec.body.empty() || has_body_method)) {
    out += "Content-Length: " + std::to_string(spec.body.size()) + "\r\n";
  }
  return out + "\r\n" + spec.body;
}

HttpResponse TestClient::Request(std::string_view method, std::string_view target,
                                 const HeaderList& headers, std::string_view body, Ms timeout) {
  RequestSpec spec{std::string(method), std::string(target), headers, std::string(body)};
  return Request(spec, timeout);
}

HttpResponse TestClient::Request(const RequestSpec& spec, Ms timeout) {
  if (!fd_.valid()) return Fail("not connected", false);
  std::string host = host_ + ":" + std::to_string(port_);
  if (!SendRaw(BuildRequest(spec, host))) return Fail("send failed", false);
  auto deadline = Clock::now() + timeout;
  std::string interim;
  for (;;) {
    auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
    HttpResponse r = ReadResponse(std::max(left, Ms(0)), spec.method == "HEAD");
    if (!r.ok() || r.status >= 200 || r.status == 101) {
      r.interim_raw = std::move(interim);
      return r;
    }
    interim += r.raw;
  }
}

bool TestClient::IsClosed(Ms timeout) {
  if (!fd_.valid()) return true;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    Fill f = ReadMore(deadline);
    if (f == Fill::kTimeout) return false;
    if (f != Fill::kData) return true;
  }
}

std::vector<HttpResponse> SendConcurrently(uint16_t port, const std::vector<RequestSpec>& specs,
                                           TestClient::Ms timeout) {
  std::vector<HttpResponse> responses(specs.size());
  std::vector<TestClient> clients(specs.size());
  std::latch ready(static_cast<std::ptrdiff_t>(specs.size()));
  std::vector<std::thread> threads;
  threads.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] {
      bool connected = clients[i].Connect(port);
      ready.arrive_and_wait();
      if (!connected) {
        responses[i].error = "connect failed";
        return;
      }
      responses[i] = clients[i].Request(specs[i], timeout);
    });
  }
  for (auto& t : threads) t.join();
  return responses;
}

std::vector<HttpResponse> SendConcurrently(uint16_t port, int n, const RequestSpec& spec,
                                           TestClient::Ms timeout) {
  return SendConcurrently(port, std::vector<RequestSpec>(static_cast<size_t>(n), spec), timeout);
}

}  // namespace idemgate::test

// SPDX-License-Identifier: Apache-2.0
// Through the real binary: passthrough requests stream both ways. A 64 MiB
// download to a slow reader and a 64 MiB upload to a slow upstream keep the gateway's memory
// bounded (VmHWM reported), chunked stays chunked, an event stream's events arrive one by one,
// WebSocket is refused with a clear error, and guarded requests keep their limits.
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MEMORY_BOUNDS_MEANINGFUL false
#else
#define MEMORY_BOUNDS_MEANINGFUL true
#endif

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kMiB = 1 << 20;
constexpr size_t kBig = 64 << 20;

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// A one-connection origin on 127.0.0.1:0 written with blocking sockets, for what FakeUpstream
// cannot do: read a body slowly, or send an answer in steps the test controls. `serve` gets the
// accepted socket and the bytes read past the request's head.
class RawOrigin {
 public:
  using Serve = std::function<void(int fd, std::string head, std::string rest)>;
  explicit RawOrigin(Serve serve) {
    listener_ = BindLoopback(&port_);
    listen(listener_.get(), 8);
    thread_ = std::thread([this, serve = std::move(serve)] {
      UniqueFd conn(accept(listener_.get(), nullptr, nullptr));
      if (!conn.valid()) return;
      std::string in;
      char buf[4096];
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = recv(conn.get(), buf, sizeof(buf), 0);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      serve(conn.get(), in.substr(0, end + 4), in.substr(end + 4));
    });
  }
  ~RawOrigin() {
    shutdown(listener_.get(), SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::thread thread_;
};

class StreamTest : public GatewayTest {
 protected:
  void UseOrigin(const RawOrigin& origin) {
    Set("upstream", "url", "\"http://127.0.0.1:" + std::to_string(origin.port()) + "\"");
  }
  void Report(const std::string& what, int64_t bytes) {
    std::cout << "[ RSS      ] " << what << ": " << bytes / 1024 << " KiB\n";
    RecordProperty(what, std::to_string(bytes / 1024) + " KiB");
  }
  UniqueFd Connect() {
    UniqueFd fd = ConnectLoopback(port_);
    if (!fd.valid()) return {};
    timeval tv{10, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  }
};

// The case, at 64 MiB: a passthrough GET far over limits.max_response_body (8 MiB by
// default) is relayed whole to a reader slower than the upstream, and the gateway never holds
// more than a small window of it (its peak RSS grows by far less than the answer).
TEST_F(StreamTest, DownloadOf64MiBToASlowReaderIsRelayedWithBoundedMemory) {
  upstream_.SetBehavior(UpstreamBehavior::BigBody(kBig));
  StartGateway();
  const int64_t before = ProcStatusBytes(gateway_.pid(), "VmHWM");
  UniqueFd client = Connect();
  ASSERT_TRUE(SendAll(client.get(), "GET /v1/exports/all HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string head;
  size_t body = 0;
  bool ordered = true;  // the bytes are the upstream's: 'a' + i % 26
  std::vector<char> buf(64 << 10);
  while (body < kBig) {
    ssize_t n = recv(client.get(), buf.data(), buf.size(), 0);
    ASSERT_GT(n, 0) << "the connection ended after " << body << " body bytes; head: " << head;
    size_t i = 0;
    if (head.find("\r\n\r\n") == std::string::npos) {
      head.append(buf.data(), static_cast<size_t>(n));
      size_t end = head.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      i = static_cast<size_t>(n) - (head.size() - end - 4);
      head.resize(end + 4);
    }
    for (; i < static_cast<size_t>(n); ++i, ++body) {
      ordered = ordered && buf[i] == static_cast<char>('a' + body % 26);
    }
    std::this_thread::sleep_for(1ms);  // a slow reader: at most ~64 KiB a millisecond
  }
  const int64_t peak = ProcStatusBytes(gateway_.pid(), "VmHWM");
  Report("VmHWM before the 64 MiB download", before);
  Report("VmHWM after the 64 MiB download to a slow reader", peak);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 67108864\r\n"), std::string::npos) << head;
  EXPECT_EQ(body, kBig);
  EXPECT_TRUE(ordered);
  if (MEMORY_BOUNDS_MEANINGFUL) {
    EXPECT_LT(peak - before, 16 * kMiB);
  }
}

// A 64 MiB passthrough upload to an upstream that reads slower than the client sends: the
// upstream gets every byte, framed as sent, and the gateway holds only a window of it.
TEST_F(StreamTest, UploadOf64MiBToASlowUpstreamIsRelayedWithBoundedMemory) {
  std::atomic<size_t> received{0};
  std::atomic<bool> ordered{true};
  RawOrigin origin([&](int fd, std::string head, std::string rest) {
    std::vector<char> buf(64 << 10);
    size_t got = 0;
    auto count = [&](const char* data, size_t n) {
      for (size_t i = 0; i < n; ++i, ++got) {
        if (data[i] != static_cast<char>('A' + got % 26)) ordered = false;
      }
    };
    count(rest.data(), rest.size());
    while (got < kBig) {
      ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      count(buf.data(), static_cast<size_t>(n));
      std::this_thread::sleep_for(1ms);  // a slow upstream
    }
    received = got;
    std::string text = head.find("Content-Length: 67108864\r\n") != std::string::npos
                           ? "framed as sent"
                           : "framed otherwise: " + head;
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(text.size()) +
                    "\r\nConnection: close\r\n\r\n" + text);
  });
  UseOrigin(origin);
  StartGateway();
  const int64_t before = ProcStatusBytes(gateway_.pid(), "VmHWM");
  UniqueFd client = Connect();
  ASSERT_TRUE(SendAll(client.get(),
                      "PUT /v1/imports HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Length: " +
                          std::to_string(kBig) + "\r\n\r\n"));
  std::string chunk(1 << 20, '\0');
  for (size_t sent = 0; sent < kBig; sent += chunk.size()) {
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>('A' + (sent + i) % 26);
    ASSERT_TRUE(SendAll(client.get(), chunk)) << "after " << sent << " bytes";
  }
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = recv(client.get(), buf, sizeof(buf), 0)) > 0;) answer.append(buf, n);
  const int64_t peak = ProcStatusBytes(gateway_.pid(), "VmHWM");
  Report("VmHWM before the 64 MiB upload", before);
  Report("VmHWM after the 64 MiB upload to a slow upstream", peak);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("framed as sent"), std::string::npos) << answer;
  EXPECT_EQ(received.load(), kBig);
  EXPECT_TRUE(ordered.load());
  if (MEMORY_BOUNDS_MEANINGFUL) {
    EXPECT_LT(peak - before, 16 * kMiB);
  }
}

// A chunked request body reaches the upstream chunked, and a chunked answer reaches the client
// chunked (nothing is buffered to count its length).
TEST_F(StreamTest, ChunkedStaysChunkedBothWays) {
  const std::string answer(300 << 10, 'z');  // more than one read's worth
  std::mutex mu;  // the origin's thread writes what it saw, the test reads it
  std::string seen_head, seen_body;
  RawOrigin origin([&](int fd, std::string head, std::string rest) {
    char buf[4096];
    while (rest.find("0\r\n\r\n") == std::string::npos) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      rest.append(buf, static_cast<size_t>(n));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      seen_head = head;
      seen_body = rest;
    }
    std::string out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t at = 0; at < answer.size(); at += 100 << 10) {
      out += "19000\r\n" + answer.substr(at, 100 << 10) + "\r\n";
    }
    SendAll(fd, out + "0\r\n\r\n");
  });
  UseOrigin(origin);
  StartGateway();
  TestClient client(port_);
  ASSERT_TRUE(
      client.SendRaw("POST /v1/uploads HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  HttpResponse r = client.ReadResponse();
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.Header("Transfer-Encoding"), "chunked");
  EXPECT_FALSE(r.Header("Content-Length").has_value());
  EXPECT_FALSE(r.Header("Connection").has_value());  // the connection stays open
  EXPECT_EQ(r.body, answer);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(seen_head.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos) << seen_head;
  EXPECT_EQ(seen_head.find("Content-Length"), std::string::npos) << seen_head;
  EXPECT_EQ(seen_body, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
}

// text/event-stream: the client has event 1 before the upstream sends event 2 (the upstream
// waits for the client to say so), so nothing waits for the answer's end.
TEST_F(StreamTest, EventStreamEventsArriveOneByOne) {
  std::promise<void> client_has_event1;
  std::future<void> event1_seen = client_has_event1.get_future();
  std::atomic<bool> waited{false};
  RawOrigin origin([&](int fd, std::string, std::string) {
    SendAll(fd,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            "\r\nf\r\ndata: event 1\n\n\r\n");
    waited = event1_seen.wait_for(10s) == std::future_status::ready;
    SendAll(fd, "f\r\ndata: event 2\n\n\r\n0\r\n\r\n");
  });
  UseOrigin(origin);
  StartGateway();
  UniqueFd client = Connect();
  ASSERT_TRUE(SendAll(client.get(), "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string got;
  char buf[4096];
  while (got.find("data: event 1\n\n") == std::string::npos) {
    ssize_t n = recv(client.get(), buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << "event 1 did not arrive on its own; got: " << got;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(got.find("data: event 2"), std::string::npos);
  client_has_event1.set_value();
  while (got.find("0\r\n\r\n") == std::string::npos) {
    ssize_t n = recv(client.get(), buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_TRUE(waited.load());
  EXPECT_NE(got.find("Content-Type: text/event-stream\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("data: event 2\n\n"), std::string::npos) << got;
}

// upstream.response_timeout bounds the silence on a relayed answer, not its length: a stream
// whose events come more often than the timeout runs past it whole.
TEST_F(StreamTest, EventStreamLongerThanTheResponseTimeoutRunsToItsEnd) {
  constexpr int kEvents = 10;
  RawOrigin origin([&](int fd, std::string, std::string) {
    SendAll(fd,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < kEvents; ++i) {
      std::this_thread::sleep_for(250ms);  // a live stream's pace: 2.5 s in all, 1 s timeout
      SendAll(fd, "f\r\ndata: event " + std::to_string(i) + "\n\n\r\n");
    }
    SendAll(fd, "0\r\n\r\n");
  });
  UseOrigin(origin);
  Set("upstream", "response_timeout", "\"1s\"");
  Set("idempotency", "lease", "\"30s\"");
  StartGateway();
  TestClient client(port_);
  HttpResponse r = client.Request("GET", "/v1/events", {}, {}, 20s);
  ASSERT_EQ(r.status, 200) << r.error << " " << r.raw;
  for (int i = 0; i < kEvents; ++i) {
    EXPECT_NE(r.body.find("data: event " + std::to_string(i) + "\n\n"), std::string::npos) << i;
  }
}

// WebSocket is not tunnelled: the upgrade is refused with a clear JSON error and nothing goes
// upstream (formerly the Upgrade header was dropped and the request relayed as plain HTTP).
TEST_F(StreamTest, WebSocketUpgradeIsRefusedWithAClearError) {
  StartGateway();
  TestClient client(port_);
  HttpResponse r = client.Request("GET", "/v1/socket",
                                  {{"Connection", "Upgrade"},
                                   {"Upgrade", "websocket"},
                                   {"Sec-WebSocket-Version", "13"},
                                   {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(ErrorCodeOf(r), "bad_request") << r.body;
  EXPECT_NE(r.body.find("WebSocket"), std::string::npos) << r.body;
  EXPECT_EQ(upstream_.requests(), 0);
}

// Guarded requests keep their limits: their answer must be stored, so it is read whole within
// limits.max_response_body (and their body within max_request_body), while the same sizes pass
// through unguarded.
TEST_F(StreamTest, GuardedRequestsKeepTheirLimits) {
  Set("limits", "max_request_body", "\"64KiB\"");
  Set("limits", "max_response_body", "\"1MiB\"");
  upstream_.SetBehavior(UpstreamBehavior::BigBody(2 << 20));
  StartGateway();
  HttpResponse guarded = Post("k-big-answer", "{}");
  EXPECT_EQ(guarded.status, 502) << guarded.raw;
  EXPECT_EQ(ErrorCodeOf(guarded), "upstream_failed");
  HttpResponse replay = Post("k-big-answer", "{}");
  EXPECT_EQ(replay.status, 502);
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");  // stored: R4
  TestClient client(port_);
  HttpResponse relayed = client.Request("GET", "/v1/exports/big");
  EXPECT_EQ(relayed.status, 200) << relayed.error;
  EXPECT_EQ(relayed.body.size(), size_t{2} << 20);

  const std::string body(128 << 10, 'b');
  HttpResponse too_large = Post("k-big-request", body);
  EXPECT_EQ(too_large.status, 413);
  EXPECT_EQ(ErrorCodeOf(too_large), "request_too_large");
  upstream_.SetBehavior(UpstreamBehavior::Respond(200, "ok"));
  TestClient plain(port_);
  HttpResponse unguarded = plain.Request("POST", "/v1/uploads", {}, body);  // no key: relayed
  EXPECT_EQ(unguarded.status, 200) << unguarded.raw;
  std::optional<RecordedRequest> seen = upstream_.last_request();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->body.size(), body.size());
}

// A relayed answer is not stored, so an upstream cache's own Age reaches the client unchanged;
// a guarded answer drops it (R6: a replay's Age is the gateway's).
TEST_F(StreamTest, RelayedAnswerKeepsTheUpstreamsAge) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(200, "cached", {{"Age", "42"}}));
  StartGateway();
  TestClient client(port_);
  HttpResponse relayed = client.Request("GET", "/v1/cached");
  EXPECT_EQ(relayed.status, 200) << relayed.raw;
  EXPECT_EQ(relayed.Header("Age").value_or(""), "42") << relayed.raw;
  HttpResponse guarded = Post("k-age", "{}");
  EXPECT_EQ(guarded.status, 200) << guarded.raw;
  EXPECT_FALSE(guarded.Header("Age").has_value()) << guarded.raw;
}

}  // namespace
}  // namespace idemgate::test

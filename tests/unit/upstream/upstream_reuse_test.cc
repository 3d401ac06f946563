// UpstreamPool on a real libevent loop: when a connection may go back to the pool (an early
// answer with the request still queued must not; upstream.idle_timeout retires idle ones), and
// a TLS upstream cut without close_notify is a failure, not a complete close-delimited answer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "proxy/net/tls.h"
#include "proxy/upstream/upstream.h"
#include "tests/support/ev_util.h"
#include "tests/support/fake_upstream.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tls_tools.h"

namespace idemgate {
namespace {

using namespace std::chrono_literals;

// A blocking TCP server on 127.0.0.1:0 whose thread runs `serve(fd, index)` for each accepted
// connection, one after the other (index from 1). Held fds are closed at the end.
class RawServer {
 public:
  explicit RawServer(std::function<void(int fd, int index)> serve) : serve_(std::move(serve)) {
    listen_fd_ = test::BindLoopback(&port_).Release();
    listen(listen_fd_, 16);
    thread_ = std::thread([this] {
      for (int index = 1;; ++index) {
        int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) return;
        accepted_ = index;
        held_.push_back(fd);
        serve_(fd, index);
      }
    });
  }
  ~RawServer() {
    shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    close(listen_fd_);
    for (int fd : held_) close(fd);
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  std::function<void(int, int)> serve_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::vector<int> held_;
  std::thread thread_;
};

// Reads from `fd` until the end of a request head; false on EOF or error.
bool ReadHead(int fd) {
  std::string got;
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
  return true;
}

void SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

class UpstreamReuseTest : public ::testing::Test {
 protected:
  void MakePool(uint16_t port, SSL_CTX* tls = nullptr) {
    pool_ = std::make_unique<UpstreamPool>(base_.get(), HostPort{"127.0.0.1", port}, tls);
    ASSERT_TRUE(pool_->ok()) << pool_->error();
  }
  void TearDown() override { pool_.reset(); }

  // Sends `request` with `limits` and runs the loop until it is answered.
  UpstreamResult Call(std::string request, const UpstreamLimits& limits = {}) {
    UpstreamResult out;
    bool done = false;
    pool_->Send(std::move(request), false, limits, [&](UpstreamResult r) {
      out = std::move(r);
      done = true;
    });
    while (!done) event_base_loop(base_.get(), EVLOOP_ONCE);
    return out;
  }

  static std::string Post(size_t body_size) {
    return "POST /v1/upload HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body_size) +
           "\r\n\r\n" + std::string(body_size, 'b');
  }

  test::EventBasePtr base_{event_base_new()};
  std::unique_ptr<UpstreamPool> pool_;
};

// The upstream answers 413 after the head of a 32 MiB upload and reads no more: the rest of
// the body is still queued, so the connection must not be pooled. The next call goes out on a
// new connection and is answered (reused, it would sit behind 32 MiB the upstream never reads).
TEST_F(UpstreamReuseTest, EarlyAnswerWithTheRequestStillQueuedIsNotPooled) {
  RawServer server([](int fd, int index) {
    if (!ReadHead(fd)) return;
    if (index == 1) {  // answer early and stop reading this connection
      SendAll(fd, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    SendAll(fd, "HTTP/1.1 201 Created\r\nContent-Length: 6\r\n\r\nsecond");
  });
  MakePool(server.port());
  UpstreamResult first = Call(Post(32 << 20));
  ASSERT_EQ(first.error, UpstreamError::kNone) << first.detail;
  EXPECT_EQ(first.response.status, 413);
  EXPECT_EQ(pool_->idle(), 0u);
  UpstreamLimits limits;
  limits.response_timeout_ms = 3'000;
  UpstreamResult second = Call(Post(0), limits);
  ASSERT_EQ(second.error, UpstreamError::kNone) << second.detail;
  EXPECT_EQ(second.response.status, 201);
  EXPECT_EQ(second.response.body, "second");
  EXPECT_EQ(server.accepted(), 2);
}

// upstream.idle_timeout: a pooled connection idle that long is not reused (0: never reused);
// within it, it is.
TEST_F(UpstreamReuseTest, IdleTimeoutRetiresPooledConnections) {
  test::FakeUpstream upstream;
  ASSERT_TRUE(upstream.Start());
  upstream.SetBehavior(test::UpstreamBehavior::Respond(201, "ok"));
  MakePool(upstream.port());
  UpstreamLimits keep;
  keep.idle_timeout_ms = 60'000;
  ASSERT_EQ(Call(Post(2), keep).response.status, 201);
  ASSERT_EQ(Call(Post(2), keep).response.status, 201);
  EXPECT_EQ(upstream.connections_accepted(), 1);  // reused
  UpstreamLimits retire;
  retire.idle_timeout_ms = 0;
  ASSERT_EQ(Call(Post(2), retire).response.status, 201);
  EXPECT_EQ(upstream.connections_accepted(), 2);  // the pooled one was past its idle time
}

class TlsUpstreamTest : public UpstreamReuseTest {
 protected:
  void SetUp() override {
    std::string error;
    auto ca = test::MakeTestCa(dir_, "ca", &error);
    ASSERT_TRUE(ca) << error;
    auto cert = test::MakeTestServerCert(dir_, "server", *ca, "127.0.0.1", "IP:127.0.0.1", &error);
    ASSERT_TRUE(cert) << error;
    client_ctx_ = MakeClientTlsContext(ca->cert, &error);
    ASSERT_TRUE(client_ctx_) << error;
    server_ctx_ = MakeServerTlsContext(cert->cert, cert->key, &error);
    ASSERT_TRUE(server_ctx_) << error;
  }

  // A TLS server that answers with a close-delimited body, then closes with close_notify
  // (`clean`) or cuts the TCP connection without it.
  UpstreamResult CloseDelimitedCall(bool clean) {
    RawServer server([this, clean](int fd, int) {
      SSL* ssl = SSL_new(server_ctx_.get());
      SSL_set_fd(ssl, fd);
      char buf[4096];
      std::string got;
      if (SSL_accept(ssl) == 1) {
        while (got.find("\r\n\r\n") == std::string::npos) {
          int n = SSL_read(ssl, buf, sizeof(buf));
          if (n <= 0) break;
          got.append(buf, static_cast<size_t>(n));
        }
        std::string answer = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial body";
        SSL_write(ssl, answer.data(), static_cast<int>(answer.size()));
        if (clean) SSL_shutdown(ssl);
      }
      shutdown(fd, SHUT_RDWR);  // the TCP close; without SSL_shutdown a cut
      SSL_free(ssl);
    });
    MakePool(server.port(), client_ctx_.get());
    return Call(Post(2));
  }

  test::TempDir dir_;
  SslCtxPtr client_ctx_;
  SslCtxPtr server_ctx_;
};

TEST_F(TlsUpstreamTest, CloseDelimitedAnswerEndedByCloseNotifyIsComplete) {
  UpstreamResult r = CloseDelimitedCall(/*clean=*/true);
  ASSERT_EQ(r.error, UpstreamError::kNone) << r.detail;
  EXPECT_EQ(r.response.status, 200);
  EXPECT_EQ(r.response.body, "partial body");
}

// OpenSSL 3 reports this cut as an error by itself; OpenSSL 1.1 reported it as SSL_ERROR_SYSCALL,
// which allow_dirty_shutdown turned into a plain EOF: the pool no longer allows dirty shutdowns
// and checks for close_notify itself, so this holds whatever the TLS library.
TEST_F(TlsUpstreamTest, CloseDelimitedAnswerCutWithoutCloseNotifyIsAFailure) {
  UpstreamResult r = CloseDelimitedCall(/*clean=*/false);
  EXPECT_EQ(r.error, UpstreamError::kFailed)
      << "accepted a possibly truncated body: " << r.response.body;
}

}  // namespace
}  // namespace idemgate

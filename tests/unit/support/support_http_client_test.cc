// TestClient: response framing (length, chunked, EOF, none), pipelining, errors, exact raw bytes.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

#include "tests/support/ev_util.h"
#include "tests/support/http_client.h"
#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

// Accepts one connection, writes `pieces` one send() each, then closes if asked.
class ScriptedServer {
 public:
  ScriptedServer(std::vector<std::string> pieces, bool close_after) {
    listen_ = BindLoopback(&port_);
    listen(listen_.get(), 4);
    thread_ = std::thread([this, pieces = std::move(pieces), close_after] {
      conn_.Reset(accept(listen_.get(), nullptr, nullptr));
      for (const std::string& p : pieces) send(conn_.get(), p.data(), p.size(), MSG_NOSIGNAL);
      if (close_after) shutdown(conn_.get(), SHUT_WR);
    });
  }
  ~ScriptedServer() { thread_.join(); }
  uint16_t port() const { return port_; }

 private:
  UniqueFd listen_;
  UniqueFd conn_;
  uint16_t port_ = 0;
  std::thread thread_;
};

std::vector<std::string> Bytewise(std::string_view s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

const std::string kLength =
    "HTTP/1.1 201 Created\r\nLocation: /a\r\nContent-Length: 5\r\n\r\nhello";
const std::string kChunked =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    "4;ext=1\r\nwiki\r\n5\r\npedia\r\nA\r\n in chunks\r\n0\r\nX-Trailer: t\r\n\r\n";
const std::string kNoContent = "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n";

TEST(TestClient, ParsesPipelinedResponsesExactly) {
  ScriptedServer server({kLength + kChunked + kNoContent + kLength}, false);
  TestClient c(server.port());
  HttpResponse a = c.ReadResponse();
  HttpResponse b = c.ReadResponse();
  HttpResponse n = c.ReadResponse();
  HttpResponse d = c.ReadResponse();
  EXPECT_EQ(a.raw, kLength);
  EXPECT_EQ(a.body, "hello");
  EXPECT_EQ(a.Header("LOCATION"), "/a");
  EXPECT_EQ(b.raw, kChunked);
  EXPECT_EQ(b.body, "wikipedia in chunks");
  EXPECT_EQ(n.status, 204);
  EXPECT_EQ(n.raw, kNoContent);
  EXPECT_EQ(n.body, "");
  EXPECT_EQ(d.raw, kLength);
  EXPECT_EQ(c.ReadResponse(std::chrono::milliseconds(20)).error, "timeout");
}

TEST(TestClient, ReassemblesBytewiseDelivery) {
  ScriptedServer server(Bytewise(kChunked + kLength), false);
  TestClient c(server.port());
  EXPECT_EQ(c.ReadResponse().body, "wikipedia in chunks");
  EXPECT_EQ(c.ReadResponse().body, "hello");
}

TEST(TestClient, HeadResponseHasNoBody) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n" + kLength}, false);
  TestClient c(server.port());
  HttpResponse head = c.ReadResponse(TestClient::kDefaultTimeout, /*head_request=*/true);
  EXPECT_EQ(head.Header("Content-Length"), "99");
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(c.ReadResponse().raw, kLength);
}

TEST(TestClient, CloseDelimitedBodyAndThenClosed) {
  std::string resp = "HTTP/1.0 200 OK\r\nServer: x\r\n\r\nto the end";
  ScriptedServer server({resp}, true);
  TestClient c(server.port());
  HttpResponse r = c.ReadResponse();
  EXPECT_EQ(r.version, "HTTP/1.0");
  EXPECT_EQ(r.body, "to the end");
  EXPECT_EQ(r.raw, resp);
  EXPECT_TRUE(c.IsClosed());
}

TEST(TestClient, TruncatedBodyIsEofWithWhatCame) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, true);
  TestClient c(server.port());
  HttpResponse r = c.ReadResponse();
  EXPECT_EQ(r.error, "eof");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.raw.ends_with("abc"));
}

TEST(TestClient, GarbageIsMalformed) {
  ScriptedServer server({"SSH-2.0-OpenSSH\r\n\r\n"}, true);
  TestClient c(server.port());
  EXPECT_EQ(c.ReadResponse().error, "malformed");
}

TEST(TestClient, BadChunkIsMalformed) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}, true);
  TestClient c(server.port());
  EXPECT_EQ(c.ReadResponse().error, "malformed");
}

TEST(TestClient, NotConnectedAndRefused) {
  TestClient c;
  EXPECT_EQ(c.Request("GET", "/").error, "not connected");
  uint16_t port = 0;
  {
    UniqueFd fd = BindLoopback(&port);  // bound, never listening
    ASSERT_TRUE(fd.valid());
    EXPECT_FALSE(c.Connect(port));
  }
  EXPECT_FALSE(c.connected());
}

TEST(TestClient, BuildRequestAddsHostAndContentLength) {
  EXPECT_EQ(TestClient::BuildRequest({"POST", "/p", {{"A", "1"}}, "xy"}, "h:1"),
            "POST /p HTTP/1.1\r\nHost: h:1\r\nA: 1\r\nContent-Length: 2\r\n\r\nxy");
  EXPECT_EQ(TestClient::BuildRequest({"POST", "/p", {}, ""}, "h"),
            "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(TestClient::BuildRequest({"GET", "/", {{"host", "x"}}, ""}, "h"),
            "GET / HTTP/1.1\r\nhost: x\r\n\r\n");
  EXPECT_EQ(
      TestClient::BuildRequest({"POST", "/", {{"Transfer-Encoding", "chunked"}}, "0\r\n\r\n"}, "h"),
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
}

}  // namespace
}  // namespace idemgate::test

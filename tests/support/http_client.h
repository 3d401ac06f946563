// SPDX-License-Identifier: Apache-2.0
// TestClient: a small blocking HTTP/1.1 client for tests, independent of the gateway's parser.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/ev_util.h"
#include "tests/support/http_text.h"

namespace idemgate::test {

struct HttpResponse {
  int status = 0;  // 0 when no complete response arrived (see error)
  std::string version;
  std::string reason;
  HeaderList headers;       // in arrival order, names as sent
  std::string body;         // de-chunked
  std::string raw;          // the exact bytes: status line, headers, body as framed on the wire
  std::string interim_raw;  // 1xx responses that Request() read before this one, as bytes
  // Empty on success; otherwise "timeout", "eof" (closed before a complete response), "reset",
  // "malformed", "not connected", "send failed", "connect failed". `raw` then holds what came.
  std::string error;

  bool ok() const { return error.empty(); }
  // First value of `name` (case-insensitive); nullopt when absent.
  std::optional<std::string> Header(std::string_view name) const;
  int HeaderCount(std::string_view name) const;
};
void PrintTo(const HttpResponse& r, std::ostream* os);  // for gtest failure messages

struct RequestSpec {
  std::string method = "GET";
  std::string target = "/";
  HeaderList headers;
  std::string body;
};

class TestClient {
 public:
  using Ms = std::chrono::milliseconds;
  static constexpr Ms kDefaultTimeout = std::chrono::seconds(5);

  TestClient() = default;
  explicit TestClient(uint16_t port) { Connect(port); }

  // Opens a new connection (closing any previous one). False on failure.
  bool Connect(uint16_t port, const std::string& host = "127.0.0.1");
  void Close();
  bool connected() const { return fd_.valid(); }
  uint16_t port() const { return port_; }
  // Half-closes: the server sees EOF on its read side.
  void ShutdownWrite();

  // Writes all of `bytes` (bounded by a 10 s send timeout). False on failure.
  bool SendRaw(std::string_view bytes);
  // Reads one response (a 1xx counts as one) framed by Content-Length, chunked, or EOF.
  // `head_request`: the response has no body whatever its headers say.
  HttpResponse ReadResponse(Ms timeout = kDefaultTimeout, bool head_request = false);
  // Sends a request built by BuildRequest and reads the final response (skipping 1xx into
  // interim_raw), on the same keep-alive connection.
  HttpResponse Request(std::string_view method, std::string_view target,
                       const HeaderList& headers = {}, std::string_view body = {},
                       Ms timeout = kDefaultTimeout);
  HttpResponse Request(const RequestSpec& spec, Ms timeout = kDefaultTimeout);
  // True when the server closes (EOF or reset) within `timeout`; bytes that arrive meanwhile
  // are kept for ReadResponse.
  bool IsClosed(Ms timeout = kDefaultTimeout);

  // "METHOD target HTTP/1.1", Host (unless given), the headers, Content-Length (unless given or
  // Transfer-Encoding given; added when the body is non-empty or the method is POST/PUT/PATCH).
  static std::string BuildRequest(const RequestSpec& spec, std::string_view host = "127.0.0.1");

 private:
  enum class Fill { kData, kEof, kReset, kTimeout, kError };
  Fill ReadMore(std::chrono::steady_clock::time_point deadline);
  HttpResponse Fail(std::string error, bool consume);

  UniqueFd fd_;
  uint16_t port_ = 0;
  std::string host_;
  std::string buffer_;  // received, not yet returned
  bool eof_ = false;
};

// Sends each request from its own thread on its own connection, released together once all
// are connected; returns the responses in the order of `specs`.
std::vector<HttpResponse> SendConcurrently(uint16_t port, const std::vector<RequestSpec>& specs,
                                           TestClient::Ms timeout = std::chrono::seconds(10));
// `n` copies of `spec`.
std::vector<HttpResponse> SendConcurrently(uint16_t port, int n, const RequestSpec& spec,
                                           TestClient::Ms timeout = std::chrono::seconds(10));

}  // namespace idemgate::test

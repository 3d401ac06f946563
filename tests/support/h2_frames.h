// SPDX-License-Identifier: Apache-2.0
// Raw HTTP/2 frames, for what nghttp2's client would never send (floods, CONTINUATION
// storms, resets at once), with header blocks encoded by nghttp2's HPACK deflater; and the
// frames a server sent, parsed back. Used in process (tests/unit/http) and against the binary.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/h2_test_client.h"

namespace idemgate::h2test {

// ----- Raw frames, for what nghttp2's client would never send -----

inline std::string Frame(uint8_t type, uint8_t flags, int32_t stream, std::string_view payload) {
  std::string f;
  const size_t n = payload.size();
  f.push_back(static_cast<char>(n >> 16));
  f.push_back(static_cast<char>(n >> 8));
  f.push_back(static_cast<char>(n));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) f.push_back(static_cast<char>(stream >> shift));
  f.append(payload);
  return f;
}

inline std::string Preface() {
  return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(NGHTTP2_SETTINGS, 0, 0, "");
}

// One connection's HPACK encoder.
class Encoder {
 public:
  Encoder() { nghttp2_hd_deflate_new(&deflater_, 4096); }
  ~Encoder() { nghttp2_hd_deflate_del(deflater_); }
  std::string Block(const Fields& fields) {
    std::vector<nghttp2_nv> nva = ToNv(fields);
    std::string out(nghttp2_hd_deflate_bound(deflater_, nva.data(), nva.size()), '\0');
    ssize_t n = nghttp2_hd_deflate_hd(deflater_, reinterpret_cast<uint8_t*>(out.data()), out.size(),
                                      nva.data(), nva.size());
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return out;
  }

 private:
  nghttp2_hd_deflater* deflater_ = nullptr;
};

inline Fields PostHead(const std::string& path = "/v1/pay") {
  return {{":method", "POST"}, {":scheme", "https"}, {":authority", "api.test"}, {":path", path}};
}

// The frames the server sent, as (type, stream, error code for RST_STREAM / GOAWAY).
struct SeenFrame {
  uint8_t type;
  int32_t stream;
  uint32_t code;
};
inline std::vector<SeenFrame> ParseFrames(std::string_view bytes) {
  std::vector<SeenFrame> out;
  auto u32 = [](std::string_view b) {
    return (uint32_t(uint8_t(b[0])) << 24) | (uint32_t(uint8_t(b[1])) << 16) |
           (uint32_t(uint8_t(b[2])) << 8) | uint32_t(uint8_t(b[3]));
  };
  while (bytes.size() >= 9) {
    const size_t len = (size_t(uint8_t(bytes[0])) << 16) | (size_t(uint8_t(bytes[1])) << 8) |
                       size_t(uint8_t(bytes[2]));
    if (bytes.size() < 9 + len) break;
    SeenFrame f{uint8_t(bytes[3]), int32_t(u32(bytes.substr(5)) & 0x7fffffff), 0};
    std::string_view payload = bytes.substr(9, len);
    if (f.type == NGHTTP2_RST_STREAM && len >= 4) f.code = u32(payload);
    if (f.type == NGHTTP2_GOAWAY && len >= 8) f.code = u32(payload.substr(4));
    out.push_back(f);
    bytes.remove_prefix(9 + len);
  }
  return out;
}
inline const SeenFrame* FindFrame(const std::vector<SeenFrame>& frames, uint8_t type,
                                  int32_t stream = -1) {
  for (const SeenFrame& f : frames) {
    if (f.type == type && (stream < 0 || f.stream == stream)) return &f;
  }
  return nullptr;
}

}  // namespace idemgate::h2test

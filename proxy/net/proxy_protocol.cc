// SPDX-License-Identifier: Apache-2.0
// PROXY protocol v1 (text) and v2 (binary) header parsing (see proxy_protocol.h).
#include "proxy/net/proxy_protocol.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace idemgate {

namespace {

constexpr char kV2Signature[] = "\r\n\r\n\0\r\nQUIT\n";  // 12 bytes
constexpr size_t kV2SignatureSize = 12;
constexpr std::string_view kV1Prefix = "PROXY ";

ProxyParse Invalid(ProxyHeader* out, std::string why) {
  out->error = std::move(why);
  return ProxyParse::kInvalid;
}

// A decimal port, 0-65535, no sign, no leading zero but "0" itself.
bool ParsePort(std::string_view text, uint16_t* port) {
  if (text.empty() || text.size() > 5 || (text.size() > 1 && text[0] == '0')) return false;
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

// "PROXY TCP4 <src> <dst> <sport> <dport>\r\n", "PROXY TCP6 ...", "PROXY UNKNOWN ...\r\n".
ProxyParse ParseV1(std::string_view data, ProxyHeader* out) {
  const size_t eol = data.find("\r\n");
  if (eol == std::string_view::npos) {
    if (data.size() >= kProxyV1Max) return Invalid(out, "a v1 header longer than 107 bytes");
    if (data.find('\n') != std::string_view::npos) return Invalid(out, "a v1 header without CRLF");
    return ProxyParse::kNeedMore;
  }
  if (eol + 2 > kProxyV1Max) return Invalid(out, "a v1 header longer than 107 bytes");
  std::string_view line = data.substr(kV1Prefix.size(), eol - kV1Prefix.size());
  out->size = eol + 2;
  if (line == "UNKNOWN" || line.starts_with("UNKNOWN ")) return ProxyParse::kDone;
  std::string_view parts[5];
  for (int i = 0; i < 5; ++i) {
    const size_t sp = line.find(' ');
    if ((i < 4) == (sp == std::string_view::npos)) return Invalid(out, "a malformed v1 header");
    parts[i] = line.substr(0, sp);
    line = i < 4 ? line.substr(sp + 1) : std::string_view();
  }
  const int family = parts[0] == "TCP4" ? AF_INET : parts[0] == "TCP6" ? AF_INET6 : 0;
  if (family == 0) return Invalid(out, "a v1 header with protocol other than TCP4/TCP6/UNKNOWN");
  unsigned char addr[16];
  uint16_t dport = 0;
  for (int i : {1, 2}) {
    if (inet_pton(family, std::string(parts[i]).c_str(), addr) != 1) {
      return Invalid(out, "a v1 header with a bad address");
    }
  }
  if (!ParsePort(parts[3], &out->source_port) || !ParsePort(parts[4], &dport)) {
    return Invalid(out, "a v1 header with a bad port");
  }
  out->has_address = true;
  out->source_ip = std::string(parts[1]);
  return ProxyParse::kDone;
}

ProxyParse ParseV2(std::string_view data, ProxyHeader* out) {
  if (data.size() < 16) return ProxyParse::kNeedMore;
  const auto* b = reinterpret_cast<const unsigned char*>(data.data());
  if ((b[12] >> 4) != 2) return Invalid(out, "a v2 header of another version");
  const int command = b[12] & 0x0f;
  if (command > 1) return Invalid(out, "a v2 header with an unknown command");
  const size_t length = static_cast<size_t>(b[14]) << 8 | b[15];
  if (length > kProxyV2MaxPayload) return Invalid(out, "an oversize v2 header");
  if (data.size() < 16 + length) return ProxyParse::kNeedMore;
  out->size = 16 + length;
  if (command == 0) return ProxyParse::kDone;  // LOCAL: the balancer's own connection
  const int family = b[13] >> 4, transport = b[13] & 0x0f;
  if (transport > 2) return Invalid(out, "a v2 header with an unknown transport");
  char text[INET6_ADDRSTRLEN] = "";
  if (family == 1 || family == 2) {  // AF_INET: 4+4+2+2 bytes; AF_INET6: 16+16+2+2
    const size_t alen = family == 1 ? 4 : 16;
    if (length < 2 * alen + 4) return Invalid(out, "a v2 header too short for its addresses");
    if (inet_ntop(family == 1 ? AF_INET : AF_INET6, b + 16, text, sizeof text) == nullptr) {
      return Invalid(out, "a v2 header with a bad address");
    }
    out->has_address = true;
    out->source_ip = text;
    out->source_port = static_cast<uint16_t>(b[16 + 2 * alen] << 8 | b[17 + 2 * alen]);
  } else if (family > 3) {
    return Invalid(out, "a v2 header with an unknown address family");
  }  // UNSPEC and AF_UNIX: no IP address to take; keep the peer
  return ProxyParse::kDone;
}

}  // namespace

ProxyParse ParseProxyHeader(std::string_view data, ProxyHeader* out) {
  *out = ProxyHeader{};
  if (data.empty()) return ProxyParse::kNeedMore;
  // Which version the first bytes can still be.
  const size_t v2 = std::min(data.size(), kV2SignatureSize);
  if (std::memcmp(data.data(), kV2Signature, v2) == 0) {
    return data.size() < kV2SignatureSize ? ProxyParse::kNeedMore : ParseV2(data, out);
  }
  const size_t v1 = std::min(data.size(), kV1Prefix.size());
  if (data.substr(0, v1) == kV1Prefix.substr(0, v1)) {
    return data.size() < kV1Prefix.size() ? ProxyParse::kNeedMore : ParseV1(data, out);
  }
  return Invalid(out, "no PROXY protocol header (listen.proxy_protocol is on)");
}

}  // namespace idemgate

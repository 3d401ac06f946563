// SPDX-License-Identifier: Apache-2.0
// The PROXY protocol header (HAProxy's spec, versions 1 and 2) that a TCP load balancer sends
// before the client's bytes, naming the client it accepted: parsed from the first bytes of a
// connection, without I/O. A listener with listen.proxy_protocol on needs one on every
// connection; v2 LOCAL (the balancer's own health check) and v1 UNKNOWN keep the real peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace idemgate {

// The longest header accepted: v1's 107 bytes, or v2's 16 plus this many address and TLV bytes
// (a balancer's TLVs are tens of bytes; a longer header is refused as oversize).
inline constexpr size_t kProxyV1Max = 107;
inline constexpr size_t kProxyV2MaxPayload = 2048;

enum class ProxyParse {
  kNeedMore,  // `data` is the start of a header that may be valid: read more
  kDone,      // a whole header: `size` bytes of `data`
  kInvalid,   // not a PROXY header, or a malformed or oversize one (`error` says why)
};

struct ProxyHeader {
  size_t size = 0;           // kDone: the header's bytes; the client's own bytes follow
  bool has_address = false;  // false: LOCAL, UNKNOWN or a family without an IP: keep the peer
  std::string source_ip;     // the client's address as text ("192.0.2.1", "2001:db8::1")
  uint16_t source_port = 0;
  std::string error;  // kInvalid
};

// Parses the start of a connection (the bytes read so far).
ProxyParse ParseProxyHeader(std::string_view data, ProxyHeader* out);

}  // namespace idemgate

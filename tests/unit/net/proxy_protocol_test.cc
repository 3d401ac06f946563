// SPDX-License-Identifier: Apache-2.0
// ParseProxyHeader: PROXY protocol v1 (TCP4, TCP6, UNKNOWN) and v2 (PROXY over IPv4 and IPv6,
// LOCAL, TLVs), a header that arrives in pieces, and what is refused: no header, malformed,
// truncated past its limit, oversize.
#include "proxy/net/proxy_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace idemgate {
namespace {

const std::string kSig("\r\n\r\n\0\r\nQUIT\n", 12);

std::string V2(unsigned char ver_cmd, unsigned char fam, const std::string& payload) {
  std::string h = kSig;
  h.push_back(static_cast<char>(ver_cmd));
  h.push_back(static_cast<char>(fam));
  h.push_back(static_cast<char>(payload.size() >> 8));
  h.push_back(static_cast<char>(payload.size() & 0xff));
  return h + payload;
}

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(ProxyProtocol, V1Tcp4) {
  const std::string h = "PROXY TCP4 192.0.2.7 10.0.0.1 51234 8080\r\n";
  ProxyHeader out;
  ASSERT_EQ(ParseProxyHeader(h + "GET / HTTP/1.1\r\n", &out), ProxyParse::kDone) << out.error;
  EXPECT_EQ(out.size, h.size());
  EXPECT_TRUE(out.has_address);
  EXPECT_EQ(out.source_ip, "192.0.2.7");
  EXPECT_EQ(out.source_port, 51234);
}

TEST(ProxyProtocol, V1Tcp6) {
  const std::string h = "PROXY TCP6 2001:db8::7 2001:db8::1 443 8443\r\n";
  ProxyHeader out;
  ASSERT_EQ(ParseProxyHeader(h, &out), ProxyParse::kDone) << out.error;
  EXPECT_EQ(out.source_ip, "2001:db8::7");
  EXPECT_EQ(out.source_port, 443);
}

TEST(ProxyProtocol, V1UnknownKeepsThePeer) {
  ProxyHeader out;
  ASSERT_EQ(ParseProxyHeader("PROXY UNKNOWN\r\nGET", &out), ProxyParse::kDone);
  EXPECT_EQ(out.size, 15u);
  EXPECT_FALSE(out.has_address);
  ASSERT_EQ(ParseProxyHeader("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", &out), ProxyParse::kDone);
  EXPECT_FALSE(out.has_address);
}

TEST(ProxyProtocol, V1InPiecesNeedsMore) {
  const std::string h = "PROXY TCP4 192.0.2.7 10.0.0.1 51234 8080\r\n";
  ProxyHeader out;
  for (size_t n = 1; n < h.size(); ++n) {
    EXPECT_EQ(ParseProxyHeader(h.substr(0, n), &out), ProxyParse::kNeedMore) << n;
  }
  EXPECT_EQ(ParseProxyHeader(h, &out), ProxyParse::kDone);
}

TEST(ProxyProtocol, V1Malformed) {
  ProxyHeader out;
  for (const char* bad :
       {"PROXY TCP4 192.0.2.7 10.0.0.1 51234\r\n", "PROXY TCP4 192.0.2.700 10.0.0.1 1 2\r\n",
        "PROXY TCP4 2001:db8::1 10.0.0.1 1 2\r\n", "PROXY TCP4 192.0.2.7 10.0.0.1 65536 2\r\n",
        "PROXY TCP4 192.0.2.7 10.0.0.1 01 2\r\n", "PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
        "PROXY TCP4 192.0.2.7  10.0.0.1 1 2\r\n", "PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n"}) {
    EXPECT_EQ(ParseProxyHeader(bad, &out), ProxyParse::kInvalid) << bad;
    EXPECT_FALSE(out.error.empty());
  }
}

TEST(ProxyProtocol, V1LongerThan107BytesIsRefused) {
  ProxyHeader out;
  const std::string unterminated = "PROXY UNKNOWN " + std::string(100, 'x');
  EXPECT_EQ(ParseProxyHeader(unterminated, &out), ProxyParse::kInvalid);
  EXPECT_EQ(ParseProxyHeader(unterminated + "\r\n", &out), ProxyParse::kInvalid);
}

TEST(ProxyProtocol, NoHeaderIsRefused) {
  ProxyHeader out;
  EXPECT_EQ(ParseProxyHeader("GET / HTTP/1.1\r\n\r\n", &out), ProxyParse::kInvalid);
  EXPECT_EQ(ParseProxyHeader("\x16\x03\x01", &out), ProxyParse::kInvalid);  // a TLS ClientHello
  EXPECT_EQ(ParseProxyHeader("PRI * HTTP/2.0", &out), ProxyParse::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROX", &out), ProxyParse::kNeedMore);
}

TEST(ProxyProtocol, V2Tcp4WithTlvs) {
  const std::string payload = Bytes({203, 0, 113, 9, 10, 0, 0, 1, 0xc3, 0x50, 0x1f, 0x90}) +
                              Bytes({0x04, 0x00, 0x02, 'a', 'b'});  // a TLV (NOOP)
  const std::string h = V2(0x21, 0x11, payload);
  ProxyHeader out;
  ASSERT_EQ(ParseProxyHeader(h + "\x16\x03\x01", &out), ProxyParse::kDone) << out.error;
  EXPECT_EQ(out.size, h.size());
  EXPECT_TRUE(out.has_address);
  EXPECT_EQ(out.source_ip, "203.0.113.9");
  EXPECT_EQ(out.source_port, 50000);
}

TEST(ProxyProtocol, V2Tcp6) {
  std::string src(16, '\0'), dst(16, '\0');
  src[0] = 0x20, src[1] = 0x01, src[2] = 0x0d, src[3] = static_cast<char>(0xb8), src[15] = 9;
  dst[15] = 1;
  ProxyHeader out;
  ASSERT_EQ(ParseProxyHeader(V2(0x21, 0x21, src + dst + Bytes({0, 80, 0, 81})), &out),
            ProxyParse::kDone)
      << out.error;
  EXPECT_EQ(out.source_ip, "2001:db8::9");
  EXPECT_EQ(out.source_port, 80);
}

TEST(ProxyProtocol, V2LocalKeepsThePeer) {
  ProxyHeader out;
  ASSERT_EQ(ParseProxyHeader(V2(0x20, 0x00, ""), &out), ProxyParse::kDone);
  EXPECT_EQ(out.size, 16u);
  EXPECT_FALSE(out.has_address);
  // LOCAL with addresses (some balancers send them): still the peer.
  ASSERT_EQ(ParseProxyHeader(V2(0x20, 0x11, std::string(12, '\1')), &out), ProxyParse::kDone);
  EXPECT_FALSE(out.has_address);
}

TEST(ProxyProtocol, V2Truncated) {
  const std::string h = V2(0x21, 0x11, Bytes({203, 0, 113, 9, 10, 0, 0, 1, 0, 1, 0, 2}));
  ProxyHeader out;
  for (size_t n = 1; n < h.size(); ++n) {
    EXPECT_EQ(ParseProxyHeader(h.substr(0, n), &out), ProxyParse::kNeedMore) << n;
  }
  // Its length too short for the addresses of its family.
  EXPECT_EQ(ParseProxyHeader(V2(0x21, 0x11, Bytes({1, 2, 3, 4})), &out), ProxyParse::kInvalid);
  EXPECT_EQ(ParseProxyHeader(V2(0x21, 0x21, std::string(20, '\0')), &out), ProxyParse::kInvalid);
}

TEST(ProxyProtocol, V2OversizeAndUnknownRefused) {
  ProxyHeader out;
  std::string big = kSig + Bytes({0x21, 0x11, 0x08, 0x01});  // 2049 bytes announced
  EXPECT_EQ(ParseProxyHeader(big, &out), ProxyParse::kInvalid);
  EXPECT_NE(out.error.find("oversize"), std::string::npos);
  EXPECT_EQ(ParseProxyHeader(V2(0x11, 0x11, std::string(12, '\0')), &out), ProxyParse::kInvalid);
  EXPECT_EQ(ParseProxyHeader(V2(0x22, 0x11, std::string(12, '\0')), &out), ProxyParse::kInvalid);
  EXPECT_EQ(ParseProxyHeader(V2(0x21, 0x51, std::string(12, '\0')), &out), ProxyParse::kInvalid);
}

}  // namespace
}  // namespace idemgate

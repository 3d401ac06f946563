// SPDX-License-Identifier: Apache-2.0
// Parsers for the scalar value syntaxes of the configuration: addresses, URLs, tokens, durations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "conf/config.h"

namespace idemgate::conf {

// "host:port" or "[v6]:port" -> HostPort (host without brackets). On failure returns nullopt
// and sets *why to a phrase like "missing port". Port 0 only when `allow_port_zero`.
std::optional<HostPort> ParseHostPort(std::string_view text, bool allow_port_zero,
                                      std::string* why);

struct HttpUrl {
  bool tls = false;
  HostPort addr;
};
// "http(s)://host[:port][/]" -> HttpUrl (default port 80 / 443). No userinfo, path, query or
// fragment. On failure returns nullopt and sets *why.
std::optional<HttpUrl> ParseHttpUrl(std::string_view text, std::string* why);

// "10.0.0.0/8", "2001:db8::/32", or an address alone (a /32 or /128). Host bits set under the
// prefix ("10.0.0.1/8") are refused: the operator meant another block. nullopt with *why.
std::optional<Cidr> ParseCidr(std::string_view text, std::string* why);
// Whether `ip` (numeric text, IPv4 or IPv6) is inside `cidr`.
bool CidrContains(const Cidr& cidr, std::string_view ip);

// An RFC 9110 token (a header name or a method): one or more tchar.
bool IsHttpToken(std::string_view text);

std::string ToUpperAscii(std::string_view text);
std::string ToLowerAscii(std::string_view text);
// Every byte printable ASCII, no space or control (true for "").
bool IsVisibleAscii(std::string_view text);

// a + b, or INT64_MAX when that overflows (b >= 0): durations that must not wrap.
int64_t SaturatingAdd(int64_t a, int64_t b);

// Milliseconds -> the shortest exact form with the largest unit: 1500 -> "1500ms", 35000 -> "35s".
std::string FormatDurationMs(int64_t ms);
// Microseconds -> the same with us, ms and s: 400 -> "400us", 10000 -> "10ms".
std::string FormatDurationUs(int64_t us);
// Bytes -> the largest exact binary unit: 1048576 -> "1MiB", 1500 -> "1500B".
std::string FormatSize(uint64_t bytes);

}  // namespace idemgate::conf

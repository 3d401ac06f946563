// SPDX-License-Identifier: Apache-2.0
// Parsers for the scalar value syntaxes of the configuration: addresses, URLs, tokens, durations.
#include "conf/config_values.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

namespace idemgate {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Leading decimal digits of `text` -> value (at most `max`); *rest gets what follows.
// nullopt when there are no digits or the value exceeds `max`.
std::optional<uint64_t> LeadingInteger(std::string_view text, uint64_t max,
                                       std::string_view* rest) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && IsDigit(text[i])) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (max - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return std::nullopt;
  *rest = text.substr(i);
  return value;
}

// A host name or IPv4 literal: letters, digits, '-', '.', '_'.
bool IsHostName(std::string_view host) {
  if (host.empty()) return false;
  for (char c : host) {
    if (!IsAlpha(c) && !IsDigit(c) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

// The inside of "[...]": hex digits, ':' and '.' (an embedded IPv4), with at least one ':'.
bool IsIpv6Literal(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return false;
  for (char c : host) {
    if (!IsHex(c) && c != ':' && c != '.') return false;
  }
  return true;
}

std::optional<uint16_t> ParsePort(std::string_view text, bool allow_zero, std::string* why) {
  std::string_view rest;
  auto port = LeadingInteger(text, 65535, &rest);
  if (text.empty()) {
    *why = "missing port after ':'";
    return std::nullopt;
  }
  if (!port || !rest.empty() || text.size() > 5) {
    *why = "bad port \"" + std::string(text) + "\" (expected 0-65535)";
    return std::nullopt;
  }
  if (*port == 0 && !allow_zero) {
    *why = "port 0 is not allowed here";
    return std::nullopt;
  }
  return static_cast<uint16_t>(*port);
}

bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() &&
         conf::ToLowerAscii(text.substr(0, prefix.size())) == prefix;
}

// A whole number followed by one of `units` -> the number times the unit's factor; nullopt for
// another unit or an int64 overflow.
template <size_t N>
std::optional<int64_t> ParseAmountWithUnit(
    std::string_view text, const std::array<std::pair<std::string_view, int64_t>, N>& units) {
  std::string_view unit;
  auto amount = LeadingInteger(text, std::numeric_limits<int64_t>::max(), &unit);
  if (!amount) return std::nullopt;
  for (const auto& [name, factor] : units) {
    if (unit != name) continue;
    if (*amount > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / factor)) {
      return std::nullopt;
    }
    return static_cast<int64_t>(*amount) * factor;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ParseDurationMs(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, int64_t>, 5> kUnits = {
      {{"ms", 1}, {"s", 1'000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}}};
  return ParseAmountWithUnit(text, kUnits);
}

std::optional<int64_t> ParseDurationUs(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, int64_t>, 3> kUnits = {
      {{"us", 1}, {"ms", 1'000}, {"s", 1'000'000}}};
  return ParseAmountWithUnit(text, kUnits);
}

std::optional<uint64_t> ParseSize(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 11> kUnits = {{
      {"", 1},
      {"B", 1},
      {"KiB", 1ULL << 10},
      {"MiB", 1ULL << 20},
      {"GiB", 1ULL << 30},
      {"TiB", 1ULL << 40},
      {"KB", 1'000},
      {"kB", 1'000},
      {"MB", 1'000'000},
      {"GB", 1'000'000'000},
      {"TB", 1'000'000'000'000},
  }};
  std::string_view unit;
  auto amount = LeadingInteger(text, std::numeric_limits<uint64_t>::max(), &unit);
  if (!amount) return std::nullopt;
  for (const auto& [name, factor] : kUnits) {
    if (unit != name) continue;
    if (*amount > std::numeric_limits<uint64_t>::max() / factor) return std::nullopt;
    return *amount * factor;
  }
  return std::nullopt;
}

namespace conf {

namespace {

// Numeric IPv4 or IPv6 text -> 16 bytes (IPv4 as ::ffff:a.b.c.d); *v4 says which it was.
bool ParseIp(std::string_view text, unsigned char out[16], bool* v4) {
  const std::string s(text);
  unsigned char four[4];
  if (inet_pton(AF_INET, s.c_str(), four) == 1) {
    std::memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    std::memcpy(out + 12, four, 4);
    *v4 = true;
    return true;
  }
  *v4 = false;
  return inet_pton(AF_INET6, s.c_str(), out) == 1;
}

}  // namespace

std::optional<Cidr> ParseCidr(std::string_view text, std::string* why) {
  const size_t slash = text.find('/');
  Cidr cidr;
  bool v4 = false;
  if (!ParseIp(text.substr(0, slash), cidr.addr, &v4)) {
    *why = "not an IP address";
    return std::nullopt;
  }
  const int width = v4 ? 32 : 128;
  int bits = width;
  if (slash != std::string_view::npos) {
    std::string_view n = text.substr(slash + 1);
    if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string_view::npos ||
        (bits = std::stoi(std::string(n))) > width) {
      *why = "the prefix length must be 0 to " + std::to_string(width);
      return std::nullopt;
    }
  }
  cidr.bits = bits + (v4 ? 96 : 0);
  for (int i = cidr.bits; i < 128; ++i) {
    if (cidr.addr[i / 8] & (0x80 >> (i % 8))) {
      *why = "it has address bits set past its prefix length";
      return std::nullopt;
    }
  }
  return cidr;
}

bool CidrContains(const Cidr& cidr, std::string_view ip) {
  unsigned char addr[16];
  bool v4 = false;
  if (!ParseIp(ip, addr, &v4)) return false;
  for (int i = 0; i < cidr.bits; ++i) {
    const unsigned char bit = 0x80 >> (i % 8);
    if ((addr[i / 8] & bit) != (cidr.addr[i / 8] & bit)) return false;
  }
  return true;
}

std::optional<HostPort> ParseHostPort(std::string_view text, bool allow_port_zero,
                                      std::string* why) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      *why = "missing ']' after the IPv6 address";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    if (!IsIpv6Literal(host)) {
      *why = "bad IPv6 address \"" + std::string(host) + "\"";
      return std::nullopt;
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      *why = "missing port (expected [host]:port)";
      return std::nullopt;
    }
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      *why = "missing port (expected host:port)";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      *why = "an IPv6 address must be in brackets, like [::1]:8080";
      return std::nullopt;
    }
    if (!IsHostName(host)) {
      *why = host.empty() ? "missing host (expected host:port)"
                          : "bad host \"" + std::string(host) + "\"";
      return std::nullopt;
    }
  }
  auto parsed_port = ParsePort(port, allow_port_zero, why);
  if (!parsed_port) return std::nullopt;
  return HostPort{std::string(host), *parsed_port};
}

std::optional<HttpUrl> ParseHttpUrl(std::string_view text, std::string* why) {
  HttpUrl url;
  if (StartsWithNoCase(text, "https://")) {
    url.tls = true;
    text.remove_prefix(8);
  } else if (StartsWithNoCase(text, "http://")) {
    text.remove_prefix(7);
  } else {
    *why = "expected a URL starting with http:// or https://";
    return std::nullopt;
  }
  const size_t end = text.find_first_of("/?#");
  const std::string_view authority = text.substr(0, end);
  const std::string_view rest = end == std::string_view::npos ? "" : text.substr(end);
  if (!rest.empty() && rest != "/") {
    *why = "the URL must have no path, query or fragment (got \"" + std::string(rest) + "\")";
    return std::nullopt;
  }
  if (authority.find('@') != std::string_view::npos) {
    *why = "the URL must not carry user information";
    return std::nullopt;
  }
  const size_t bracket = authority.rfind(']');
  const size_t colon = authority.rfind(':');
  const bool has_port =
      colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket);
  std::string host_port(authority);
  if (!has_port) host_port += url.tls ? ":443" : ":80";
  auto addr = ParseHostPort(host_port, /*allow_port_zero=*/false, why);
  if (!addr) return std::nullopt;
  url.addr = std::move(*addr);
  return url;
}

bool IsHttpToken(std::string_view text) {
  static constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  if (text.empty()) return false;
  for (char c : text) {
    if (!IsAlpha(c) && !IsDigit(c) && kSpecials.find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::string ToUpperAscii(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string ToLowerAscii(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool IsVisibleAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c > 0x20 && c < 0x7f;
  });
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

std::string FormatDurationMs(int64_t ms) {
  static constexpr std::array<std::pair<std::string_view, int64_t>, 4> kUnits = {
      {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}}};
  for (const auto& [name, factor] : kUnits) {
    if (ms != 0 && ms % factor == 0) return std::to_string(ms / factor) + std::string(name);
  }
  return std::to_string(ms) + "ms";
}

std::string FormatDurationUs(int64_t us) {
  static constexpr std::array<std::pair<std::string_view, int64_t>, 2> kUnits = {
      {{"s", 1'000'000}, {"ms", 1'000}}};
  for (const auto& [name, factor] : kUnits) {
    if (us != 0 && us % factor == 0) return std::to_string(us / factor) + std::string(name);
  }
  return std::to_string(us) + "us";
}

std::string FormatSize(uint64_t bytes) {
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 4> kUnits = {
      {{"TiB", 1ULL << 40}, {"GiB", 1ULL << 30}, {"MiB", 1ULL << 20}, {"KiB", 1ULL << 10}}};
  for (const auto& [name, factor] : kUnits) {
    if (bytes != 0 && bytes % factor == 0)
      return std::to_string(bytes / factor) + std::string(name);
  }
  return std::to_string(bytes) + "B";
}

}  // namespace conf
}  // namespace idemgate

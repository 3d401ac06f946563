// SPDX-License-Identifier: Apache-2.0
// The client behind trusted proxies, from X-Forwarded-For (see forwarded.h).
#include "proxy/policy/forwarded.h"

#include <arpa/inet.h>

#include "conf/config_values.h"

namespace idemgate {

namespace {

bool Trusted(std::string_view ip, const std::vector<Cidr>& trusted) {
  for (const Cidr& cidr : trusted) {
    if (conf::CidrContains(cidr, ip)) return true;
  }
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsIp(std::string_view text) {
  unsigned char buf[16];
  const std::string s(text);
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace

std::string BelievedClient(std::string_view peer, const std::vector<Cidr>& trusted,
                           Request* request) {
  if (trusted.empty() || !Trusted(peer, trusted)) return std::string(peer);
  std::vector<std::string_view> entries;  // every X-Forwarded-For entry, left to right
  for (const Header& h : request->headers) {
    if (!HeaderNameEquals(h.name, "X-Forwarded-For")) continue;
    std::string_view v = h.value;
    for (size_t comma; !v.empty(); v = comma == std::string_view::npos ? "" : v.substr(comma + 1)) {
      comma = v.find(',');
      entries.push_back(Trim(v.substr(0, comma)));
    }
  }
  size_t i = entries.size();
  while (i > 0 && IsIp(entries[i - 1]) && Trusted(entries[i - 1], trusted)) --i;
  if (i == 0 || !IsIp(entries[i - 1])) return std::string(peer);
  std::string client(entries[i - 1]);
  std::string kept;  // the entries left of the client's
  for (size_t k = 0; k + 1 < i; ++k) kept += (kept.empty() ? "" : ", ") + std::string(entries[k]);
  Headers headers;
  for (Header& h : request->headers) {
    if (!HeaderNameEquals(h.name, "X-Forwarded-For")) headers.push_back(std::move(h));
  }
  if (!kept.empty()) headers.push_back(Header{"X-Forwarded-For", kept});
  request->headers = std::move(headers);
  return client;
}

}  // namespace idemgate

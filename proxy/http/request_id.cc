// SPDX-License-Identifier: Apache-2.0
#include "proxy/http/request_id.h"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>

namespace idemgate {

bool IsUsableRequestId(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

namespace {
// Each byte's two hex digits, so an id is written a byte, not a nibble, at a time.
constexpr std::array<std::array<char, 2>, 256> kHexPairs = [] {
  constexpr char kHex[] = "0123456789abcdef";
  std::array<std::array<char, 2>, 256> t{};
  for (int b = 0; b < 256; ++b) t[b] = {kHex[b & 15], kHex[b >> 4]};
  return t;
}();

// 128 bits from a per-thread generator seeded once from the OS's CSPRNG: an id correlates
// log lines and is no secret, and RAND_bytes per request cost ~8% of a proxied request (OpenSSL
// 3 looks its DRBG's parameters up on every call).
void WriteNewRequestId(std::string* out) {
  thread_local std::mt19937_64 gen = [] {
    uint32_t seed[8];
    if (RAND_bytes(reinterpret_cast<unsigned char*>(seed), sizeof(seed)) != 1) {
      std::random_device dev;
      for (uint32_t& word : seed) word = dev();
    }
    std::seed_seq seq(std::begin(seed), std::end(seed));
    return std::mt19937_64(seq);
  }();
  out->resize(32);
  char* p = out->data();
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = gen();
    for (int i = 0; i < 8; ++i, bits >>= 8, p += 2) memcpy(p, kHexPairs[bits & 0xff].data(), 2);
  }
}
}  // namespace

std::string NewRequestId() {
  std::string out;
  WriteNewRequestId(&out);
  return out;
}

std::string AssignRequestId(Request* request) {
  std::string id;
  AssignRequestId(request, &id);
  return id;
}

void AssignRequestId(Request* request, std::string* id) {
  id->clear();
  Headers& headers = request->headers;
  for (const Header& h : headers) {
    if (HeaderNameEquals(h.name, kRequestIdHeader) && IsUsableRequestId(h.value)) {
      *id = h.value;
      break;
    }
  }
  bool given = !id->empty();
  if (!given) WriteNewRequestId(id);
  bool kept = false;
  std::erase_if(headers, [&](const Header& h) {
    if (!HeaderNameEquals(h.name, kRequestIdHeader)) return false;
    if (given && !kept && h.value == *id) return !(kept = true);
    return true;
  });
  if (!kept) headers.push_back({kRequestIdHeader, *id});
}

}  // namespace idemgate

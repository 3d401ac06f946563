#include "proxy/request_id.h"

#include <openssl/rand.h>

#include <algorithm>
#include <random>

namespace idemgate {

bool IsUsableRequestId(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string NewRequestId() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    thread_local std::mt19937_64 fallback{std::random_device{}()};
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(fallback());
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string AssignRequestId(Request* request) {
  std::string id;
  Headers& headers = request->headers;
  for (const Header& h : headers) {
    if (HeaderNameEquals(h.name, kRequestIdHeader) && IsUsableRequestId(h.value)) {
      id = h.value;
      break;
    }
  }
  bool given = !id.empty();
  if (!given) id = NewRequestId();
  bool kept = false;
  std::erase_if(headers, [&](const Header& h) {
    if (!HeaderNameEquals(h.name, kRequestIdHeader)) return false;
    if (given && !kept && h.value == id) return !(kept = true);
    return true;
  });
  if (!kept) headers.push_back({kRequestIdHeader, id});
  return id;
}

}  // namespace idemgate

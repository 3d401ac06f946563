// SPDX-License-Identifier: Apache-2.0
// Lower-case hex of a few bytes: the digests, scope ids and key hashes the gateway names in its
// headers, logs, metrics and admin answers.
#pragma once

#include <cstddef>
#include <string>

namespace idemgate {

// The first `n` bytes of `bytes`, two lower-case hex digits each (2n characters).
inline std::string LowerHex(const unsigned char* bytes, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the libFuzzer targets: invariant checks that abort, and input splitting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace idemgate::fuzz {

// Aborts (a libFuzzer finding) when an invariant does not hold.
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

// Piece sizes (1..64, mostly small) covering `total` bytes, derived from `seed`: the same
// input always splits the same way, so a finding reproduces.
inline std::vector<size_t> SplitSizes(uint32_t seed, size_t total) {
  std::vector<size_t> sizes;
  uint32_t state = seed * 2654435761u + 1;
  for (size_t done = 0; done < total;) {
    state = state * 1664525u + 1013904223u;
    size_t n = (state >> 24) % 8 == 0 ? 1 + (state >> 8) % 64 : 1 + (state >> 16) % 4;
    if (n > total - done) n = total - done;
    sizes.push_back(n);
    done += n;
  }
  return sizes;
}

}  // namespace idemgate::fuzz

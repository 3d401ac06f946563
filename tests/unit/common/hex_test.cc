// SPDX-License-Identifier: Apache-2.0
// common/hex: two lower-case digits per byte, high nibble first, only the bytes asked for.
#include "common/hex.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace idemgate {
namespace {

TEST(LowerHex, EveryByteValueTakesItsTwoDigits) {
  unsigned char all[256];
  for (int i = 0; i < 256; ++i) all[i] = static_cast<unsigned char>(i);
  std::string hex = LowerHex(all, sizeof(all));
  ASSERT_EQ(hex.size(), 512u);
  for (int i = 0; i < 256; ++i) {
    char want[3];
    std::snprintf(want, sizeof(want), "%02x", i);
    EXPECT_EQ(hex.substr(2 * i, 2), want) << "byte " << i;
  }
}

TEST(LowerHex, OnlyThePrefixAskedFor) {
  const unsigned char md[] = {0xDE, 0xAD, 0xBE, 0xEF, 0x01};
  EXPECT_EQ(LowerHex(md, 4), "deadbeef");
  EXPECT_EQ(LowerHex(md, 0), "");
}

}  // namespace
}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Request ids: 32 lowercase hex digits, fresh for every request and on every thread.
#include "proxy/http/request_id.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

namespace idemgate {
namespace {

TEST(RequestId, ThirtyTwoHexDigitsNeverRepeated) {
  std::set<std::string> seen;
  for (int i = 0; i < 20'000; ++i) {
    std::string id = NewRequestId();
    ASSERT_EQ(id.size(), 32u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ASSERT_TRUE(seen.insert(id).second) << "repeated: " << id;
  }
}

// Every digit of the id is drawn: over 2,000 ids each of the 32 positions shows all 16 digits
// (a position stuck on a few digits would carry fewer random bits).
TEST(RequestId, EveryPositionTakesEveryDigit) {
  std::vector<std::set<char>> digits(32);
  for (int i = 0; i < 2000; ++i) {
    const std::string id = NewRequestId();
    ASSERT_EQ(id.size(), 32u);
    for (size_t at = 0; at < id.size(); ++at) digits[at].insert(id[at]);
  }
  for (size_t at = 0; at < digits.size(); ++at) EXPECT_EQ(digits[at].size(), 16u) << at;
}

TEST(RequestId, ThreadsDrawDifferentIds) {
  std::vector<std::vector<std::string>> ids(4);
  std::vector<std::thread> threads;
  for (auto& out : ids) {
    threads.emplace_back([&out] {
      for (int i = 0; i < 1000; ++i) out.push_back(NewRequestId());
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& out : ids) all.insert(out.begin(), out.end());
  EXPECT_EQ(all.size(), 4000u);
}

}  // namespace
}  // namespace idemgate

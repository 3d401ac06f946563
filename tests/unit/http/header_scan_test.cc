// SPDX-License-Identifier: Apache-2.0
// The header section scanner against a byte-at-a-time model of the same rules, with a bare CR,
// a bare LF and a fold at every position of a line (so on every side of the scanner's 16-byte
// steps), each fed whole, split in two at every position, and byte by byte.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proxy/http/header_scan.h"

namespace idemgate {
namespace {

struct Outcome {
  bool done = false;
  bool failed = false;
  size_t at = 0;  // bytes of the section (done), or the index of the rejected byte (failed)
  bool operator==(const Outcome& o) const {
    return done == o.done && failed == o.failed && at == o.at;
  }
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << (o.done ? "done" : o.failed ? "failed" : "open") << " at " << o.at;
}

// The rules, one byte at a time: CRLF ends every line, leading empty lines are skipped, a line
// after the first may not start with SP or HT, an empty line after the first ends the section.
Outcome Model(const std::string& bytes) {
  int lines = 0;
  bool content = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    const bool at_line_start = i == 0 || bytes[i - 1] == '\n';
    if (c == '\n') return {false, true, i};
    if (c == '\r') {
      if (i + 1 == bytes.size()) return {false, false, bytes.size()};
      if (bytes[i + 1] != '\n') return {false, true, i + 1};
      if (at_line_start && lines > 0) return {true, false, i + 2};
      if (content) ++lines;
      content = false;
      ++i;
      continue;
    }
    if (at_line_start && lines > 0 && (c == ' ' || c == '\t')) return {false, true, i};
    content = true;
  }
  return {false, false, bytes.size()};
}

Outcome Feed(const std::string& bytes, const std::vector<size_t>& cuts) {
  HeaderSectionScanner s;
  size_t from = 0;
  for (size_t k = 0; k <= cuts.size(); ++k) {
    const size_t to = k < cuts.size() ? cuts[k] : bytes.size();
    const size_t used = s.Scan(bytes.data() + from, to - from);
    if (s.error() != nullptr) return {false, true, from + used};
    if (s.done()) return {true, false, from + used};
    EXPECT_EQ(used, to - from);
    from = to;
  }
  return {false, false, bytes.size()};
}

void ExpectLikeTheModel(const std::string& bytes) {
  const Outcome want = Model(bytes);
  ASSERT_EQ(Feed(bytes, {}), want) << testing::PrintToString(bytes);
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    ASSERT_EQ(Feed(bytes, {cut}), want) << testing::PrintToString(bytes) << " cut at " << cut;
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < bytes.size(); ++i) every.push_back(i);
  ASSERT_EQ(Feed(bytes, every), want) << testing::PrintToString(bytes) << " byte by byte";
}

const std::string kStart = "POST /v1/payment_intents HTTP/1.1\r\n";
const std::string kLong = "X-Long-Header-Name: " + std::string(44, 'v');  // 64 bytes

TEST(HeaderSectionScanner, WellFormedSectionsEndAtTheirBlankLine) {
  ExpectLikeTheModel(kStart + "Host: a\r\n\r\n");
  ExpectLikeTheModel(kStart + kLong + "\r\n" + kLong + "\r\n\r\nbody");
  ExpectLikeTheModel("\r\n\r\n" + kStart + "\r\n");  // empty lines before the start line
  ExpectLikeTheModel(kStart + "A: x\r\n");            // not ended yet
  EXPECT_TRUE(Model(kStart + "Host: a\r\n\r\nbody").done);
  EXPECT_EQ(Model(kStart + "Host: a\r\n\r\nbody").at, kStart.size() + 11);
}

TEST(HeaderSectionScanner, EachBadByteIsFoundAtEveryPositionOfALine) {
  for (const char bad : {'\r', '\n'}) {
    for (size_t pos = 0; pos < kLong.size(); ++pos) {
      std::string line = kLong;
      line[pos] = bad;
      const std::string bytes = kStart + line + "\r\nB: 1\r\n\r\n";
      EXPECT_TRUE(Model(bytes).failed) << pos;
      ExpectLikeTheModel(bytes);
    }
  }
}

TEST(HeaderSectionScanner, FoldsAndBareBreaksAreRejectedWhereTheyStand) {
  for (const std::string& bytes : {
           kStart + "A: x\r\n  y\r\n\r\n", kStart + "A: x\r\n\ty\r\n\r\n",
           kStart + "A: x\nB: 1\r\n\r\n", std::string("GET / HTTP/1.1\nA: x\r\n\r\n"),
           kStart + "A: x\ry\r\n\r\n", kStart + "A: x\r\r\n\r\n", kStart + "A: x\r\n\r\r\n",
           kStart + "A: x\r\n\n", std::string("\n") + kStart + "\r\n"}) {
    EXPECT_TRUE(Model(bytes).failed) << testing::PrintToString(bytes);
    ExpectLikeTheModel(bytes);
  }
}

}  // namespace
}  // namespace idemgate

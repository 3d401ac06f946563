// SPDX-License-Identifier: Apache-2.0
// AccessLog: line format, key hash, drop-when-full, reopen ordering, flush on close.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstdio>
#include <limits>
#include <regex>
#include <thread>

#include "proxy/ops/access_log.h"
#include "proxy/policy/digest.h"
#include "tests/support/temp_dir.h"

namespace idemgate {
namespace {

using test::TempDir;

size_t CountLines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(AccessLogFormat, Rfc3339) {
  EXPECT_EQ(FormatRfc3339(0, false), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(1'714'564'800'123, true), "2024-05-01T12:00:00.123Z");
  EXPECT_EQ(FormatRfc3339(1'714'564'800'123, false), "2024-05-01T12:00:00Z");
}

TEST(AccessLogFormat, KeyHashIsSha256OfScopeThenKey) {
  ScopeId scope{};
  for (size_t i = 0; i < scope.size(); ++i) scope[i] = static_cast<uint8_t>(i);
  std::string input(reinterpret_cast<const char*>(scope.data()), scope.size());
  input += "order-1";
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, EVP_sha256(), nullptr);
  char hex[17];
  for (int i = 0; i < 8; ++i) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  EXPECT_EQ(KeyHash(scope, "order-1"), hex);
  EXPECT_NE(KeyHash(scope, "order-2"), hex);
}

TEST(AccessLogFormat, LineFieldsAndEscaping) {
  AccessEntry e;
  e.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'714'564'800'007));
  e.method = "POST";
  e.path = "/a\"b\\c\x01\xc3\xa9";
  e.client_ip = "10.0.0.1";
  e.status = 409;
  e.outcome = "in_flight";
  e.error = ErrorCode::kIdempotencyKeyInUse;
  e.total_us = 1'234'567;
  e.bytes_out = 99;
  e.key_hash = "0123456789abcdef";
  EXPECT_EQ(
      FormatAccessLine(e),
      R"({"time":"2024-05-01T12:00:00.007Z","method":"POST","path":"/a\"b\\c\u0001\u00c3\u00a9",)"
      R"("client_ip":"10.0.0.1","status":409,"outcome":"in_flight",)"
      R"("error":"idempotency_key_in_use","latency_ms":1234.567,"bytes_out":99,)"
      R"("key_hash":"0123456789abcdef"})");
  e.error.reset();
  e.attempt = 2;
  e.upstream_us = 5;
  e.key_hash.clear();
  std::string line = FormatAccessLine(e);
  EXPECT_NE(line.find(R"("attempt":2,"latency_ms":1234.567,"upstream_ms":0.005,)"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("key_hash"), std::string::npos);
  EXPECT_EQ(line.find("error"), std::string::npos);
  EXPECT_EQ(line.find("wait_ms"), std::string::npos);   // did not wait
  EXPECT_EQ(line.find("protocol"), std::string::npos);  // none given: omitted
  e.protocol = "HTTP/2";  // SPEC §14: the protocol the client spoke, after the path
  line = FormatAccessLine(e);
  EXPECT_NE(line.find(R"("path":"/a\"b\\c\u0001\u00c3\u00a9","protocol":"HTTP/2","client_ip")"),
            std::string::npos)
      << line;
  e.wait_us = 1'500'000;  // SPEC §10: how long the duplicate waited
  line = FormatAccessLine(e);
  EXPECT_NE(line.find(R"("upstream_ms":0.005,"wait_ms":1500.000,)"), std::string::npos) << line;
}

// Every byte value at every place of a 16-byte path is escaped as JSON wants, whichever of the
// eight-byte words it falls in.
TEST(AccessLogFormat, EveryByteIsEscapedWhereverItFalls) {
  auto expected = [](unsigned char c) -> std::string {
    if (c == '"' || c == '\\') return std::string("\\") + static_cast<char>(c);
    if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
    return buf;
  };
  AccessEntry e;
  for (int c = 0; c < 256; ++c) {
    for (size_t at = 0; at < 16; ++at) {
      std::string path = "/abcdefghijklmno";
      path[at] = static_cast<char>(c);
      e.path = path;
      std::string want = "\"path\":\"" + std::string(path.substr(0, at)) +
                         expected(static_cast<unsigned char>(c)) + path.substr(at + 1) + "\",";
      std::string line = FormatAccessLine(e);
      ASSERT_NE(line.find(want), std::string::npos) << "byte " << c << " at " << at << ": " << line;
    }
  }
}

// Every field present at its longest (numbers at their limits, every byte escaped): the line is
// whole, appended after what the buffer held, and nothing past it is left in the buffer.
TEST(AccessLogFormat, EveryFieldAtItsLongestIsWrittenWhole) {
  const std::string escaped(300, '\x01');
  AccessEntry e;
  e.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(7'258'118'400'999));
  e.method = escaped;
  e.path = escaped;
  e.protocol = "HTTP/1.1";
  e.client_ip = escaped;
  e.request_id = escaped;
  e.status = std::numeric_limits<int>::min();
  e.client_closed = true;
  e.outcome = "relayed";
  e.error = ErrorCode::kUpstreamTimeout;
  e.error_detail = escaped;
  e.attempt = std::numeric_limits<uint32_t>::max();
  e.total_us = std::numeric_limits<int64_t>::max();
  e.upstream_us = std::numeric_limits<int64_t>::max();
  e.wait_us = std::numeric_limits<int64_t>::max();
  e.key_hash = escaped;
  std::string out = "before\n";
  AppendAccessLine(e, &out);
  ASSERT_EQ(out.rfind("before\n{\"time\":\"2200-01-01T00:00:00.999Z\",\"method\":\"\\u0001", 0), 0u)
      << out.substr(0, 80);
  EXPECT_EQ(out.back(), '}');
  EXPECT_NE(out.find(R"("status":499,"answer_status":-2147483648,"outcome":"relayed",)"),
            std::string::npos);
  EXPECT_NE(out.find(R"("attempt":4294967295,"latency_ms":9223372036854775.807,)"),
            std::string::npos);
  EXPECT_NE(out.find(R"("wait_ms":9223372036854775.807,"bytes_out":0,"key_hash":")"),
            std::string::npos);
  size_t escapes = 0;
  for (size_t at = out.find("\\u0001"); at != std::string::npos; at = out.find("\\u0001", at + 1)) {
    ++escapes;
  }
  EXPECT_EQ(escapes, 6u * 300u);  // method, path, client_ip, request_id, error_detail, key_hash
  EXPECT_EQ(out.find('\0'), std::string::npos);  // no room reserved is left over
}

TEST(AccessLogWriter, WritesEveryLineAndFlushesOnClose) {
  TempDir dir;
  std::string error;
  auto log = AccessLog::Open(dir.Path("a.log"), &error);
  ASSERT_TRUE(log) << error;
  for (int i = 0; i < 1000; ++i) log->Write("{\"n\":" + std::to_string(i) + "}");
  log->Close();
  std::string text = dir.ReadFile("a.log");
  EXPECT_EQ(CountLines(text), 1000u);
  EXPECT_EQ(text.substr(0, 8), "{\"n\":0}\n");
  EXPECT_EQ(log->dropped(), 0u);
  log->Write("late");  // after Close: counted, not written
  EXPECT_EQ(log->dropped(), 1u);
}

TEST(AccessLogWriter, DropsWhenTheBufferIsFull) {
  TempDir dir;
  std::string error;
  // A buffer that holds one line: a burst faster than the writer must drop, never block.
  auto log = AccessLog::Open(dir.Path("a.log"), &error, 16);
  ASSERT_TRUE(log) << error;
  log->Write(std::string(40, 'x'));  // larger than the whole buffer
  EXPECT_EQ(log->dropped(), 1u);
  for (int i = 0; i < 10'000; ++i) log->Write("0123456789");
  log->Close();
  size_t written = CountLines(dir.ReadFile("a.log"));
  EXPECT_EQ(written + log->dropped(), 10'001u);
  EXPECT_GT(written, 0u);
}

TEST(AccessLogWriter, ReopenSplitsAtTheCall) {
  TempDir dir;
  std::string error;
  auto log = AccessLog::Open(dir.Path("a.log"), &error);
  ASSERT_TRUE(log) << error;
  log->Write("before");
  ASSERT_EQ(std::rename(dir.Path("a.log").c_str(), dir.Path("a.log.1").c_str()), 0);
  log->Reopen();
  log->Write("after");
  log->Close();
  EXPECT_EQ(dir.ReadFile("a.log.1"), "before\n");
  EXPECT_EQ(dir.ReadFile("a.log"), "after\n");
  EXPECT_EQ(log->reopens(), 1u);
}

// Lines arriving one by one (a request rate, not a burst) are written in batches: the writer is
// not woken per line. Old behaviour: one write() per line that found the buffer empty.
TEST(AccessLogWriter, WritesInBatchesNotPerLine) {
  TempDir dir;
  std::string error;
  auto log = AccessLog::Open(dir.Path("a.log"), &error, AccessLog::kDefaultBufferBytes,
                             std::chrono::hours(1));
  ASSERT_TRUE(log) << error;
  const std::string line(99, 'x');  // 100 bytes with the newline: 1000 lines cross 64 KiB once
  for (int i = 0; i < 1000; ++i) {
    log->Write(line);
    // Arrivals spaced as at 5,000 requests/s: time for a writer woken per line to drain it.
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  log->Close();
  EXPECT_EQ(CountLines(dir.ReadFile("a.log")), 1000u);
  EXPECT_EQ(log->dropped(), 0u);
  // The first line (the writer slept with nothing queued), the 64 KiB mark, and Close; one more
  // for a spurious wake-up.
  EXPECT_LE(log->writes(), 4u);
}

// With a flush interval far away, a reopen still writes the lines queued before it to the old
// file at once (log rotation must not wait for the timer), and Close writes the rest.
TEST(AccessLogWriter, ReopenAndCloseDoNotWaitForTheTimer) {
  TempDir dir;
  std::string error;
  auto log = AccessLog::Open(dir.Path("a.log"), &error, AccessLog::kDefaultBufferBytes,
                             std::chrono::hours(1));
  ASSERT_TRUE(log) << error;
  auto wait_for_file = [&](const std::string& name, const std::string& want) {
    for (int i = 0; i < 2000 && dir.ReadFile(name) != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return dir.ReadFile(name);
  };
  log->Write("a");  // wakes the idle writer: written at once
  ASSERT_EQ(wait_for_file("a.log", "a\n"), "a\n");
  log->Write("b");  // queued behind the one-hour timer
  ASSERT_EQ(std::rename(dir.Path("a.log").c_str(), dir.Path("a.log.1").c_str()), 0);
  log->Reopen();
  EXPECT_EQ(wait_for_file("a.log.1", "a\nb\n"), "a\nb\n");
  log->Write("c");
  log->Write("d");
  log->Close();
  EXPECT_EQ(dir.ReadFile("a.log"), "c\nd\n");
}

TEST(AccessLogWriter, OpenFailsWithAReason) {
  std::string error;
  EXPECT_FALSE(AccessLog::Open("/nonexistent-dir/x/a.log", &error));
  EXPECT_NE(error.find("/nonexistent-dir/x/a.log"), std::string::npos) << error;
}

}  // namespace
}  // namespace idemgate

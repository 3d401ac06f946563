// SPDX-License-Identifier: Apache-2.0
// The value syntaxes of the configuration: durations, sizes, addresses, upstream URLs, tokens.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "conf/config.h"
#include "conf/config_values.h"

namespace idemgate {
namespace {

struct DurationCase {
  const char* text;
  std::optional<int64_t> ms;
};

TEST(ParseDurationMs, Table) {
  const DurationCase cases[] = {
      {"250ms", 250},
      {"0ms", 0},
      {"30s", 30'000},
      {"5m", 300'000},
      {"24h", 86'400'000},
      {"1d", 86'400'000},
      {"007s", 7'000},
      {"9223372036854775807ms", std::numeric_limits<int64_t>::max()},
      // Overflow.
      {"9223372036854775808ms", std::nullopt},
      {"9223372036854776s", std::nullopt},
      {"106751991168d", std::nullopt},
      {"99999999999999999999999s", std::nullopt},
      // Junk.
      {"", std::nullopt},
      {"s", std::nullopt},
      {"30", std::nullopt},
      {"5 s", std::nullopt},
      {" 5s", std::nullopt},
      {"5s ", std::nullopt},
      {"5S", std::nullopt},
      {"1.5s", std::nullopt},
      {"-5s", std::nullopt},
      {"+5s", std::nullopt},
      {"5sec", std::nullopt},
      {"5w", std::nullopt},
      {"5s5", std::nullopt},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ParseDurationMs(c.text), c.ms) << "input: \"" << c.text << "\"";
  }
  EXPECT_EQ(ParseDurationMs("106751991167d"), 106751991167LL * 86'400'000LL);
}

TEST(ParseDurationUs, Table) {
  const DurationCase cases[] = {
      {"200us", 200},         {"0s", 0},
      {"0us", 0},             {"1ms", 1'000},
      {"1s", 1'000'000},      {"9223372036854775807us", std::numeric_limits<int64_t>::max()},
      {"9223372036855s", std::nullopt},  // overflows
      {"200", std::nullopt},  {"1m", std::nullopt},
      {"1h", std::nullopt},   {"200 us", std::nullopt},
      {"1.5ms", std::nullopt}, {"-1us", std::nullopt},
      {"200µs", std::nullopt}, {"", std::nullopt},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ParseDurationUs(c.text), c.ms) << "input: \"" << c.text << "\"";
  }
}

struct SizeCase {
  const char* text;
  std::optional<uint64_t> bytes;
};

TEST(ParseSize, Table) {
  const SizeCase cases[] = {
      {"512", 512},
      {"512B", 512},
      {"0", 0},
      {"64KiB", 64 * 1024},
      {"1MiB", 1 << 20},
      {"2GiB", 2ULL << 30},
      {"3TiB", 3ULL << 40},
      {"10KB", 10'000},
      {"10kB", 10'000},
      {"1MB", 1'000'000},
      {"4GB", 4'000'000'000ULL},
      {"18446744073709551615", std::numeric_limits<uint64_t>::max()},
      // Overflow.
      {"18446744073709551616", std::nullopt},
      {"17179869184GiB", std::nullopt},
      {"18446744073709552KB", std::nullopt},
      // Junk.
      {"", std::nullopt},
      {"KiB", std::nullopt},
      {"1 KiB", std::nullopt},
      {"1kib", std::nullopt},
      {"1mb", std::nullopt},
      {"1.5MiB", std::nullopt},
      {"-1", std::nullopt},
      {"+1", std::nullopt},
      {"1MiBs", std::nullopt},
      {"0x10", std::nullopt},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ParseSize(c.text), c.bytes) << "input: \"" << c.text << "\"";
  }
}

TEST(ParseHostPort, AcceptsHostPortAndBracketedV6) {
  std::string why;
  auto a = conf::ParseHostPort("0.0.0.0:8080", false, &why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 8080);
  auto b = conf::ParseHostPort("[::1]:65535", false, &why);
  ASSERT_TRUE(b) << why;
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 65535);
  auto c = conf::ParseHostPort("localhost:0", true, &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->host, "localhost");
  EXPECT_EQ(c->port, 0);
}

TEST(ParseHostPort, RefusesMalformed) {
  const char* bad[] = {"",           "localhost", "localhost:",  ":8080",
                       "host:65536", "host:-1",   "host:8o",     "::1:8080",
                       "[::1]",      "[::1]8080", "[::1:8080",   "[]:80",
                       "[zz::1]:80", "a b:80",    "host:123456", "host:+80"};
  for (const char* text : bad) {
    std::string why;
    EXPECT_FALSE(conf::ParseHostPort(text, true, &why)) << "input: \"" << text << "\"";
    EXPECT_FALSE(why.empty()) << "input: \"" << text << "\"";
  }
  std::string why;
  EXPECT_FALSE(conf::ParseHostPort("127.0.0.1:0", false, &why));
  EXPECT_NE(why.find("port 0"), std::string::npos) << why;
}

TEST(ParseHttpUrl, DefaultPortsAndTls) {
  std::string why;
  auto http = conf::ParseHttpUrl("http://api.example.com", &why);
  ASSERT_TRUE(http) << why;
  EXPECT_FALSE(http->tls);
  EXPECT_EQ(http->addr.host, "api.example.com");
  EXPECT_EQ(http->addr.port, 80);
  auto https = conf::ParseHttpUrl("https://api.example.com/", &why);
  ASSERT_TRUE(https) << why;
  EXPECT_TRUE(https->tls);
  EXPECT_EQ(https->addr.port, 443);
  auto v6 = conf::ParseHttpUrl("HTTP://[::1]:9000/", &why);
  ASSERT_TRUE(v6) << why;
  EXPECT_EQ(v6->addr.host, "::1");
  EXPECT_EQ(v6->addr.port, 9000);
  auto v6_default = conf::ParseHttpUrl("https://[::1]", &why);
  ASSERT_TRUE(v6_default) << why;
  EXPECT_EQ(v6_default->addr.port, 443);
}

TEST(ParseHttpUrl, RefusesOtherSchemesPathsAndJunk) {
  const char* bad[] = {"ftp://host",        "127.0.0.1:9000", "http://",           "http://host/v1",
                       "http://host/?a=1",  "http://host#x",  "http://u:p@host",   "http://host:0",
                       "http://host:99999", "http://::1:80",  "https://host:80//", "http:/host"};
  for (const char* text : bad) {
    std::string why;
    EXPECT_FALSE(conf::ParseHttpUrl(text, &why)) << "input: \"" << text << "\"";
    EXPECT_FALSE(why.empty()) << "input: \"" << text << "\"";
  }
}

TEST(IsHttpToken, HeaderNamesAndMethods) {
  EXPECT_TRUE(conf::IsHttpToken("Idempotency-Key"));
  EXPECT_TRUE(conf::IsHttpToken("X-Account_Id.v2"));
  EXPECT_TRUE(conf::IsHttpToken("POST"));
  EXPECT_FALSE(conf::IsHttpToken(""));
  EXPECT_FALSE(conf::IsHttpToken("Idempotency Key"));
  EXPECT_FALSE(conf::IsHttpToken("Key:"));
  EXPECT_FALSE(conf::IsHttpToken("K\xc3\xa9y"));
  EXPECT_FALSE(conf::IsHttpToken("a\"b"));
}

TEST(FormatDurationMs, LargestExactUnit) {
  EXPECT_EQ(conf::FormatDurationMs(35'000), "35s");
  EXPECT_EQ(conf::FormatDurationMs(1'500), "1500ms");
  EXPECT_EQ(conf::FormatDurationMs(120'000), "2m");
  EXPECT_EQ(conf::FormatDurationMs(3'600'000), "1h");
  EXPECT_EQ(conf::FormatDurationMs(0), "0ms");
}

}  // namespace
}  // namespace idemgate

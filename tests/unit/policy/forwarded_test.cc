// SPDX-License-Identifier: Apache-2.0
// BelievedClient and ParseCidr: listen.trusted_proxies' address blocks, and which
// X-Forwarded-For entry is the client for a trusted peer (never for another).
#include "proxy/policy/forwarded.h"

#include <gtest/gtest.h>

#include "conf/config_values.h"

namespace idemgate {
namespace {

std::vector<Cidr> Blocks(std::initializer_list<const char*> texts) {
  std::vector<Cidr> out;
  for (const char* t : texts) {
    std::string why;
    auto c = conf::ParseCidr(t, &why);
    EXPECT_TRUE(c) << t << ": " << why;
    if (c) out.push_back(*c);
  }
  return out;
}

Request WithXff(std::initializer_list<const char*> values) {
  Request r;
  r.headers.push_back({"Host", "api.test"});
  for (const char* v : values) r.headers.push_back({"X-Forwarded-For", v});
  return r;
}

std::string Xff(const Request& r) {
  const std::string* v = FindHeader(r.headers, "X-Forwarded-For");
  return v ? *v : "(none)";
}

TEST(Cidr, ParsesAndMatches) {
  std::string why;
  EXPECT_FALSE(conf::ParseCidr("10.0.0.1/8", &why));  // host bits past the prefix
  EXPECT_FALSE(conf::ParseCidr("10.0.0.0/33", &why));
  EXPECT_FALSE(conf::ParseCidr("nonsense", &why));
  EXPECT_FALSE(conf::ParseCidr("10.0.0.0/", &why));
  auto v4 = conf::ParseCidr("10.0.0.0/8", &why);
  ASSERT_TRUE(v4);
  EXPECT_TRUE(conf::CidrContains(*v4, "10.200.1.1"));
  EXPECT_TRUE(conf::CidrContains(*v4, "::ffff:10.0.0.9"));
  EXPECT_FALSE(conf::CidrContains(*v4, "11.0.0.1"));
  EXPECT_FALSE(conf::CidrContains(*v4, "2001:db8::1"));
  auto one = conf::ParseCidr("192.0.2.7", &why);
  ASSERT_TRUE(one);
  EXPECT_TRUE(conf::CidrContains(*one, "192.0.2.7"));
  EXPECT_FALSE(conf::CidrContains(*one, "192.0.2.8"));
  auto v6 = conf::ParseCidr("2001:db8::/32", &why);
  ASSERT_TRUE(v6);
  EXPECT_TRUE(conf::CidrContains(*v6, "2001:db8:ffff::1"));
  EXPECT_FALSE(conf::CidrContains(*v6, "2001:db9::1"));
  auto all = conf::ParseCidr("0.0.0.0/0", &why);
  ASSERT_TRUE(all);
  EXPECT_TRUE(conf::CidrContains(*all, "198.51.100.1"));
  EXPECT_FALSE(conf::CidrContains(*all, "::1"));
}

TEST(BelievedClient, AnUntrustedPeerIsTheClient) {
  Request r = WithXff({"203.0.113.1"});
  EXPECT_EQ(BelievedClient("198.51.100.9", Blocks({"10.0.0.0/8"}), &r), "198.51.100.9");
  EXPECT_EQ(Xff(r), "203.0.113.1");  // untouched
  EXPECT_EQ(BelievedClient("10.0.0.1", {}, &r), "10.0.0.1");
}

TEST(BelievedClient, TheRightmostUntrustedEntryIsTheClient) {
  const auto trusted = Blocks({"10.0.0.0/8", "2001:db8::/32"});
  Request r = WithXff({"192.0.2.1, 203.0.113.5", "10.1.1.1, 2001:db8::7"});
  EXPECT_EQ(BelievedClient("10.0.0.2", trusted, &r), "203.0.113.5");
  EXPECT_EQ(Xff(r), "192.0.2.1");  // what is left of the client's entry
  EXPECT_EQ(CountHeader(r.headers, "X-Forwarded-For"), 1);
  Request alone = WithXff({"203.0.113.5"});
  EXPECT_EQ(BelievedClient("10.0.0.2", trusted, &alone), "203.0.113.5");
  EXPECT_EQ(CountHeader(alone.headers, "X-Forwarded-For"), 0);
  EXPECT_EQ(FindHeader(alone.headers, "Host") != nullptr, true);
}

TEST(BelievedClient, NoUsableEntryKeepsThePeer) {
  const auto trusted = Blocks({"10.0.0.0/8"});
  Request none = WithXff({});
  EXPECT_EQ(BelievedClient("10.0.0.2", trusted, &none), "10.0.0.2");
  Request all_trusted = WithXff({"10.9.9.9"});
  EXPECT_EQ(BelievedClient("10.0.0.2", trusted, &all_trusted), "10.0.0.2");
  Request junk = WithXff({"unknown"});
  EXPECT_EQ(BelievedClient("10.0.0.2", trusted, &junk), "10.0.0.2");
  EXPECT_EQ(Xff(junk), "unknown");
}

}  // namespace
}  // namespace idemgate

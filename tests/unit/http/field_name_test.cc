// SPDX-License-Identifier: Apache-2.0
// A field name is a token (RFC 9110 5.6.2): every one of the 256 byte values, first, inside and
// last in a name, through both parsers. A name with any byte outside tchar is refused as
// malformed; a name of tchars is kept as sent. Whatever llhttp's own name table lets through
// (its loose build takes a space) must still be refused by the gateway.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "proxy/http/http_parser.h"

namespace idemgate {
namespace {

// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" /
// "~" / DIGIT / ALPHA
bool IsTchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return c != '\0' && std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Where the byte goes in the name: "<b>Ab", "A<b>b", "Ab<b>".
std::string NameWith(char b, int at) {
  std::string name = "Ab";
  name.insert(static_cast<size_t>(at), 1, b);
  return name;
}

struct Outcome {
  ParseError error = ParseError::kNone;
  bool complete = false;
  std::string first_name;
};

Outcome ParseRequest(const std::string& name) {
  RequestParser parser(1 << 10, 1 << 10);
  const std::string raw = "GET / HTTP/1.1\r\n" + name + ": v\r\nHost: h\r\n\r\n";
  parser.Feed(raw.data(), raw.size());
  Outcome out{parser.error(), parser.message_complete(), ""};
  if (out.complete) out.first_name = parser.TakeRequest().headers.front().name;
  return out;
}

Outcome ParseResponse(const std::string& name) {
  ResponseParser parser(1 << 10);
  parser.Begin(false);
  const std::string raw = "HTTP/1.1 200 OK\r\n" + name + ": v\r\nContent-Length: 0\r\n\r\n";
  parser.Feed(raw.data(), raw.size());
  Outcome out{parser.error(), parser.message_complete(), ""};
  if (out.complete) out.first_name = parser.TakeResponse().headers.front().name;
  return out;
}

TEST(FieldName, EveryByteOutsideTcharIsRefusedWhereverItStands) {
  for (int c = 0; c < 256; ++c) {
    const char b = static_cast<char>(c);
    if (b == ':') continue;  // it ends the name: "A:b: v" is the field "A" with the value "b: v"
    for (int at = 0; at <= 2; ++at) {
      const std::string name = NameWith(b, at);
      for (const Outcome& out : {ParseRequest(name), ParseResponse(name)}) {
        if (IsTchar(b)) {
          EXPECT_TRUE(out.complete) << "byte " << c << " at " << at;
          EXPECT_EQ(out.first_name, name) << "byte " << c << " at " << at;
        } else {
          EXPECT_EQ(out.error, ParseError::kMalformed) << "byte " << c << " at " << at;
          EXPECT_FALSE(out.complete) << "byte " << c << " at " << at;
        }
      }
    }
  }
}

TEST(FieldName, AnEmptyNameIsRefused) {
  EXPECT_EQ(ParseRequest("").error, ParseError::kMalformed);
  EXPECT_EQ(ParseResponse("").error, ParseError::kMalformed);
}

}  // namespace
}  // namespace idemgate

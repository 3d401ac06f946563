// SPDX-License-Identifier: Apache-2.0
// The header section scanner and the field checks (see header_scan.h).
#include "proxy/http/header_scan.h"

#include <array>
#include <cstring>

namespace idemgate {

// A message's Transfer-Encoding must be exactly "chunked": "gzip, chunked" would hand on a body
// still coded once the (hop-by-hop) header is dropped, and "gzip" alone is not even framed.
bool TransferEncodingIsPlainChunked(const Headers& headers) {
  int tokens = 0;
  bool chunked = false;
  for (const Header& h : headers) {
    if (!HeaderNameEquals(h.name, "Transfer-Encoding")) continue;
    std::string_view rest = h.value;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view token = TrimOws(rest.substr(0, comma));
      if (!token.empty()) {
        ++tokens;
        chunked = HeaderNameEquals(token, "chunked");
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return tokens == 1 && chunked;
}

namespace {
// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" /
// "~" / DIGIT / ALPHA (RFC 9110 5.6.2), as a table: every header name of every message is checked.
constexpr std::array<bool, 256> kTchar = [] {
  std::array<bool, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();
}  // namespace

bool IsTchar(char c) { return kTchar[static_cast<unsigned char>(c)]; }

bool IsToken(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!IsTchar(c)) return false;
  }
  return true;
}

size_t HeaderSectionScanner::Scan(const char* data, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    if (state_ == kInLine) {
      // Inside a line only CR and LF matter: skip to the first of them at once.
      const char* from = data + i;
      const char* end = static_cast<const char*>(memchr(from, '\r', len - i));
      if (end == nullptr) end = data + len;
      const char* lf = static_cast<const char*>(memchr(from, '\n', end - from));
      i = (lf != nullptr ? lf : end) - data;
      if (i == len) break;
    }
    if (!Step(data[i])) return i;
    if (state_ == kDone) return i + 1;
  }
  return len;
}

bool HeaderSectionScanner::Step(char c) {
  switch (state_) {
    case kLineStart:
      if (c == '\r') {
        state_ = lines_ == 0 ? kExpectLf : kExpectFinalLf;  // empty lines before the start line
        return true;
      }
      if (c == '\n') return Fail("a line ends in a bare LF instead of CRLF");
      if (lines_ > 0 && (c == ' ' || c == '\t')) {
        return Fail("a header line is folded (obs-fold), which is not allowed");
      }
      state_ = kInLine;
      line_has_content_ = true;
      return true;
    case kInLine:
      if (c == '\r') state_ = kExpectLf;
      if (c == '\n') return Fail("a line ends in a bare LF instead of CRLF");
      return true;
    case kExpectLf:
    case kExpectFinalLf:
      if (c != '\n') return Fail("a bare CR appears without LF");
      if (state_ == kExpectFinalLf) {
        state_ = kDone;
        return true;
      }
      if (line_has_content_) ++lines_;
      line_has_content_ = false;
      state_ = kLineStart;
      return true;
    case kDone:
      return true;
  }
  return true;
}

}  // namespace idemgate

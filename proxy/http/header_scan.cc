// SPDX-License-Identifier: Apache-2.0
// The header section scanner and the Transfer-Encoding check (see header_scan.h).
#include "proxy/http/header_scan.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// The first CR or LF in [from, end), or end: sixteen bytes per step where SSE2 is there (every
// x86-64), one where not. Inside a line only these two bytes matter.
const char* FindLineBreak(const char* from, const char* end) {
#if defined(__SSE2__)
  const __m128i cr = _mm_set1_epi8('\r');
  const __m128i lf = _mm_set1_epi8('\n');
  for (; end - from >= 16; from += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
    const int mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, lf)));
    if (mask != 0) return from + __builtin_ctz(static_cast<unsigned>(mask));
  }
#endif
  for (; from < end; ++from) {
    if (*from == '\r' || *from == '\n') return from;
  }
  return end;
}

// A byte that may start a field line: not the blank line's CR, a bare LF or a fold.
bool StartsField(char c) { return c != '\r' && c != '\n' && c != ' ' && c != '\t'; }

}  // namespace

size_t HeaderSectionScanner::Scan(const char* data, size_t len) {
  const char* const end = data + len;
  const char* p = data;
  while (p < end) {
    if (state_ == kInLine) {
      p = FindLineBreak(p, end);
      // The usual line end whole: CRLF and the next field's first byte, as Step would take
      // them one by one (a line in kInLine has content, so it counts).
      while (end - p >= 3 && p[0] == '\r' && p[1] == '\n' && StartsField(p[2])) {
        ++lines_;
        p = FindLineBreak(p + 3, end);
      }
      if (p == end) break;
    }
    if (!Step(*p)) return static_cast<size_t>(p - data);
    ++p;
    if (state_ == kDone) return static_cast<size_t>(p - data);
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

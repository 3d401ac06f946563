// SPDX-License-Identifier: Apache-2.0
// The header section's checks before llhttp sees it, on raw bytes: what llhttp's loose build
// would accept but a strict parser in front or behind would frame differently (bare LF, bare CR,
// obs-fold), and plain chunked Transfer-Encoding.
#pragma once

#include <cstddef>
#include <string_view>

#include "proxy/http/http_message.h"

namespace idemgate {

// A message's Transfer-Encoding must be exactly "chunked": "gzip, chunked" would hand on a body
// still coded once the (hop-by-hop) header is dropped, and "gzip" alone is not even framed.
bool TransferEncodingIsPlainChunked(const Headers& headers);

// Checks the raw bytes of a header section (start line + fields + blank line) for what llhttp
// in its loose build accepts: bare LF, bare CR and obs-fold. It also finds where the section
// ends, so the parser can hand llhttp the header section and the body separately.
class HeaderSectionScanner {
 public:
  void Reset() { *this = HeaderSectionScanner(); }
  bool done() const { return state_ == kDone; }
  const char* error() const { return error_; }

  // Scans up to the end of the header section; returns the bytes that belong to it.
  size_t Scan(const char* data, size_t len);

 private:
  enum State { kLineStart, kInLine, kExpectLf, kExpectFinalLf, kDone };

  bool Fail(const char* why) {
    error_ = why;
    return false;
  }
  bool Step(char c);

  State state_ = kLineStart;
  int lines_ = 0;                  // complete non-empty lines so far
  bool line_has_content_ = false;  // the current line is not one of the leading empty lines
  const char* error_ = nullptr;
};

}  // namespace idemgate

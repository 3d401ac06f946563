// SPDX-License-Identifier: Apache-2.0
// Small HTTP/1.1 text helpers shared by the test-support pieces (independent of the gateway).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idemgate::test {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// The standard reason phrase for `status` ("Unknown" for codes it does not know).
const char* ReasonPhrase(int status);
// First value of `name` in `headers` (case-insensitive), or nullopt.
std::optional<std::string> FindHeader(const HeaderList& headers, std::string_view name);
int CountHeader(const HeaderList& headers, std::string_view name);
// Parses "Name: value" lines (CRLF-separated, no final blank line) into `out`; false on a line
// without a colon.
bool ParseHeaderLines(std::string_view block, HeaderList* out);
// A decimal Content-Length value; nullopt when empty, not all digits, or absurdly long.
std::optional<size_t> ParseContentLength(std::string_view value);

}  // namespace idemgate::test

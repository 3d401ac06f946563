// SPDX-License-Identifier: Apache-2.0
// A request's path as an upstream might read it (see request_path.h).
#include "proxy/policy/request_path.h"

#include <algorithm>

namespace idemgate {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsUnreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// The path of a request-target: an absolute-form target ("http://host/p?q") loses its scheme
// and authority, every form loses its query.
std::string_view TargetPath(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    size_t sep = target.find("://");
    if (sep != std::string_view::npos && sep > 0 &&
        target.find_first_of("/?#") > sep) {  // a scheme, not a path that contains "://"
      target.remove_prefix(sep + 3);
      size_t path = target.find_first_of("/?#");
      target.remove_prefix(path == std::string_view::npos ? target.size() : path);
    }
  }
  return target.substr(0, target.find('?'));
}

// Percent-decodes `path`: every escape when `decode_all`, else only unreserved characters
// (RFC 3986 6.2.2.2); the escapes kept stay as they are (the case fold comes later).
std::string PercentDecode(std::string_view path, bool decode_all) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    int hi = (path[i] == '%' && i + 2 < path.size()) ? HexValue(path[i + 1]) : -1;
    int lo = hi >= 0 ? HexValue(path[i + 2]) : -1;
    if (lo < 0) {
      out.push_back(path[i]);
      continue;
    }
    char c = static_cast<char>(hi * 16 + lo);
    if (decode_all || IsUnreserved(c)) {
      out.push_back(c);
    } else {
      out.append(path.substr(i, 3));
    }
    i += 2;
  }
  return out;
}

// Resolves "." and ".." segments and drops empty ones ("//"); keeps a trailing slash.
std::string ResolveSegments(std::string_view path) {
  std::vector<std::string_view> kept;
  bool trailing_slash = false;
  for (size_t start = 0;;) {
    size_t slash = path.find('/', start);
    size_t end = slash == std::string_view::npos ? path.size() : slash;
    std::string_view segment = path.substr(start, end - start);
    if (segment == "..") {
      if (!kept.empty()) kept.pop_back();
    } else if (!segment.empty() && segment != ".") {
      kept.push_back(segment);
    }
    if (slash == std::string_view::npos) {
      trailing_slash = segment.empty() || segment == "." || segment == "..";
      break;
    }
    start = slash + 1;
  }
  std::string out = "/";
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i > 0) out.push_back('/');
    out.append(kept[i]);
  }
  if (trailing_slash && !kept.empty()) out.push_back('/');
  return out;
}

// `path` with every ';' parameter cut from its segments ("/a;x=1/b;y" -> "/a/b"), as Tomcat and
// Spring read a path ("/v1/pay/..;/z" is "/v1/z" there).
std::string StripSegmentParameters(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  bool in_parameter = false;
  for (char c : path) {
    if (c == '/') in_parameter = false;
    if (c == ';') in_parameter = true;
    if (!in_parameter) out.push_back(c);
  }
  return out;
}

// A path that every reading below reads the same: no escape, no backslash, no parameter, no
// dot segment or empty segment to resolve.
bool HasOneReading(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path.find_first_of("%\\;") != std::string_view::npos) return false;
  return path.find("//") == std::string_view::npos && path.find("/.") == std::string_view::npos;
}

}  // namespace

std::string LowerAscii(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string NormalizeRequestPath(std::string_view target, bool decode_all) {
  std::string path = ResolveSegments(PercentDecode(TargetPath(target), decode_all));
  return LowerAscii(path);
}

std::vector<std::string> RequestPathReadings(std::string_view target) {
  const std::string_view raw = TargetPath(target);
  if (HasOneReading(raw)) return {LowerAscii(raw)};
  const std::string all = PercentDecode(raw, /*decode_all=*/true);
  const std::string twice = PercentDecode(all, /*decode_all=*/true);
  std::string separators = twice;
  std::replace(separators.begin(), separators.end(), '\\', '/');
  // As sent: nothing resolved. RFC 3986: its normalization. Decoded twice: "%252e%252e" is ".."
  // to a backend that decodes again. The last reads '\' as '/' and cuts ';' parameters, as some
  // servers do.
  std::vector<std::string> readings = {
      LowerAscii(raw),                                                  // as sent
      LowerAscii(ResolveSegments(PercentDecode(raw, false))),           // RFC 3986
      LowerAscii(ResolveSegments(all)),                                 // every escape decoded
      LowerAscii(ResolveSegments(twice)),                               // decoded twice
      LowerAscii(ResolveSegments(StripSegmentParameters(separators))),  // '\' and ';' too
  };
  std::sort(readings.begin(), readings.end());
  readings.erase(std::unique(readings.begin(), readings.end()), readings.end());
  return readings;
}

}  // namespace idemgate

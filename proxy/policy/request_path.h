// SPDX-License-Identifier: Apache-2.0
// A request's path as an upstream might read it: what idempotency.require_key prefixes and
// routes' paths are matched against (guard.cc, routes.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace idemgate {

// `text` with its ASCII letters lower-cased; other bytes as they are.
std::string LowerAscii(std::string_view text);

// The path `idempotency.require_key` prefixes are matched against (a prefix goes through it
// too): the absolute form reduced to its path, the query dropped, percent-escapes of unreserved
// characters decoded (every escape when `decode_all`), "." and ".." segments resolved, repeated
// slashes merged, ASCII lower-cased. A request matches when this path under either decoding, or
// its path as sent (lower-cased, nothing resolved), starts with a prefix: requiring a key too
// often is safe, too rarely is not. The target forwarded and fingerprinted stays as sent.
std::string NormalizeRequestPath(std::string_view target, bool decode_all);

// Every way an upstream might read the request's path, each as NormalizeRequestPath gives it
// (lower-cased, for prefix matching), without duplicates: as sent (nothing decoded or resolved);
// RFC 3986's normalization (unreserved escapes decoded, dot segments resolved); every escape
// decoded; every escape decoded twice (a double-encoded "%252e%252e%252f" is "../" to a backend
// that decodes again); and that last one with '\' read as '/' (IIS, some Windows and Node
// stacks) and ';' parameters cut from each segment (Tomcat, Spring: "..;" is ".."). A path with
// nothing to decode or resolve has one reading. require_key and route selection look at all of
// them, so a spelling cannot take a request out from under a prefix.
std::vector<std::string> RequestPathReadings(std::string_view target);

}  // namespace idemgate

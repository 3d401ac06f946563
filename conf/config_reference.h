// The configuration reference, generated from the key table (config_keys.cc) so it cannot drift
// from the code: every key with its type, default, bounds, whether SIGHUP applies it, and its doc
// line. Rendered as Markdown (docs/configuration.md, checked by a test) and as the man page
// idemgate.toml(5) (installed by the package); tools/config_reference_main.cc prints them.
#pragma once

#include <string>
#include <string_view>

#include "conf/config_keys.h"

namespace idemgate::conf {

// The key's value type in words, e.g. "duration" or "array of strings".
std::string KindName(Kind kind);
// The key's bounds in words, e.g. "1 to 256", "1ms to 10m", "0s (off) or up to 1h"; "" = none
// beyond its type.
std::string KeyBounds(const KeySpec& key);

// docs/configuration.md.
std::string ConfigReferenceMarkdown();
// idemgate.toml(5) in man(7) roff; `version` and `date` (YYYY-MM-DD) go in its title line.
std::string ConfigReferenceMan(std::string_view version, std::string_view date);

}  // namespace idemgate::conf

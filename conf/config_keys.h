// SPDX-License-Identifier: Apache-2.0
// The configuration's keys, each declared once: its section and name, its type and bounds, its
// doc line (the comment above it in packaging/idemgate.toml), and whether SIGHUP applies it (the
// reload plan, proxy/reload.cc, is derived from this table). Its default is the initializer of
// its Config field (conf/config.h). To add a key: a Config field, one row in config_keys.cc (a
// check of its own, if it needs one, in config_checks.cc), and the same doc line and default in
// packaging/idemgate.toml (a test compares them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "conf/config.h"
#include "conf/config_reader.h"

namespace idemgate::conf {

enum class Kind {
  kString,      // any string (a key-specific check may refuse some)
  kHeaderName,  // a non-empty RFC 9110 token
  kPath,        // a file path, relative to the config file, that must be readable and not empty
  kBool,
  kInt,            // an integer in [min, max]
  kDuration,       // "30s": at most max (milliseconds)
  kDurationOrOff,  // as kDuration, or "0s": off
  kDurationUs,     // "200us" (us, ms, s), or "0s": off; at most max (microseconds)
  kSize,           // "1MiB" or bytes: at most max
  kStrings,        // an array of strings
  kStringTable,    // a table of strings ({ id = "value" }), in name order
};

enum class Reload {
  kLive,     // SIGHUP applies it to exchanges that start after the reload
  kRestart,  // SIGHUP keeps the running value and logs that it waits for a restart
};

// A pointer to the Config field that holds a key's value (or a value derived from a key).
using FieldRef =
    std::variant<std::string*, bool*, int*, int64_t*, uint64_t*, std::vector<std::string>*,
                 HostPort*, std::vector<HostPort>*, std::map<std::string, std::string>*>;
using FieldFn = FieldRef (*)(Config&);

struct KeySpec {
  std::string_view section;
  std::string_view name;
  Kind kind;
  Reload reload;
  FieldFn field;
  int64_t min = 0;  // kInt
  int64_t max = 0;  // kInt, kDuration (ms), kDurationUs (us), kSize (bytes)
  // Key-specific validation or derivation, run after the value is read (present: in the file).
  void (*check)(const Context& ctx, const SectionReader& r, bool present, Config* config) = nullptr;
  std::string_view doc;

  std::string Qualified() const { return std::string(section) + "." + std::string(name); }
};

// A field that no key names directly but that is derived from restart-only keys (a parsed
// address, the secret file's bytes). Reload keeps the running value; `label` names a change in
// the log ("" = silent: it changes only with its key, which is named).
struct DerivedField {
  std::string_view label;
  FieldFn field;
};

// Every key, in the order of the sections and of packaging/idemgate.toml.
std::span<const KeySpec> ConfigKeys();
std::span<const DerivedField> DerivedFields();
// The sections, in order.
std::vector<std::string_view> ConfigSections();

// Reads one key from its section into `config` and runs its check.
void ReadKey(const KeySpec& key, const Context& ctx, const SectionReader& r, Config* config);
// Whether a field holds the same value in both configs.
bool SameValue(FieldFn field, const Config& a, const Config& b);
// Sets `to`'s field to `from`'s value.
void CopyValue(FieldFn field, const Config& from, Config* to);
// A key's default (its value in Config{}) as TOML, as written in packaging/idemgate.toml.
std::string FormatDefault(const KeySpec& key);

}  // namespace idemgate::conf

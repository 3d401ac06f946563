// SPDX-License-Identifier: Apache-2.0
// Typed, located access to one TOML section; every failure is a "FILE:LINE: key 'a.b': ..." error.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace idemgate::conf {

// Thrown inside the parser only; ParseConfig turns it into ConfigResult::error.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "FILE:LINE: key 'KEY': WHAT" ("FILE: key ..." when line is 0).
std::string FormatError(const std::string& file, uint32_t line, std::string_view key,
                        std::string_view what);

// The name of a TOML value's type, as used in messages: "integer", "string", ...
std::string_view TypeName(const toml::node& node);

// One section ([listen], [upstream], ...). `table` may be null: the section is absent and every
// getter leaves its output (the default) untouched. Getters return whether the key was present.
class SectionReader {
 public:
  SectionReader(const toml::table* table, std::string section, std::string file,
                std::vector<std::string_view> known_keys);

  // Throws ConfigError naming the first (by line) key not in known_keys.
  void RejectUnknownKeys() const;

  bool String(std::string_view key, std::string* out) const;
  bool Bool(std::string_view key, bool* out) const;
  bool Int(std::string_view key, int64_t* out) const;
  bool StringArray(std::string_view key, std::vector<std::string>* out) const;
  bool IntArray(std::string_view key, std::vector<int64_t>* out) const;
  // A sub-table ([routes.limits], or an inline table): null when absent; refused when not a table.
  const toml::table* Table(std::string_view key) const;
  // A string like "30s"; must be > 0 (>= 0 when `allow_zero`) and at most `max_ms`.
  bool Duration(std::string_view key, int64_t* out_ms,
                int64_t max_ms = std::numeric_limits<int64_t>::max(),
                bool allow_zero = false) const;
  // A string like "200us" (units us, ms, s), in microseconds; "0s" (off) up to `max_us`.
  bool DurationUs(std::string_view key, int64_t* out_us, int64_t max_us) const;
  // A string like "1MiB" or an integer number of bytes; must be > 0 and at most `max`.
  bool Size(std::string_view key, uint64_t* out,
            uint64_t max = std::numeric_limits<uint64_t>::max()) const;

  bool Has(std::string_view key) const { return Node(key) != nullptr; }
  // The line of the key's value, else of the section's table, else 0.
  uint32_t Line(std::string_view key) const;
  // "section.key".
  std::string Qualified(std::string_view key) const;
  [[noreturn]] void Fail(std::string_view key, std::string_view what) const;

 private:
  struct DurationSyntax;
  bool ReadDuration(std::string_view key, int64_t* out, int64_t max, bool allow_zero,
                    const DurationSyntax& syntax) const;
  const toml::node* Node(std::string_view key) const;
  // StringArray and IntArray: every element a T, else refused as not `expected`.
  template <typename T>
  bool Array(std::string_view key, std::vector<T>* out, std::string_view expected) const;
  [[noreturn]] void WrongType(std::string_view key, std::string_view expected,
                              const toml::node& got) const;

  const toml::table* table_;
  std::string section_;
  std::string file_;
  std::vector<std::string_view> known_keys_;
};

// Reads a whole file; on failure returns false with *why set to the reason.
bool ReadWholeFile(const std::string& path, std::string* out, std::string* why);

// What every key's parser needs besides its own section.
struct Context {
  std::string file;           // as given, for messages
  std::filesystem::path dir;  // the config file's directory, for relative paths
  const toml::table* root = nullptr;

  // The section's reader; throws for a key not in `keys`.
  SectionReader Section(std::string_view name, std::vector<std::string_view> keys) const;
  // A path relative to the config file's directory.
  std::string Resolve(const std::string& path) const;
};

}  // namespace idemgate::conf

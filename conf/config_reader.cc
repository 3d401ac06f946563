// SPDX-License-Identifier: Apache-2.0
// Typed, located access to one TOML section; every failure is a "FILE:LINE: key 'a.b': ..." error.
#include "conf/config_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "conf/config.h"
#include "conf/config_values.h"

namespace idemgate::conf {

std::string FormatError(const std::string& file, uint32_t line, std::string_view key,
                        std::string_view what) {
  std::string out = file;
  if (line > 0) {
    out += ':';
    out += std::to_string(line);
  }
  out += ": key '";
  out += key;
  out += "': ";
  out += what;
  return out;
}

std::string_view TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

bool ReadWholeFile(const std::string& path, std::string* out, std::string* why) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    *why = std::strerror(errno);
    return false;
  }
  std::string data;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) data.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    *why = std::strerror(error);
    return false;
  }
  *out = std::move(data);
  return true;
}

SectionReader Context::Section(std::string_view name, std::vector<std::string_view> keys) const {
  const toml::node* node = root->at_path(name).node();  // "store.postgres": a nested table
  SectionReader reader(node == nullptr ? nullptr : node->as_table(), std::string(name), file,
                       std::move(keys));
  reader.RejectUnknownKeys();
  return reader;
}

std::string Context::Resolve(const std::string& path) const {
  if (path.empty() || std::filesystem::path(path).is_absolute() || dir.empty()) return path;
  return (dir / path).lexically_normal().string();
}

SectionReader::SectionReader(const toml::table* table, std::string section, std::string file,
                             std::vector<std::string_view> known_keys)
    : table_(table),
      section_(std::move(section)),
      file_(std::move(file)),
      known_keys_(std::move(known_keys)) {}

void SectionReader::RejectUnknownKeys() const {
  if (table_ == nullptr) return;
  const toml::key* first = nullptr;
  for (const auto& [key, node] : *table_) {
    if (std::find(known_keys_.begin(), known_keys_.end(), key.str()) != known_keys_.end()) continue;
    if (first == nullptr || key.source().begin.line < first->source().begin.line) first = &key;
  }
  if (first == nullptr) return;
  std::string known;
  for (std::string_view k : known_keys_) known += (known.empty() ? "" : ", ") + std::string(k);
  throw ConfigError(FormatError(file_, first->source().begin.line, Qualified(first->str()),
                                "unknown key (known keys in [" + section_ + "]: " + known + ")"));
}

const toml::node* SectionReader::Node(std::string_view key) const {
  return table_ == nullptr ? nullptr : table_->get(key);
}

uint32_t SectionReader::Line(std::string_view key) const {
  if (const toml::node* node = Node(key)) return node->source().begin.line;
  return table_ == nullptr ? 0 : table_->source().begin.line;
}

std::string SectionReader::Qualified(std::string_view key) const {
  return section_ + "." + std::string(key);
}

void SectionReader::Fail(std::string_view key, std::string_view what) const {
  throw ConfigError(FormatError(file_, Line(key), Qualified(key), what));
}

void SectionReader::WrongType(std::string_view key, std::string_view expected,
                              const toml::node& got) const {
  Fail(key, "expected " + std::string(expected) + ", got " + std::string(TypeName(got)));
}

bool SectionReader::String(std::string_view key, std::string* out) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return false;
  const auto* value = node->as_string();
  if (value == nullptr) WrongType(key, "a string", *node);
  if (value->get().find('\0') != std::string::npos) Fail(key, "must not contain a NUL character");
  *out = value->get();
  return true;
}

bool SectionReader::Bool(std::string_view key, bool* out) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return false;
  const auto* value = node->as_boolean();
  if (value == nullptr) WrongType(key, "true or false", *node);
  *out = value->get();
  return true;
}

bool SectionReader::Int(std::string_view key, int64_t* out) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return false;
  const auto* value = node->as_integer();
  if (value == nullptr) WrongType(key, "an integer", *node);
  *out = value->get();
  return true;
}

template <typename T>
bool SectionReader::Array(std::string_view key, std::vector<T>* out,
                          std::string_view expected) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return false;
  const auto* array = node->as_array();
  if (array == nullptr) WrongType(key, expected, *node);
  std::vector<T> values;
  for (const toml::node& element : *array) {
    const auto* value = element.as<T>();
    if (value == nullptr) {
      Fail(key, "expected " + std::string(expected) + ", got an element of type " +
                    std::string(TypeName(element)));
    }
    values.push_back(value->get());
  }
  *out = std::move(values);
  return true;
}

bool SectionReader::StringArray(std::string_view key, std::vector<std::string>* out) const {
  return Array(key, out, "an array of strings");
}

bool SectionReader::IntArray(std::string_view key, std::vector<int64_t>* out) const {
  return Array(key, out, "an array of integers");
}

const toml::table* SectionReader::Table(std::string_view key) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return nullptr;
  if (!node->is_table()) WrongType(key, "a table", *node);
  return node->as_table();
}

namespace {

// "<digits><unit>" whose number is too large to represent: a well-formed value, only too big.
bool IsOverflowingAmount(std::string_view text, std::initializer_list<std::string_view> units) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return false;
  const std::string_view unit = text.substr(digits);
  return std::find(units.begin(), units.end(), unit) != units.end();
}

}  // namespace

// How a duration key is written and read: milliseconds ("30s") or microseconds ("200us").
struct SectionReader::DurationSyntax {
  std::optional<int64_t> (*parse)(std::string_view);
  std::string (*format)(int64_t);
  std::initializer_list<std::string_view> units;
  std::string_view unit_list;  // for the error: "ms, s, m, h, d"
  std::string_view example;    // "5s"
  std::string_view expected;   // what a value of another type should have been
};

bool SectionReader::Duration(std::string_view key, int64_t* out_ms, int64_t max_ms,
                             bool allow_zero) const {
  static const DurationSyntax kMs{ParseDurationMs, FormatDurationMs, {"ms", "s", "m", "h", "d"},
                                  "ms, s, m, h, d", "5s", "a duration string like \"5s\""};
  return ReadDuration(key, out_ms, max_ms, allow_zero, kMs);
}

bool SectionReader::DurationUs(std::string_view key, int64_t* out_us, int64_t max_us) const {
  static const DurationSyntax kUs{ParseDurationUs, FormatDurationUs, {"us", "ms", "s"},
                                  "us, ms, s", "200us", "a string like \"200us\""};
  return ReadDuration(key, out_us, max_us, /*allow_zero=*/true, kUs);
}

bool SectionReader::ReadDuration(std::string_view key, int64_t* out, int64_t max, bool allow_zero,
                                 const DurationSyntax& syntax) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return false;
  const auto* value = node->as_string();
  if (value == nullptr) WrongType(key, syntax.expected, *node);
  const std::string& text = value->get();
  const std::optional<int64_t> amount = syntax.parse(text);
  if (!amount && IsOverflowingAmount(text, syntax.units)) {
    Fail(key, "bad duration \"" + text + "\": too large (at most " + syntax.format(max) + ")");
  }
  if (!amount) {
    Fail(key, "bad duration \"" + text + "\": expected a whole number and a unit (" +
                  std::string(syntax.unit_list) + "), like \"" + std::string(syntax.example) +
                  "\"");
  }
  if (*amount < 0 || (*amount == 0 && !allow_zero)) {
    Fail(key, "must be longer than 0, got \"" + text + "\"");
  }
  if (*amount > max) {
    Fail(key, "must be at most " + syntax.format(max) + ", got \"" + text + "\"");
  }
  *out = *amount;
  return true;
}

bool SectionReader::Size(std::string_view key, uint64_t* out, uint64_t max) const {
  const toml::node* node = Node(key);
  if (node == nullptr) return false;
  std::optional<uint64_t> bytes;
  std::string given;
  if (const auto* integer = node->as_integer()) {
    if (integer->get() <= 0) Fail(key, "must be at least 1 byte, got " + std::to_string(**integer));
    bytes = static_cast<uint64_t>(integer->get());
    given = std::to_string(*bytes);
  } else if (const auto* text = node->as_string()) {
    given = "\"" + text->get() + "\"";
    bytes = ParseSize(text->get());
    if (!bytes) {
      Fail(key, "bad size " + given +
                    ": expected bytes or a whole number and a unit (B, KiB, MiB, GiB, TiB, KB, "
                    "MB, GB, TB), like \"1MiB\"");
    }
    if (*bytes == 0) Fail(key, "must be at least 1 byte, got " + given);
  } else {
    WrongType(key, "a size like \"1MiB\" or an integer number of bytes", *node);
  }
  if (*bytes > max) Fail(key, "must be at most " + FormatSize(max) + ", got " + given);
  *out = *bytes;
  return true;
}

}  // namespace idemgate::conf

// SPDX-License-Identifier: Apache-2.0
// TOML text -> immutable Config: every section and key checked, errors located as FILE:LINE.
// The keys themselves (types, bounds, checks) are the table in config_keys.cc.
#include "conf/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <utility>

#include "conf/config_certificates.h"
#include "conf/config_keys.h"
#include "conf/config_reader.h"
#include "conf/config_routes.h"
#include "conf/config_values.h"

namespace idemgate {
namespace {

using conf::ConfigError;
using conf::Context;
using conf::SaturatingAdd;
using conf::SectionReader;

// SPEC C4: lease > connect_timeout + response_timeout, and ttl > lease. The line is the key's,
// else its section's, else that of the upstream timeout that made the default lease too short.
void CheckLeaseAndTtl(const Context& ctx, const SectionReader& idem, const SectionReader& upstream,
                      const Config& config) {
  using conf::FormatDurationMs;
  const auto& up = config.upstream;
  const auto& id = config.idempotency;
  const int64_t upstream_ms = SaturatingAdd(up.connect_timeout_ms, up.response_timeout_ms);
  if (id.lease_ms <= upstream_ms) {
    uint32_t line = idem.Line("lease");
    if (line == 0)
      line =
          upstream.Line(upstream.Has("response_timeout") ? "response_timeout" : "connect_timeout");
    throw ConfigError(conf::FormatError(
        ctx.file, line, "idempotency.lease",
        "(" + FormatDurationMs(id.lease_ms) +
            ") must be longer than upstream.connect_timeout + upstream.response_timeout (" +
            FormatDurationMs(up.connect_timeout_ms) + " + " +
            FormatDurationMs(up.response_timeout_ms) + " = " + FormatDurationMs(upstream_ms) +
            "), or a slow attempt could be taken over while it still runs"));
  }
  if (id.ttl_ms <= id.lease_ms) {
    idem.Fail("ttl", "(" + FormatDurationMs(id.ttl_ms) +
                         ") must be longer than idempotency.lease (" +
                         FormatDurationMs(id.lease_ms) + ")");
  }
}

// Waiting (SPEC §10) within the lease: wait <= max_wait <= lease. An unset max_wait follows a
// shorter lease (the default 30s must not refuse a file that only shortened the lease); set
// explicitly, it is checked.
void CheckWait(const SectionReader& idem, Config* config) {
  using conf::FormatDurationMs;
  auto& id = config->idempotency;
  if (!idem.Has("max_wait")) id.max_wait_ms = std::min(id.max_wait_ms, id.lease_ms);
  if (id.max_wait_ms > id.lease_ms) {
    idem.Fail("max_wait", "(" + FormatDurationMs(id.max_wait_ms) +
                              ") must not be longer than idempotency.lease (" +
                              FormatDurationMs(id.lease_ms) + ")");
  }
  if (id.wait_ms > id.max_wait_ms) {
    idem.Fail("wait", "(" + FormatDurationMs(id.wait_ms) +
                          ") must not be longer than idempotency.max_wait (" +
                          FormatDurationMs(id.max_wait_ms) + ")");
  }
}

// Checks that span keys: TLS needs both files; C4 (ca_file only for https://: CheckUpstreamHost).
void CheckAcrossKeys(const Context& ctx, const std::map<std::string_view, SectionReader>& readers,
                     Config& config) {
  const SectionReader& listen = readers.at("listen");
  if (config.listen.tls_cert.empty() != config.listen.tls_key.empty()) {
    const bool cert = !config.listen.tls_cert.empty();
    listen.Fail(cert ? "tls_cert" : "tls_key",
                cert ? "is set but listen.tls_key is not; TLS needs both"
                     : "is set but listen.tls_cert is not; TLS needs both");
  }
  CheckLeaseAndTtl(ctx, readers.at("idempotency"), readers.at("upstream"), config);
  CheckWait(readers.at("idempotency"), &config);
}

constexpr std::string_view kGroupsSection = "upstreams";  // [upstreams.NAME]: named groups

// Refuses top-level keys that are not known sections, and known sections that are not tables
// ([[routes]], an array of tables, is checked by ReadRoutes).
void CheckSections(const Context& ctx, std::vector<std::string_view> sections) {
  sections.push_back(kGroupsSection);
  sections.push_back("routes");
  for (const auto& [key, node] : *ctx.root) {
    const uint32_t line = key.source().begin.line;
    if (key.str() == "routes") continue;
    if (std::find(sections.begin(), sections.end(), key.str()) == sections.end()) {
      std::string known;
      for (std::string_view s : sections) known += (known.empty() ? "" : ", ") + std::string(s);
      throw ConfigError(
          conf::FormatError(ctx.file, line, key.str(), "unknown section (known: " + known + ")"));
    }
    if (!node.is_table()) {
      throw ConfigError(conf::FormatError(ctx.file, line, key.str(),
                                          "expected a section [" + std::string(key.str()) +
                                              "], got " + std::string(conf::TypeName(node))));
    }
  }
}

bool IsGroupName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "default") return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') return false;
  }
  return true;
}

// [upstreams.NAME]: each a group with the keys of [upstream], from their built-in defaults, and
// url or servers required (a group that named no server would go to the default url).
void ReadUpstreamGroups(const Context& ctx, Config* config) {
  const toml::table* groups = (*ctx.root)[kGroupsSection].as_table();
  if (groups == nullptr) return;
  std::vector<std::string_view> names;
  for (const conf::KeySpec& key : conf::ConfigKeys()) {
    if (key.section == "upstream") names.push_back(key.name);
  }
  for (const auto& [key, node] : *groups) {
    const std::string section = std::string(kGroupsSection) + "." + std::string(key.str());
    const uint32_t line = key.source().begin.line;
    if (!IsGroupName(key.str())) {
      throw ConfigError(conf::FormatError(
          ctx.file, line, section,
          "a group name is 1 to 64 letters, digits, '_' or '-', and not \"default\""));
    }
    if (!node.is_table()) {
      throw ConfigError(conf::FormatError(
          ctx.file, line, section,
          "expected a section [" + section + "], got " + std::string(conf::TypeName(node)) +
              " ([upstreams.NAME] are named groups; the default group's keys go in [upstream])"));
    }
    SectionReader r(node.as_table(), section, ctx.file, names);
    r.RejectUnknownKeys();
    Config group;
    for (const conf::KeySpec& spec : conf::ConfigKeys()) {
      if (spec.section == "upstream") conf::ReadKey(spec, ctx, r, &group);
    }
    if (!r.Has("url") && !r.Has("servers")) {
      r.Fail("servers", "a named group needs url or servers");
    }
    config->upstream_groups.emplace(std::string(key.str()), std::move(group.upstream));
  }
}

// Runs `step`; a ConfigError it throws is added to *errors, and the reading goes on.
template <typename Step>
void Collect(std::vector<std::string>* errors, Step&& step) {
  try {
    step();
  } catch (const ConfigError& e) {
    errors->push_back(e.what());
  }
}

// Each section in turn: unknown keys first, then every key of the table in order. Every
// problem is added to *errors.
Config BuildConfig(const Context& ctx, std::vector<std::string>* errors) {
  const std::vector<std::string_view> sections = conf::ConfigSections();
  Collect(errors, [&] { CheckSections(ctx, sections); });
  Config config;
  std::map<std::string_view, SectionReader> readers;
  for (std::string_view section : sections) {
    std::vector<std::string_view> names;
    for (const conf::KeySpec& key : conf::ConfigKeys()) {
      if (key.section == section) names.push_back(key.name);
    }
    if (section == "listen") names.push_back("certificates");  // [[listen.certificates]]
    for (std::string_view sub : sections) {  // [store.postgres] is the key "postgres" of [store]
      if (sub.size() > section.size() && sub.substr(0, section.size()) == section &&
          sub[section.size()] == '.') {
        names.push_back(sub.substr(section.size() + 1));
      }
    }
    const toml::node* node = ctx.root->at_path(section).node();
    const SectionReader& r =
        readers
            .emplace(section, SectionReader(node == nullptr ? nullptr : node->as_table(),
                                            std::string(section), ctx.file, names))
            .first->second;
    Collect(errors, [&] { r.RejectUnknownKeys(); });
    for (const conf::KeySpec& key : conf::ConfigKeys()) {
      if (key.section == section) Collect(errors, [&] { conf::ReadKey(key, ctx, r, &config); });
    }
  }
  Collect(errors, [&] { ReadUpstreamGroups(ctx, &config); });
  Collect(errors, [&] { conf::ReadCertificates(ctx, &config); });
  // Across keys only over values that all read: a key left at its default would be misjudged.
  if (errors->empty()) Collect(errors, [&] { CheckAcrossKeys(ctx, readers, config); });
  Collect(errors, [&] { conf::ReadRoutes(ctx, &config); });
  return config;
}

std::string SyntaxError(const std::string& file, const toml::parse_error& e) {
  const auto& begin = e.source().begin;
  return file + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column) +
         ": TOML syntax error: " + std::string(e.description());
}

// The problems in the file's order ("FILE:LINE: ..."; one without a line goes last).
void SortByLine(const std::string& file, std::vector<std::string>* errors) {
  auto line = [&file](const std::string& e) {
    if (e.compare(0, file.size() + 1, file + ":") != 0) return std::numeric_limits<long>::max();
    char* end = nullptr;
    long n = std::strtol(e.c_str() + file.size() + 1, &end, 10);
    return end != nullptr && *end == ':' ? n : std::numeric_limits<long>::max();
  };
  std::stable_sort(errors->begin(), errors->end(),
                   [&](const std::string& a, const std::string& b) { return line(a) < line(b); });
}

}  // namespace

const Config::Upstream* Config::FindUpstream(std::string_view name) const {
  if (name.empty() || name == "default") return &upstream;
  auto it = upstream_groups.find(name);
  return it == upstream_groups.end() ? nullptr : &it->second;
}

ConfigResult ParseConfig(std::string_view toml_text, const std::string& filename) {
  ConfigResult result;
  try {
    toml::table root;
    try {
      root = toml::parse(toml_text, filename);
    } catch (const toml::parse_error& e) {
      result.error = SyntaxError(filename, e);
      result.errors.push_back(result.error);
      return result;
    }
    Context ctx{filename, std::filesystem::path(filename).parent_path(), &root};
    Config config = BuildConfig(ctx, &result.errors);
    if (result.errors.empty()) {
      result.config = std::make_shared<const Config>(std::move(config));
    } else {
      SortByLine(filename, &result.errors);
      for (const std::string& e : result.errors) {
        result.error += (result.error.empty() ? "" : "\n") + e;
      }
    }
    return result;
  } catch (const ConfigError& e) {
    result.error = e.what();
  } catch (const std::exception& e) {
    result.error = filename + ": " + e.what();
  } catch (...) {
    result.error = filename + ": unexpected error while reading the configuration";
  }
  if (!result.ok() && result.errors.empty()) result.errors.push_back(result.error);
  return result;
}

ConfigResult LoadConfig(const std::string& path) {
  ConfigResult result;
  try {
    std::string text;
    std::string why;
    if (!conf::ReadWholeFile(path, &text, &why)) {
      result.error = path + ": cannot read the configuration file: " + why;
      result.errors.push_back(result.error);
      return result;
    }
    return ParseConfig(text, path);
  } catch (...) {
    result.error = path + ": cannot read the configuration file";
  }
  if (!result.ok() && result.errors.empty()) result.errors.push_back(result.error);
  return result;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// The configuration reference (see config_reference.h): one list of paragraphs and the key
// table, rendered as Markdown or as roff. Text marks code with `backticks`; the man page shows it
// in bold.
#include "conf/config_reference.h"

#include <string>
#include <vector>

#include "conf/config_routes.h"
#include "conf/config_values.h"

namespace idemgate::conf {
namespace {

struct Paragraph {
  std::string_view heading;  // "" = continues the previous heading
  std::string_view text;
};

constexpr Paragraph kIntro[] = {
    {"Format",
     "A TOML file, `/etc/idemgate/idemgate.toml` in the package. Every key is optional and has "
     "the default given here; the sample file lists them all with these defaults "
     "(`/usr/share/doc/idemgate/idemgate.toml` in the package, `packaging/idemgate.toml` in the "
     "source tree). "
     "Unknown sections or keys, wrong types and impossible values stop start-up with a message "
     "naming the file, line and key; `idemgate --check-config --config FILE` checks a file "
     "without starting."},
    {"Values",
     "Durations are strings: a whole number and a unit, `ms`, `s`, `m`, `h` or `d` (`\"250ms\"`, "
     "`\"30s\"`, `\"24h\"`); no fractions. Sizes are bytes (an integer) or a string with a unit, "
     "`B`, `KiB`, `MiB`, `GiB`, `TiB` (binary) or `KB`, `MB`, `GB`, `TB` (decimal). Relative "
     "paths in `tls_cert`, `tls_key`, `ca_file` and `secret_file` are relative to the config "
     "file's directory; `store.path` and `log.access` to the working directory."},
    {"Reload",
     "SIGHUP reloads the file. Keys marked live apply to requests that start after the reload; "
     "keys marked restart keep their running value, and the log names each one that changed. A "
     "file that fails to load changes nothing."},
    {"Rules across keys",
     "`idempotency.lease` must be longer than `upstream.connect_timeout` + "
     "`upstream.response_timeout` (for every upstream group a route uses), and "
     "`idempotency.ttl` longer than the lease; `idempotency.wait` is at most "
     "`idempotency.max_wait`, which is shorter than the lease."},
    {"Settings the store remembers",
     "The store records `idempotency.header`, `idempotency.fingerprint_headers`, `scope.header` "
     "and the scope secret: a start with other values is refused unless the gateway is started "
     "with `--accept-new-signature`, because stored keys would no longer match their retries."},
};

constexpr Paragraph kGroups[] = {
    {"[upstreams.NAME]",
     "Named upstream groups, for routes. Each takes the keys of `[upstream]`, with the defaults "
     "above (not the values of `[upstream]`); `url` or `servers` is required. NAME is 1 to 64 "
     "letters, digits, `_` or `-`, and not `default`. All of a group's keys are restart-only."},
    {"[[routes]]",
     "Ordered path-prefix rules; the first match wins, and a request no route matches runs with "
     "the top-level sections. A route has `prefix` (required: the path prefix it matches, "
     "case-insensitive; request paths are compared decoded and with dot segments resolved), "
     "`host` (only requests whose Host, without port, is this), `upstream` (the NAME of an "
     "`[upstreams.NAME]` group; omitted: `[upstream]`) and `no_store_statuses` (4xx or 5xx "
     "statuses answered but not stored: the claim is released and a retry executes again)."},
    {"",
     "In `[routes.idempotency]` and `[routes.limits]` a route may set ROUTE_KEYS, with the same "
     "types and bounds; every other value comes from the top level, and `wait` and `max_wait` are "
     "capped at a shorter route lease. The rules across keys hold for each route."},
    {"",
     "On SIGHUP a route's `ttl`, `lease`, `require_key`, `takeover`, limits and "
     "`no_store_statuses` apply live; a change of the order, or of a route's `prefix`, `host`, "
     "`upstream`, `methods` or `fingerprint_headers`, waits for a restart (the running routes are "
     "kept whole)."},
};

std::string RouteKeys() {
  std::string out;
  for (const KeySpec& key : ConfigKeys()) {
    if (!IsRouteKey(key)) continue;
    out += (out.empty() ? "`" : ", `") + key.Qualified() + "`";
  }
  return out;
}

std::string Expand(std::string_view text) {
  std::string out(text);
  const size_t at = out.find("ROUTE_KEYS");
  if (at != std::string::npos) out.replace(at, 10, RouteKeys());
  return out;
}

std::string ReloadName(Reload reload) { return reload == Reload::kLive ? "live" : "restart"; }

// ----- Markdown -----

std::string MdCell(std::string_view text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

void MdParagraphs(std::string* out, const Paragraph* first, const Paragraph* last, int level) {
  for (const Paragraph* p = first; p != last; ++p) {
    if (!p->heading.empty())
      *out += std::string(level, '#') + " " + std::string(p->heading) + "\n\n";
    *out += Expand(p->text) + "\n\n";
  }
}

void MdSection(std::string* out, std::string_view section) {
  *out += "### [" + std::string(section) + "]\n\n";
  *out += "| Key | Type | Default | Bounds | Reload | Meaning |\n";
  *out += "|---|---|---|---|---|---|\n";
  for (const KeySpec& key : ConfigKeys()) {
    if (key.section != section) continue;
    const std::string bounds = KeyBounds(key);
    *out += "| `" + std::string(key.name) + "` | " + KindName(key.kind) + " | `" +
            MdCell(FormatDefault(key)) + "` | " + (bounds.empty() ? "-" : MdCell(bounds)) + " | " +
            ReloadName(key.reload) + " | " + MdCell(key.doc) + " |\n";
  }
  *out += "\n";
}

// ----- roff -----

// Escapes roff's specials; `code` becomes bold. A line never starts with '.' or '\''.
std::string Roff(std::string_view text) {
  std::string out;
  bool code = false;
  for (char c : text) {
    if (c == '`') {
      out += code ? "\\fR" : "\\fB";
      code = !code;
    } else if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

void ManParagraphs(std::string* out, const Paragraph* first, const Paragraph* last,
                   std::string_view macro) {
  for (const Paragraph* p = first; p != last; ++p) {
    if (!p->heading.empty())
      *out += std::string(macro) + " " + Roff(p->heading) + "\n";
    else
      *out += ".PP\n";
    *out += Roff(Expand(p->text)) + "\n";
  }
}

void ManSection(std::string* out, std::string_view section) {
  *out += ".SS [" + Roff(section) + "]\n";
  for (const KeySpec& key : ConfigKeys()) {
    if (key.section != section) continue;
    *out += ".TP\n\\fB" + Roff(key.name) + "\\fR = " + Roff(FormatDefault(key)) + "\n";
    *out += Roff(key.doc) + "\n.br\n";
    const std::string bounds = KeyBounds(key);
    *out += "Type: " + Roff(KindName(key.kind)) + (bounds.empty() ? "" : "; " + Roff(bounds)) +
            "; reload: " + ReloadName(key.reload) + ".\n";
  }
}

}  // namespace

std::string KindName(Kind kind) {
  switch (kind) {
    case Kind::kString:
      return "string";
    case Kind::kHeaderName:
      return "header name";
    case Kind::kPath:
      return "file path";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kDuration:
      return "duration";
    case Kind::kDurationOrOff:
    case Kind::kDurationUs:
      return "duration";
    case Kind::kSize:
      return "size";
    case Kind::kStrings:
      return "array of strings";
    case Kind::kStringTable:
      return "table of strings";
  }
  return "value";
}

std::string KeyBounds(const KeySpec& key) {
  switch (key.kind) {
    case Kind::kInt:
      return std::to_string(key.min) + " to " + std::to_string(key.max);
    case Kind::kDuration:
      return "1ms to " + FormatDurationMs(key.max);
    case Kind::kDurationOrOff:
      return "0s (off) or up to " + FormatDurationMs(key.max);
    case Kind::kDurationUs:
      return "0s (off) or up to " + FormatDurationUs(key.max);
    case Kind::kSize:
      return "1B to " + FormatSize(static_cast<uint64_t>(key.max));
    case Kind::kHeaderName:
      return "a non-empty token (RFC 9110)";
    case Kind::kPath:
      return "readable, not empty (\"\" = unset)";
    default:
      return "";
  }
}

std::string ConfigReferenceMarkdown() {
  std::string out =
      "<!-- Generated by `idemgate-config-reference md` from the key table in "
      "conf/config_keys.cc; do not edit (the config_reference_doc test compares them). -->\n"
      "# Configuration reference\n\n## The file\n\n";
  MdParagraphs(&out, std::begin(kIntro), std::end(kIntro), 3);
  out += "## Keys\n\n";
  for (std::string_view section : ConfigSections()) MdSection(&out, section);
  out += "## Upstream groups and routes\n\n";
  MdParagraphs(&out, std::begin(kGroups), std::end(kGroups), 3);
  while (out.size() > 1 && out[out.size() - 2] == '\n') out.pop_back();
  return out;
}

std::string ConfigReferenceMan(std::string_view version, std::string_view date) {
  std::string out = ".\\\" Generated by idemgate-config-reference man from conf/config_keys.cc.\n";
  out += ".TH IDEMGATE.TOML 5 \"" + std::string(date) + "\" \"idemgate " + std::string(version) +
         "\" \"File Formats\"\n";
  out += ".SH NAME\nidemgate.toml \\- configuration file of the idemgate idempotency gateway\n";
  out += ".SH SYNOPSIS\n/etc/idemgate/idemgate.toml\n.SH DESCRIPTION\n";
  out += Roff(
             "The configuration of idemgate(8), a reverse proxy that makes an HTTP API safe to "
             "retry with `Idempotency-Key`.") +
         "\n";
  ManParagraphs(&out, std::begin(kIntro), std::end(kIntro), ".SS");
  out += ".SH KEYS\n";
  for (std::string_view section : ConfigSections()) ManSection(&out, section);
  out += ".SH UPSTREAM GROUPS AND ROUTES\n";
  ManParagraphs(&out, std::begin(kGroups), std::end(kGroups), ".SS");
  out +=
      ".SH FILES\n.TP\n/etc/idemgate/idemgate.toml\nThe configuration the packaged service "
      "reads.\n.TP\n/usr/share/doc/idemgate/idemgate.toml\nEvery key with its default and a "
      "comment.\n.SH SEE ALSO\n\\fBidemgate\\fR(8)\n";
  return out;
}

}  // namespace idemgate::conf

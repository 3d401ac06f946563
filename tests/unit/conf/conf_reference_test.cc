// The generated configuration reference (conf/config_reference.h): every key of the table is in
// the Markdown and the man page with its default, bounds and reload behaviour.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "conf/config_reference.h"

namespace idemgate::conf {
namespace {

TEST(ConfigReference, EveryKeyIsInBothWithItsDefaultAndReload) {
  const std::string md = ConfigReferenceMarkdown();
  const std::string man = ConfigReferenceMan("9.9.9", "2026-01-02");
  for (const KeySpec& key : ConfigKeys()) {
    const std::string row = "| `" + std::string(key.name) + "` | " + KindName(key.kind) + " | `" +
                            FormatDefault(key) + "` |";
    EXPECT_NE(md.find(row), std::string::npos) << key.Qualified();
    const std::string reload = key.reload == Reload::kLive ? "live" : "restart";
    EXPECT_NE(md.find(std::string(key.doc) + " |"), std::string::npos) << key.Qualified();
    EXPECT_NE(man.find("\\fB" + std::string(key.name) + "\\fR = "), std::string::npos)
        << key.Qualified();
    EXPECT_NE(man.find("reload: " + reload), std::string::npos);
  }
  for (std::string_view section : ConfigSections()) {
    EXPECT_NE(md.find("### [" + std::string(section) + "]\n"), std::string::npos) << section;
    EXPECT_NE(man.find(".SS [" + std::string(section) + "]\n"), std::string::npos) << section;
  }
}

TEST(ConfigReference, BoundsComeFromTheTable) {
  const std::map<std::string, std::string> expected = {
      {"store.postgres.connections", "1 to 256"},
      {"upstream.connect_timeout", "1ms to 10m"},
      {"idempotency.wait", "0s (off) or up to 1h"},
      {"limits.max_request_body", "1B to 1GiB"},
      {"idempotency.takeover", ""},
      {"idempotency.methods", ""},
  };
  size_t seen = 0;
  for (const KeySpec& key : ConfigKeys()) {
    auto it = expected.find(key.Qualified());
    if (it == expected.end()) continue;
    EXPECT_EQ(KeyBounds(key), it->second) << it->first;
    ++seen;
  }
  EXPECT_EQ(seen, expected.size());
}

// The man page is roff: its title carries the version and date, no text line starts with a
// control character, and hyphens are escaped (so --check-config is not hyphenated or mangled).
TEST(ConfigReference, ManPageIsWellFormedRoff) {
  const std::string man = ConfigReferenceMan("9.9.9", "2026-01-02");
  EXPECT_NE(man.find(".TH IDEMGATE.TOML 5 \"2026-01-02\" \"idemgate 9.9.9\""), std::string::npos);
  EXPECT_NE(man.find("\\-\\-accept\\-new\\-signature"), std::string::npos);
  size_t start = 0;
  while (start < man.size()) {
    size_t end = man.find('\n', start);
    const std::string line = man.substr(start, end - start);
    if (!line.empty() && line[0] == '\'') ADD_FAILURE() << line;
    if (!line.empty() && line[0] == '.') {
      const std::string macro = line.substr(0, line.find(' '));
      static const std::set<std::string> kKnown = {".\\\"", ".TH", ".SH", ".SS",
                                                   ".TP",   ".PP", ".br"};
      EXPECT_TRUE(kKnown.count(macro)) << "not a macro it uses: " << line;
    }
    start = end == std::string::npos ? man.size() : end + 1;
  }
}

}  // namespace
}  // namespace idemgate::conf

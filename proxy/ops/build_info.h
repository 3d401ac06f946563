// What this binary is: its version, the git commit it was configured from, and the versions of
// the libraries it runs on (for --version and the start-up line).
#pragma once

#include <string>

namespace idemgate {

struct BuildInfo {
  std::string version;  // the project version, "0.1.0"
  std::string commit;   // `git rev-parse --short HEAD` at configure time, or "unknown"
  std::string libevent;
  std::string openssl;
  std::string rocksdb;
};

const BuildInfo& GetBuildInfo();
// The --version text: "idemgate 0.1.0 (commit abc1234)\n" plus one line per library.
std::string VersionText();

}  // namespace idemgate

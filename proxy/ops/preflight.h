// Preflight: what the config parser cannot see, checked against this host before the gateway
// starts (and by --check-config): names resolve, the store directory can be created and written,
// the access log's directory exists, the TLS files load and the key matches the certificate.
// Also the start-up error for a store that does not open, with its likely cause.
#pragma once

#include <string>
#include <vector>

#include "conf/config.h"

namespace idemgate {

struct PreflightProblem {
  std::string key;      // the config key at fault, e.g. "store.path"
  std::string message;  // "key 'store.path': ..." in the parser's style
};

std::vector<PreflightProblem> Preflight(const Config& config);

// Creates the store directory (and parents) 0700 and tightens an existing one to 0700: the
// records are stored responses (payment data). "" or why not.
std::string PrepareStoreDirectory(const std::string& path);

// The start-up error for a store that did not open: names store.path and the likely cause
// (another process holds the lock, no permission, a full disk) before RocksDB's own text.
std::string ExplainStoreOpenError(const std::string& path, const std::string& error);

}  // namespace idemgate

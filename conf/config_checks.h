// SPDX-License-Identifier: Apache-2.0
// The key-specific checks of the configuration table (conf/config_keys.cc): each runs after its
// key is read (present: the key is in the file), refuses a value with SectionReader::Fail, and
// derives the fields that other code reads (a parsed address, the secret file's bytes).
#pragma once

#include <string>
#include <string_view>

#include "conf/config.h"
#include "conf/config_reader.h"

namespace idemgate::conf::checks {

void CheckListenAddress(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckTrustedProxies(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckUpstreamUrl(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckUpstreamServers(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckBalance(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckHealthPath(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckUpstreamHost(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckMethods(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckRequireKey(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckFingerprintHeaders(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckStorePath(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckStoreBackend(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckPostgresDsn(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckEncryptionKeys(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckAdminAddress(const Context& ctx, const SectionReader& r, bool present, Config* c);
void CheckLogAccess(const Context& ctx, const SectionReader& r, bool present, Config* c);
// scope.secret_file: the file's bytes into scope.secret.
void LoadScopeSecret(const Context& ctx, const SectionReader& r, bool present, Config* c);

// Reads a path key's file (relative to the config's directory), checking it is readable and
// not empty; the bytes go to *contents when given.
void ReadPathFile(const Context& ctx, const SectionReader& r, std::string_view key,
                  std::string* path, std::string* contents);

}  // namespace idemgate::conf::checks

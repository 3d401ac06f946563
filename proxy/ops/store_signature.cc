// SPDX-License-Identifier: Apache-2.0
// The settings signature kept in the store, and the start-up check against it.
#include "proxy/ops/store_signature.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "common/hex.h"

namespace idemgate {
namespace {

constexpr char kMetaName[] = "signature";
constexpr char kSecretLabel[] = "idemgate scope-secret identity v1";
constexpr char kSecretKey[] = "scope.secret_file";

std::string Lower(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

// HMAC-SHA-256(secret, fixed label), first 16 bytes in hex.
std::string SecretIdentity(const std::string& secret) {
  if (secret.empty()) return "none";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(kSecretLabel), sizeof(kSecretLabel) - 1, md, &len);
  return "hmac:" + LowerHex(md, std::min(len, 16u));
}

std::map<std::string, std::string> ParseLines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string JoinHeaders(const std::vector<std::string>& headers) {
  std::string out;
  for (const std::string& h : headers) {
    out += (out.empty() ? "" : ",") + h;  // in order: the fingerprint hashes them so
  }
  return out;
}

// When a route fingerprints with other headers than the top level: every route in order (an
// added or moved route changes which requests those headers apply to), "host/prefix:headers".
// No such route: no line, so a store written before routes keeps its signature.
std::string RoutesLine(const Config& config) {
  const auto& top = config.idempotency.fingerprint_headers;
  bool differs = false;
  for (const Route& route : config.routes) {
    differs = differs || route.effective->idempotency.fingerprint_headers != top;
  }
  if (!differs) return {};
  std::string out;
  for (const Route& route : config.routes) {
    out += (out.empty() ? "" : " ") + route.host + route.prefix + ":" +
           JoinHeaders(route.effective->idempotency.fingerprint_headers);
  }
  return "routes.fingerprint_headers=" + out + "\n";
}

}  // namespace

std::string SettingsSignature(const Config& config) {
  return "idempotency.header=" + Lower(config.idempotency.header) + "\n" +
         "idempotency.fingerprint_headers=" + JoinHeaders(config.idempotency.fingerprint_headers) +
         "\n" + "scope.header=" + Lower(config.scope.header) + "\n" + kSecretKey + "=" +
         SecretIdentity(config.scope.secret) + "\n" + RoutesLine(config);
}

std::vector<std::string> SignatureDifferences(const std::string& stored, const std::string& now) {
  std::map<std::string, std::string> before = ParseLines(stored);
  std::map<std::string, std::string> after = ParseLines(now);
  for (const auto& [name, value] : before) after.try_emplace(name, "(absent)");
  std::vector<std::string> out;
  for (const auto& [name, value] : after) {
    auto old = before.find(name);
    const std::string was = old == before.end() ? "(absent)" : old->second;
    if (was == value) continue;
    if (name == kSecretKey) {
      out.push_back(name + " (the secret's contents changed)");
    } else {
      out.push_back(name + " (stored \"" + was + "\", now \"" + value + "\")");
    }
  }
  return out;
}

bool CheckStoreSignature(Store* store, const Config& config, bool accept_new, std::string* error,
                         std::string* note) {
  const std::string now = SettingsSignature(config);
  std::optional<std::string> stored;
  StoreStatus read = store->GetMeta(kMetaName, &stored);
  if (!read.ok()) {
    *error = "cannot read the settings signature from the store: " + read.message;
    return false;
  }
  std::vector<std::string> changed;
  if (stored.has_value()) changed = SignatureDifferences(*stored, now);
  if (!changed.empty() && !accept_new) {
    std::string list;
    for (const std::string& c : changed) list += (list.empty() ? "" : "; ") + c;
    *error = "the store at " + config.store.path + " was written with other key settings: " + list +
             ". Its live records would no longer match their retries (a retry could execute "
             "again, pass through, or get 422). Restore those settings, or start once with "
             "--accept-new-signature to accept the change.";
    return false;
  }
  if (stored == now) return true;
  StoreStatus put = store->PutMeta(kMetaName, now);
  if (!put.ok()) {
    *error = "cannot store the settings signature: " + put.message;
    return false;
  }
  if (!changed.empty()) {
    std::string list;
    for (const std::string& c : changed) list += (list.empty() ? "" : "; ") + c;
    *note = "accepted new key settings (--accept-new-signature): " + list;
  }
  return true;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// The guard: which requests are guarded, the caller's scope, the key's syntax, the fingerprint.
#include "proxy/policy/guard.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/hex.h"
#include "proxy/policy/digest.h"

namespace idemgate {
namespace {

bool IsVisibleAscii(std::string_view text) {
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

// S2: what the scope is derived from. Authorization: lower-case scheme, one space, the
// credential exactly; a value without a space is used whole. Empty: no credential.
std::string NormalizeCredential(std::string_view header_name, std::string_view raw) {
  std::string_view value = TrimOws(raw);
  if (!HeaderNameEquals(header_name, "Authorization")) return std::string(value);
  size_t space = value.find_first_of(" \t");
  if (space == std::string_view::npos) return std::string(value);
  std::string_view credential = TrimOws(value.substr(space + 1));
  if (credential.empty()) return {};
  return LowerAscii(value.substr(0, space)) + " " + std::string(credential);
}

// A scheme with nothing after it ("Bearer", or "Bearer " once llhttp trimmed it) is no
// credential at all, even though a single word is otherwise used whole.
bool IsBareScheme(std::string_view header_name, std::string_view normalized) {
  if (!HeaderNameEquals(header_name, "Authorization")) return false;
  static constexpr std::string_view kSchemes[] = {"Bearer", "Basic", "Digest", "Token"};
  for (std::string_view scheme : kSchemes) {
    if (HeaderNameEquals(normalized, scheme)) return true;
  }
  return false;
}

// The HMAC implementation, fetched once per process (as Sha256(), digest.h).
EVP_MAC* Hmac() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

void HmacSha256(std::string_view secret, std::string_view input, uint8_t* out) {
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(Hmac());
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                         OSSL_PARAM_construct_end()};
  size_t len = 0;
  if (ctx != nullptr &&
      EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                   params) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(input.data()), input.size()) ==
          1) {
    EVP_MAC_final(ctx, out, &len, 32);
  }
  EVP_MAC_CTX_free(ctx);
}

void AppendU64(EVP_MD_CTX* ctx, uint64_t n) {
  uint8_t bytes[8];
  for (int i = 7; i >= 0; --i) {
    bytes[i] = static_cast<uint8_t>(n & 0xFF);
    n >>= 8;
  }
  EVP_DigestUpdate(ctx, bytes, sizeof(bytes));
}

void AppendLengthPrefixed(EVP_MD_CTX* ctx, std::string_view part) {
  AppendU64(ctx, part.size());
  EVP_DigestUpdate(ctx, part.data(), part.size());
}

// Stands where a value's length would: no value is 2^64 - 1 bytes long.
constexpr uint64_t kOccurrencesFollow = UINT64_MAX;

// F1 for one fingerprint_headers entry: its lower-case name, then
//   absent:                          the empty value (length 0), as the earlier encoding had it;
//   once, non-empty:                 that value, as before;
//   once empty, or more than once:   kOccurrencesFollow, the count, then each value in order.
// So `a` + `b` differs from `a, b` and empty differs from absent, while every fingerprint the
// earlier encoding could not confuse is unchanged: records already stored keep matching.
void AppendFingerprintHeader(EVP_MD_CTX* ctx, const Headers& headers, std::string_view name) {
  AppendLengthPrefixed(ctx, LowerAscii(name));
  std::vector<std::string_view> values;
  for (const Header& h : headers) {
    if (HeaderNameEquals(h.name, name)) values.push_back(h.value);
  }
  if (values.empty() || (values.size() == 1 && !values[0].empty())) {
    AppendLengthPrefixed(ctx, values.empty() ? std::string_view() : values[0]);
    return;
  }
  AppendU64(ctx, kOccurrencesFollow);
  AppendU64(ctx, values.size());
  for (std::string_view value : values) AppendLengthPrefixed(ctx, value);
}

bool MatchesRequireKey(const Config& config, std::string_view target) {
  if (config.idempotency.require_key.empty()) return false;
  // However the upstream reads the path, a key is required when that reading falls under a
  // prefix.
  const std::vector<std::string> paths = RequestPathReadings(target);
  for (const std::string& raw_prefix : config.idempotency.require_key) {
    std::string prefix = NormalizeRequestPath(raw_prefix, false);
    for (const std::string& path : paths) {
      if (path.compare(0, prefix.size(), prefix) == 0) return true;
    }
  }
  return false;
}

bool IsGuardedRoute(const Config& config, const Request& request) {
  bool method_listed = false;
  for (const std::string& m : config.idempotency.methods) {
    if (m == request.method) method_listed = true;
  }
  if (!method_listed) return false;
  if (FindHeader(request.headers, config.idempotency.header) != nullptr) return true;
  return MatchesRequireKey(config, request.target);
}

GuardDecision Reject(ErrorCode code, std::string detail) {
  GuardDecision d;
  d.kind = GuardKind::kReject;
  d.error = code;
  d.detail = std::move(detail);
  return d;
}

// The key header, the credential header and Host reach the upstream as the client sent them
// (G3, S2): a client that lists one in Connection would have the gateway strip it.
bool ListsProtectedHeader(const Config& config, const Request& request, GuardDecision* reject) {
  const ConnectionTokens listed(request.headers);
  if (listed.empty()) return false;
  for (const std::string& name :
       {std::string("Host"), config.idempotency.header, config.scope.header}) {
    if (!listed.Lists(name)) continue;
    *reject = Reject(ErrorCode::kBadRequest,
                     "The Connection header lists " + name +
                         ", which the gateway forwards upstream unchanged; remove it from "
                         "Connection.");
    return true;
  }
  return false;
}

}  // namespace

bool ParseIdempotencyKey(std::string_view raw, std::string* key) {
  std::string_view value = TrimOws(raw);
  std::string out;
  if (!value.empty() && value.front() == '"') {
    // RFC 8941 sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
    if (value.size() < 2 || value.back() != '"') return false;
    std::string_view inner = value.substr(1, value.size() - 2);
    for (size_t i = 0; i < inner.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(inner[i]);
      if (c < 0x20 || c > 0x7E || c == '"') return false;
      if (c == '\\') {
        if (i + 1 >= inner.size() || (inner[i + 1] != '"' && inner[i + 1] != '\\')) return false;
        c = static_cast<unsigned char>(inner[++i]);
      }
      out.push_back(static_cast<char>(c));
    }
  } else {
    out.assign(value);
  }
  // K1 holds for the unquoted key too: a space inside quotes is not a valid key.
  if (out.empty() || out.size() > 255 || !IsVisibleAscii(out)) return false;
  if (key != nullptr) *key = std::move(out);
  return true;
}

namespace {

// Per thread, the last few scopes computed: traffic carries few distinct credentials, and one
// SHA-256 (more with HMAC) cost ~4k instructions, 11% of a replay. An entry matches only on the
// whole input and secret, byte for byte (never a hash of them), so two credentials never share
// a scope, and a reloaded scope.secret misses. An unused entry's input is empty, which no input
// is (it holds at least the NUL after the header name).
struct ScopeMemo {
  struct Entry {
    std::string input;
    std::string secret;
    ScopeId scope{};
  };
  std::array<Entry, 8> entries;
  size_t next = 0;  // the entry replaced next
};

ScopeId HashScope(std::string_view input, std::string_view secret) {
  ScopeId out{};
  if (secret.empty()) {
    unsigned int len = 0;
    EVP_MD_CTX* ctx = ThreadDigestCtx();
    if (ctx != nullptr && EVP_DigestInit_ex(ctx, Sha256(), nullptr) == 1 &&
        EVP_DigestUpdate(ctx, input.data(), input.size()) == 1) {
      EVP_DigestFinal_ex(ctx, out.data(), &len);
    }
  } else {
    HmacSha256(secret, input, out.data());
  }
  return out;
}

// The scope of a credential already normalized (NormalizeCredential).
ScopeId ScopeOfNormalized(std::string_view header_name, std::string_view normalized,
                          std::string_view secret) {
  // Domain separation: the lower-cased header name and a NUL (never in a header name) come
  // first, so the same bytes in two different credential headers are two different scopes.
  std::string input = LowerAscii(header_name);
  input.push_back('\0');
  input.append(normalized);
  thread_local ScopeMemo memo;
  for (const ScopeMemo::Entry& e : memo.entries) {
    if (e.input == input && e.secret == secret) return e.scope;
  }
  ScopeMemo::Entry& slot = memo.entries[memo.next];
  memo.next = (memo.next + 1) % memo.entries.size();
  slot.scope = HashScope(input, secret);
  slot.secret.assign(secret);
  slot.input = std::move(input);
  return slot.scope;
}

}  // namespace

ScopeId ComputeScopeId(std::string_view header_name, std::string_view credential,
                       std::string_view secret) {
  return ScopeOfNormalized(header_name, NormalizeCredential(header_name, credential), secret);
}

Fingerprint ComputeFingerprint(const Request& request,
                               const std::vector<std::string>& fingerprint_headers,
                               std::string_view route_host) {
  Fingerprint out{};
  EVP_MD_CTX* ctx = ThreadDigestCtx();
  if (ctx == nullptr) return out;
  EVP_DigestInit_ex(ctx, Sha256(), nullptr);
  AppendLengthPrefixed(ctx, request.method);
  AppendLengthPrefixed(ctx, request.target);
  AppendLengthPrefixed(ctx, request.body);
  for (const std::string& name : fingerprint_headers) {
    AppendFingerprintHeader(ctx, request.headers, name);
  }
  // Only under a host route: every other fingerprint stays as F1 defines it (records already
  // stored keep matching). The "host" tag cannot be confused with a header part: a header part
  // is a name followed by a value, and this one comes after all of them.
  if (!route_host.empty()) {
    static constexpr char kTag[] = "\0route-host";  // a NUL, which no header name holds
    AppendLengthPrefixed(ctx, std::string_view(kTag, sizeof(kTag) - 1));
    AppendLengthPrefixed(ctx, route_host);
  }
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, out.data(), &len);
  return out;
}

// E3: the stored fingerprint is HMAC-SHA-256(K, F1 digest), K = HMAC-SHA-256(scope.secret,
// "idemgate fingerprint key v1"). Per thread, a MAC context keyed with K for the last secret
// seen: each request then re-initialises it with the same key (no digest fetch, no key setup).
static void KeyWithSecret(std::string_view secret, GuardDecision* d) {
  struct KeyedMac {
    std::string secret;
    std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx{nullptr, &EVP_MAC_CTX_free};
  };
  thread_local KeyedMac mac;
  if (!mac.ctx || mac.secret != secret) {
    std::array<uint8_t, 32> key{};
    HmacSha256(secret, "idemgate fingerprint key v1", key.data());
    mac.ctx.reset(EVP_MAC_CTX_new(Hmac()));
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                           OSSL_PARAM_construct_end()};
    if (!mac.ctx || EVP_MAC_init(mac.ctx.get(), key.data(), key.size(), params) != 1) {
      mac.ctx.reset();
    }
    OPENSSL_cleanse(key.data(), key.size());
    mac.secret.assign(secret);
  }
  size_t len = 0;
  // A failure leaves a fingerprint of zeros: no request matches it, so a retry gets 422, never
  // another request's answer.
  d->fingerprint.fill(0);
  if (mac.ctx && EVP_MAC_init(mac.ctx.get(), nullptr, 0, nullptr) == 1 &&
      EVP_MAC_update(mac.ctx.get(), d->legacy_fingerprint->data(),
                     d->legacy_fingerprint->size()) == 1) {
    EVP_MAC_final(mac.ctx.get(), d->fingerprint.data(), &len, d->fingerprint.size());
  }
}

std::string FingerprintPrefix(const Fingerprint& fingerprint) {
  return LowerHex(fingerprint.data(), 8);
}

bool IsPassthroughRequest(const Config& config, const Request& request) {
  GuardDecision rejected;
  return !ListsProtectedHeader(config, request, &rejected) && !IsGuardedRoute(config, request);
}

GuardDecision EvaluateGuard(const Config& config, const Request& request) {
  GuardDecision rejected;
  if (ListsProtectedHeader(config, request, &rejected)) return rejected;
  if (!IsGuardedRoute(config, request)) return GuardDecision{};
  const std::string& scope_header = config.scope.header;
  const std::string& key_header = config.idempotency.header;

  // S3: the credential before anything about the key.
  int credentials = 0;
  const std::string* credential = FindHeaderCounted(request.headers, scope_header, &credentials);
  if (credentials > 1) {
    return Reject(ErrorCode::kBadRequest, "The " + scope_header + " header was given " +
                                              std::to_string(credentials) +
                                              " times; give it once.");
  }
  std::string normalized =
      credential == nullptr ? std::string() : NormalizeCredential(scope_header, *credential);
  if (credential != nullptr && (normalized.empty() || IsBareScheme(scope_header, normalized))) {
    return Reject(ErrorCode::kMissingCredentials,
                  "The " + scope_header + " header is empty" +
                      (normalized.empty() ? std::string()
                                          : " (only the scheme \"" + normalized + "\")") +
                      "; a request with an " + key_header +
                      " needs a credential in it, because keys are scoped to the caller's "
                      "credential.");
  }
  if (normalized.empty()) {
    return Reject(ErrorCode::kMissingCredentials,
                  "A request with an " + key_header + " needs the " + scope_header +
                      " header, because keys are scoped to the caller's credential.");
  }

  // K1-K2: present where required, then well-formed and given once.
  int keys = 0;
  const std::string* key = FindHeaderCounted(request.headers, key_header, &keys);
  if (keys == 0) {
    return Reject(ErrorCode::kIdempotencyKeyMissing,
                  "This endpoint requires an " + key_header + " header.");
  }
  GuardDecision d;
  if (keys > 1) {
    return Reject(ErrorCode::kIdempotencyKeyInvalid,
                  "The " + key_header + " header was given " + std::to_string(keys) +
                      " times; give it once.");
  }
  if (!ParseIdempotencyKey(*key, &d.key)) {
    return Reject(ErrorCode::kIdempotencyKeyInvalid,
                  "The " + key_header +
                      " must be 1 to 255 visible ASCII characters, optionally as a quoted "
                      "string.");
  }
  d.kind = GuardKind::kGuarded;
  d.scope = ScopeOfNormalized(scope_header, normalized, config.scope.secret);
  d.fingerprint =
      ComputeFingerprint(request, config.idempotency.fingerprint_headers, config.route_host);
  if (config.store.encryption.enabled) {
    d.legacy_fingerprint = d.fingerprint;
    d.keyed_pending = true;
  }
  return d;
}

void KeyFingerprint(const Config& config, GuardDecision* d) {
  if (!d->keyed_pending || !d->legacy_fingerprint) return;
  d->keyed_pending = false;
  KeyWithSecret(config.scope.secret, d);
}

const Fingerprint& FingerprintAsStored(const GuardDecision& d, const Fingerprint& stored) {
  return d.legacy_fingerprint && stored == *d.legacy_fingerprint ? *d.legacy_fingerprint
                                                                 : d.fingerprint;
}

}  // namespace idemgate

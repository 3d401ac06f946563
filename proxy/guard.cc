// The guard: which requests are guarded, the caller's scope, the key's syntax, the fingerprint.
#include "proxy/guard.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstdint>

namespace idemgate {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

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
  return Lower(value.substr(0, space)) + " " + std::string(credential);
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

// SHA-256 and HMAC implementations fetched once per process: EVP_sha256() and EVP_Q_mac look
// the provider's implementation up again on every call (measured at ~4% of a replay).
const EVP_MD* Sha256() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

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

void AppendLengthPrefixed(EVP_MD_CTX* ctx, std::string_view part) {
  uint8_t len[8];
  uint64_t n = part.size();
  for (int i = 7; i >= 0; --i) {
    len[i] = static_cast<uint8_t>(n & 0xFF);
    n >>= 8;
  }
  EVP_DigestUpdate(ctx, len, sizeof(len));
  EVP_DigestUpdate(ctx, part.data(), part.size());
}

// Every occurrence of `name`, joined with ", "; empty when absent.
std::string JoinedHeader(const Headers& headers, std::string_view name) {
  std::string out;
  bool first = true;
  for (const Header& h : headers) {
    if (!HeaderNameEquals(h.name, name)) continue;
    if (!first) out.append(", ");
    out.append(h.value);
    first = false;
  }
  return out;
}

bool IsGuardedRoute(const Config& config, const Request& request) {
  bool method_listed = false;
  for (const std::string& m : config.idempotency.methods) {
    if (m == request.method) method_listed = true;
  }
  if (!method_listed) return false;
  if (CountHeader(request.headers, config.idempotency.header) > 0) return true;
  std::string_view path = request.Path();
  for (const std::string& prefix : config.idempotency.require_key) {
    if (path.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

GuardDecision Reject(ErrorCode code, std::string detail) {
  GuardDecision d;
  d.kind = GuardKind::kReject;
  d.error = code;
  d.detail = std::move(detail);
  return d;
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

ScopeId ComputeScopeId(std::string_view header_name, std::string_view credential,
                       std::string_view secret) {
  // Domain separation: the lower-cased header name and a NUL (never in a header name) come
  // first, so the same bytes in two different credential headers are two different scopes.
  std::string input = Lower(header_name);
  input.push_back('\0');
  input.append(NormalizeCredential(header_name, credential));
  ScopeId out{};
  if (secret.empty()) {
    unsigned int len = 0;
    EVP_Digest(input.data(), input.size(), out.data(), &len, Sha256(), nullptr);
  } else {
    HmacSha256(secret, input, out.data());
  }
  return out;
}

Fingerprint ComputeFingerprint(const Request& request,
                               const std::vector<std::string>& fingerprint_headers) {
  Fingerprint out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return out;
  EVP_DigestInit_ex(ctx, Sha256(), nullptr);
  AppendLengthPrefixed(ctx, request.method);
  AppendLengthPrefixed(ctx, request.target);
  AppendLengthPrefixed(ctx, request.body);
  for (const std::string& name : fingerprint_headers) {
    AppendLengthPrefixed(ctx, Lower(name));
    AppendLengthPrefixed(ctx, JoinedHeader(request.headers, name));
  }
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, out.data(), &len);
  EVP_MD_CTX_free(ctx);
  return out;
}

std::string FingerprintPrefix(const Fingerprint& fingerprint) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 8; ++i) {
    out.push_back(kHex[fingerprint[i] >> 4]);
    out.push_back(kHex[fingerprint[i] & 0xF]);
  }
  return out;
}

GuardDecision EvaluateGuard(const Config& config, const Request& request) {
  if (!IsGuardedRoute(config, request)) return GuardDecision{};
  const std::string& scope_header = config.scope.header;
  const std::string& key_header = config.idempotency.header;

  // S3: the credential before anything about the key.
  int credentials = CountHeader(request.headers, scope_header);
  if (credentials > 1) {
    return Reject(ErrorCode::kBadRequest, "The " + scope_header + " header was given " +
                                              std::to_string(credentials) +
                                              " times; give it once.");
  }
  const std::string* credential = FindHeader(request.headers, scope_header);
  std::string normalized =
      credential == nullptr ? std::string() : NormalizeCredential(scope_header, *credential);
  if (normalized.empty() || IsBareScheme(scope_header, normalized)) {
    return Reject(ErrorCode::kMissingCredentials,
                  "A request with an " + key_header + " needs the " + scope_header +
                      " header, because keys are scoped to the caller's credential.");
  }

  // K1-K2: present where required, then well-formed and given once.
  int keys = CountHeader(request.headers, key_header);
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
  if (!ParseIdempotencyKey(*FindHeader(request.headers, key_header), &d.key)) {
    return Reject(ErrorCode::kIdempotencyKeyInvalid,
                  "The " + key_header +
                      " must be 1 to 255 visible ASCII characters, optionally as a quoted "
                      "string.");
  }
  d.kind = GuardKind::kGuarded;
  d.scope = ComputeScopeId(scope_header, *credential, config.scope.secret);
  d.fingerprint = ComputeFingerprint(request, config.idempotency.fingerprint_headers);
  return d;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// Sealing (SPEC §13 E2): AES-256-GCM under a key derived per sealed value, synthetic salt.
//
// Sealed bytes (the body of a StoredResponse with status 0):
//   "IDGS" | format u8 (1) | key id length u8 | key id | salt[32] | tag[16] | ciphertext
// AAD = the bytes up to the key id | attempt u32 | record key length u32 | record key
// plaintext = EncodeResponse(response) (status, reason, headers, body)
// salt = HMAC-SHA-256(siv_key, AAD length u32 | AAD | plaintext), siv_key = HKDF-Expand(master,
//        "idemgate seal siv v1"); the value's key = HKDF-Expand(master, "idemgate seal key v1" |
//        salt); nonce = 12 zero bytes, used once per value key.
// Two different (identity, response) pairs share a value key only if their HMACs collide; the
// same pair seals to the same bytes (a retried Complete stays idempotent). docs/encryption.md
// has the argument.
#include "store/sealing.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace idemgate {
namespace {

constexpr std::string_view kMagic = "IDGS";
constexpr uint8_t kSealFormat = 1;
constexpr size_t kSaltBytes = 32;
constexpr size_t kTagBytes = 16;
constexpr size_t kNonceBytes = 12;
constexpr std::string_view kSivInfo = "idemgate seal siv v1";
constexpr std::string_view kKeyInfo = "idemgate seal key v1";

using Key32 = std::array<uint8_t, kSealKeyBytes>;

// One HMAC-SHA-256 context per thread, its digest set once, re-keyed by each EVP_MAC_init.
EVP_MAC_CTX* NewHmacSha256() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (ctx != nullptr && EVP_MAC_CTX_set_params(ctx, params) != 1) {
    EVP_MAC_CTX_free(ctx);
    ctx = nullptr;
  }
  return ctx;
}

EVP_MAC_CTX* ThreadMacCtx() {
  thread_local std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(NewHmacSha256(),
                                                                             &EVP_MAC_CTX_free);
  return ctx.get();
}

// One cipher context per thread, reset by each EVP_*Init_ex2.
EVP_CIPHER_CTX* ThreadCipherCtx() {
  thread_local std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(
      EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  return ctx.get();
}

const EVP_CIPHER* Aes256Gcm() {
  static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  return cipher;
}

// HMAC-SHA-256(key, parts...) into *out; false when OpenSSL fails.
bool Hmac(const uint8_t* key, std::initializer_list<std::string_view> parts, uint8_t* out) {
  EVP_MAC_CTX* ctx = ThreadMacCtx();
  if (ctx == nullptr || EVP_MAC_init(ctx, key, kSealKeyBytes, nullptr) != 1) return false;
  for (std::string_view part : parts) {
    if (EVP_MAC_update(ctx, reinterpret_cast<const uint8_t*>(part.data()), part.size()) != 1) {
      return false;
    }
  }
  size_t len = 0;
  return EVP_MAC_final(ctx, out, &len, kSealKeyBytes) == 1 && len == kSealKeyBytes;
}

// RFC 5869 HKDF-Expand for one block (L = 32): HMAC(PRK, info | 0x01). The master key is
// already uniformly random, so it serves as the PRK without an Extract step.
bool HkdfExpand(const uint8_t* prk, std::string_view info, std::string_view salt, uint8_t* out) {
  return Hmac(prk, {info, salt, std::string_view("\x01", 1)}, out);
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string_view View(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

std::string SealHeader(std::string_view key_id) {
  std::string header(kMagic);
  header.push_back(static_cast<char>(kSealFormat));
  header.push_back(static_cast<char>(key_id.size()));
  header.append(key_id);
  return header;
}

std::string Aad(std::string_view header, const SealIdentity& identity) {
  std::string aad(header);
  PutU32(&aad, identity.attempt);
  PutU32(&aad, static_cast<uint32_t>(identity.record_key.size()));
  aad.append(identity.record_key);
  return aad;
}

// The sealed body split into its parts; false when it is not the sealed format.
struct SealedParts {
  std::string_view header, key_id, salt, tag, ciphertext;
};
bool SplitSealed(std::string_view body, SealedParts* p) {
  if (body.size() < kMagic.size() + 2 || body.substr(0, kMagic.size()) != kMagic ||
      static_cast<uint8_t>(body[kMagic.size()]) != kSealFormat) {
    return false;
  }
  const size_t id_len = static_cast<uint8_t>(body[kMagic.size() + 1]);
  const size_t header_len = kMagic.size() + 2 + id_len;
  if (id_len == 0 || body.size() < header_len + kSaltBytes + kTagBytes) return false;
  p->header = body.substr(0, header_len);
  p->key_id = body.substr(kMagic.size() + 2, id_len);
  p->salt = body.substr(header_len, kSaltBytes);
  p->tag = body.substr(header_len + kSaltBytes, kTagBytes);
  p->ciphertext = body.substr(header_len + kSaltBytes + kTagBytes);
  return true;
}

// AES-256-GCM one way or the other over `in`; on open, `tag` (exactly 16 bytes) is checked, on
// seal it is written. False on any failure (open: the tag did not verify).
bool Gcm(bool seal, const uint8_t* key, std::string_view aad, std::string_view in, char* out,
         uint8_t* tag) {
  EVP_CIPHER_CTX* ctx = ThreadCipherCtx();
  static const uint8_t kNonce[kNonceBytes] = {};
  if (ctx == nullptr || Aes256Gcm() == nullptr) return false;
  int ok = seal ? EVP_EncryptInit_ex2(ctx, Aes256Gcm(), key, kNonce, nullptr)
                : EVP_DecryptInit_ex2(ctx, Aes256Gcm(), key, kNonce, nullptr);
  int len = 0;
  auto* o = reinterpret_cast<uint8_t*>(out);
  const auto* a = reinterpret_cast<const uint8_t*>(aad.data());
  const auto* i = reinterpret_cast<const uint8_t*>(in.data());
  if (ok != 1) return false;
  if (seal) {
    return EVP_EncryptUpdate(ctx, nullptr, &len, a, static_cast<int>(aad.size())) == 1 &&
           EVP_EncryptUpdate(ctx, o, &len, i, static_cast<int>(in.size())) == 1 &&
           EVP_EncryptFinal_ex(ctx, o + len, &len) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) == 1;
  }
  return EVP_DecryptUpdate(ctx, nullptr, &len, a, static_cast<int>(aad.size())) == 1 &&
         EVP_DecryptUpdate(ctx, o, &len, i, static_cast<int>(in.size())) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) == 1 &&
         EVP_DecryptFinal_ex(ctx, o + len, &len) == 1;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 64 hex digits and at most one trailing newline.
bool ParseHexKey(std::string_view text, Key32* key) {
  if (text.size() == 2 * kSealKeyBytes + 1 && text.back() == '\n') text.remove_suffix(1);
  if (text.size() != 2 * kSealKeyBytes) return false;
  for (size_t i = 0; i < kSealKeyBytes; ++i) {
    const int hi = HexValue(text[2 * i]), lo = HexValue(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*key)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

// A file systemd placed for LoadCredential=: its directory is the unit's own, read-only and
// open to the service's user alone; systemd grants that user read by an ACL on a root-owned
// file (or by ownership), so the owner and mode checks do not apply to it.
bool IsSystemdCredential(const std::string& path) {
  const char* dir = std::getenv("CREDENTIALS_DIRECTORY");
  if (dir == nullptr || *dir == '\0') return false;
  const std::string prefix = std::string(dir) + "/";
  return path.rfind(prefix, 0) == 0 && path.find("/..", prefix.size() - 1) == std::string::npos;
}

}  // namespace

SealKey::SealKey(std::string id, const Key32& master) : id_(std::move(id)), master_(master) {
  HkdfExpand(master_.data(), kSivInfo, {}, siv_key_.data());
}

SealKey::~SealKey() {
  OPENSSL_cleanse(master_.data(), master_.size());
  OPENSSL_cleanse(siv_key_.data(), siv_key_.size());
}

const SealKey* SealKeys::Find(std::string_view id) const {
  auto it = keys_.find(id);
  return it == keys_.end() ? nullptr : it->second.get();
}

std::vector<std::string> SealKeys::ids() const {
  std::vector<std::string> out;
  for (const auto& [id, key] : keys_) out.push_back(id);
  return out;
}

// Why the open file may not hold a key ("" = it may): E1's owner and mode rules.
static std::string OwnershipProblem(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (IsSystemdCredential(path)) return "";
  if (st.st_uid != geteuid()) {
    return "owned by uid " + std::to_string(st.st_uid) + ", not by the gateway's user (uid " +
           std::to_string(geteuid()) + ")";
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("mode ") + mode + " lets group or others read it; chmod 600 it";
  }
  return "";
}

bool ReadKeyFile(const std::string& path, Key32* key, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *error = "key file \"" + path + "\": cannot open: " + std::strerror(errno);
    return false;
  }
  char buf[2 * kSealKeyBytes + 2] = {};
  std::string why = OwnershipProblem(fd, path);
  ssize_t n = 0;
  if (why.empty() && (n = read(fd, buf, sizeof(buf))) < 0) {
    why = std::string("cannot read: ") + std::strerror(errno);
  } else if (why.empty() && !ParseHexKey(std::string_view(buf, static_cast<size_t>(n)), key)) {
    why = "must hold 64 hex digits (openssl rand -hex 32), optionally a newline";
  }
  OPENSSL_cleanse(buf, sizeof(buf));
  close(fd);
  if (!why.empty()) *error = "key file \"" + path + "\": " + why;
  return why.empty();
}

std::shared_ptr<const SealKeys> LoadSealKeys(const std::map<std::string, std::string>& keys,
                                             const std::string& active, std::string* error) {
  auto set = std::make_shared<SealKeys>();
  for (const auto& [id, path] : keys) {
    Key32 master{};
    const bool ok = ReadKeyFile(path, &master, error);
    if (ok) set->keys_.emplace(id, std::make_unique<SealKey>(id, master));
    OPENSSL_cleanse(master.data(), master.size());
    if (!ok) return nullptr;
  }
  if (!active.empty()) {
    set->active_ = set->Find(active);
    if (set->active_ == nullptr) {
      *error = "store.encryption.active \"" + active + "\" is not one of the listed keys";
      return nullptr;
    }
  }
  return set;
}

bool IsSealed(const StoredResponse& response) {
  SealedParts parts;
  return response.status == 0 && response.headers.empty() && response.reason.empty() &&
         SplitSealed(response.body, &parts);
}

std::string SealedKeyId(const StoredResponse& response) {
  SealedParts parts;
  if (!IsSealed(response) || !SplitSealed(response.body, &parts)) return {};
  return std::string(parts.key_id);
}

std::optional<StoredResponse> SealResponse(const SealKey& key, const SealIdentity& identity,
                                           const StoredResponse& plain) {
  std::string plaintext = EncodeResponse(plain);
  const std::string header = SealHeader(key.id());
  const std::string aad = Aad(header, identity);
  std::string aad_len;
  PutU32(&aad_len, static_cast<uint32_t>(aad.size()));
  uint8_t salt[kSaltBytes], value_key[kSealKeyBytes], tag[kTagBytes];
  StoredResponse sealed;
  sealed.body = header;
  sealed.body.resize(header.size() + kSaltBytes + kTagBytes + plaintext.size());
  char* out = sealed.body.data() + header.size() + kSaltBytes + kTagBytes;
  const bool ok = Hmac(key.siv_key(), {aad_len, aad, plaintext}, salt) &&
                  HkdfExpand(key.master(), kKeyInfo, View(salt, kSaltBytes), value_key) &&
                  Gcm(true, value_key, aad, plaintext, out, tag);
  OPENSSL_cleanse(value_key, sizeof(value_key));
  OPENSSL_cleanse(plaintext.data(), plaintext.size());
  if (!ok) return std::nullopt;
  std::memcpy(sealed.body.data() + header.size(), salt, kSaltBytes);
  std::memcpy(sealed.body.data() + header.size() + kSaltBytes, tag, kTagBytes);
  return sealed;
}

OpenResult OpenResponse(const SealKeys& keys, const SealIdentity& identity,
                        const StoredResponse& sealed, StoredResponse* out, std::string* key_id) {
  SealedParts parts;
  if (!IsSealed(sealed) || !SplitSealed(sealed.body, &parts)) return OpenResult::kRejected;
  key_id->assign(parts.key_id);
  const SealKey* key = keys.Find(parts.key_id);
  if (key == nullptr) return OpenResult::kNoKey;
  uint8_t value_key[kSealKeyBytes], tag[kTagBytes];
  std::memcpy(tag, parts.tag.data(), kTagBytes);
  std::string plaintext(parts.ciphertext.size(), '\0');
  const bool ok =
      HkdfExpand(key->master(), kKeyInfo, parts.salt, value_key) &&
      Gcm(false, value_key, Aad(parts.header, identity), parts.ciphertext, plaintext.data(), tag);
  OPENSSL_cleanse(value_key, sizeof(value_key));
  std::optional<StoredResponse> response = ok ? DecodeResponse(plaintext) : std::nullopt;
  OPENSSL_cleanse(plaintext.data(), plaintext.size());
  if (!response) return OpenResult::kRejected;
  *out = std::move(*response);
  return OpenResult::kOk;
}

}  // namespace idemgate

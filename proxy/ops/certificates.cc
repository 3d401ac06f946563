// SPDX-License-Identifier: Apache-2.0
// Reloadable listener certificates (a certificate callback over a swappable pair) and the
// certificate-expiry metric.
#include "proxy/ops/certificates.h"

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <ctime>

#include "common/log.h"
#include "proxy/ops/access_log.h"
#include "proxy/ops/gateway.h"
#include "proxy/ops/metrics.h"

namespace idemgate {
namespace {

constexpr char kExpiry[] = "idemgate_tls_certificate_expiry_timestamp_seconds";

std::string SerialHex(X509* cert) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  char* hex = bn ? BN_bn2hex(bn) : nullptr;
  std::string out = hex ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

int64_t NotAfter(X509* cert) {
  tm when{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &when) != 1) return 0;
  return static_cast<int64_t>(timegm(&when));
}

std::string PairFingerprint(X509* cert, EVP_PKEY* key) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::string out;
  if (X509_digest(cert, EVP_sha256(), md, &len) == 1) out.assign(reinterpret_cast<char*>(md), len);
  unsigned char* der = nullptr;
  int n = key ? i2d_PUBKEY(key, &der) : -1;
  if (n > 0) out.append(reinterpret_cast<char*>(der), n);
  OPENSSL_free(der);
  return out;
}

std::string ExpiryLine(const std::string& use, const std::string& file, X509* cert) {
  char* subject = X509_NAME_oneline(X509_get_subject_name(cert), nullptr, 0);
  std::string line = std::string(kExpiry) + "{use=\"" + use + "\",file=\"" + LabelEscape(file) +
                     "\",serial=\"" + SerialHex(cert) + "\",subject=\"" +
                     LabelEscape(subject ? subject : "") + "\"} " + std::to_string(NotAfter(cert)) +
                     "\n";
  OPENSSL_free(subject);
  return line;
}

std::string Header() {
  return std::string("# HELP ") + kExpiry +
         " When each certificate in use stops being valid (notAfter), Unix seconds.\n# TYPE " +
         kExpiry + " gauge\n";
}

}  // namespace

bool ServerCertificates::Install(SSL_CTX* ctx, const std::vector<std::string>& files,
                                 std::string* error) {
  files_ = files;
  std::shared_ptr<const Pairs> pairs = LoadAll(error);
  if (!pairs) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = std::move(pairs);
  }
  SSL_CTX_set_cert_cb(ctx, &ServerCertificates::OnCertificate, this);
  return true;
}

std::shared_ptr<const ServerCertificates::Pairs> ServerCertificates::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::shared_ptr<const ServerCertificates::Pair> ServerCertificates::Load(
    const std::string& cert_file, const std::string& key_file, std::string* error) {
  auto pair = std::make_shared<Pair>();
  pair->holder = MakeServerTlsContext(cert_file, key_file, error);  // loads and checks the pair
  if (!pair->holder) {
    if (error->find("mismatch") != std::string::npos) {  // OpenSSL: "key values mismatch"
      *error = "the key '" + key_file + "' does not match the certificate '" + cert_file + "' (" +
               *error + ")";
    }
    return nullptr;
  }
  X509* cert = SSL_CTX_get0_certificate(pair->holder.get());
  EVP_PKEY* key = SSL_CTX_get0_privatekey(pair->holder.get());
  if (cert == nullptr || key == nullptr) {
    *error = "no certificate or key in " + cert_file + " / " + key_file;
    return nullptr;
  }
  pair->serial = SerialHex(cert);
  pair->not_after = NotAfter(cert);
  pair->fingerprint = PairFingerprint(cert, key);
  return pair;
}

std::shared_ptr<const ServerCertificates::Pairs> ServerCertificates::LoadAll(
    std::string* error) const {
  auto pairs = std::make_shared<Pairs>();
  for (size_t i = 0; i + 1 < files_.size(); i += 2) {
    std::shared_ptr<const Pair> pair = Load(files_[i], files_[i + 1], error);
    if (!pair) return nullptr;
    pairs->push_back(std::move(pair));
  }
  return pairs;
}

// On a worker's thread, once per handshake: the pair for the client's SNI host (the first whose
// certificate names it, wildcards as RFC 6125 has them), else the first; with its chain.
int ServerCertificates::OnCertificate(SSL* ssl, void* arg) {
  std::shared_ptr<const Pairs> pairs = static_cast<ServerCertificates*>(arg)->Current();
  if (!pairs || pairs->empty()) return 0;
  SSL_CTX* holder = pairs->front()->holder.get();
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (sni != nullptr && pairs->size() > 1 &&
      X509_check_host(SSL_CTX_get0_certificate(holder), sni, 0, 0, nullptr) != 1) {
    for (size_t i = 1; i < pairs->size(); ++i) {
      SSL_CTX* other = (*pairs)[i]->holder.get();
      if (X509_check_host(SSL_CTX_get0_certificate(other), sni, 0, 0, nullptr) == 1) {
        holder = other;
        break;
      }
    }
  }
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(holder, &chain);
  return SSL_use_cert_and_key(ssl, SSL_CTX_get0_certificate(holder),
                              SSL_CTX_get0_privatekey(holder), chain, 1) == 1
             ? 1
             : 0;
}

ServerCertificates::Outcome ServerCertificates::Reload(std::string* detail) {
  std::string error;
  std::shared_ptr<const Pairs> next = LoadAll(&error);
  if (!next) {
    *detail = error;
    return Outcome::kRefused;
  }
  std::shared_ptr<const Pairs> old = Current();
  std::string changes;
  for (size_t i = 0; i < next->size(); ++i) {
    const Pair* was = old && i < old->size() ? (*old)[i].get() : nullptr;
    const Pair& now = *(*next)[i];
    if (was != nullptr && was->fingerprint == now.fingerprint) continue;
    changes += (changes.empty() ? "" : "; ") +
               (next->size() > 1 ? files_[2 * i] + ": " : std::string()) + "serial " +
               (was ? was->serial : std::string("none")) + " -> " + now.serial + ", expires " +
               FormatRfc3339(now.not_after * 1000, false);
  }
  if (changes.empty()) return Outcome::kUnchanged;
  *detail = changes;
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(next);  // handshakes in progress keep the pairs they took
  return Outcome::kReplaced;
}

std::string ServerCertificates::RenderMetrics() const {
  std::shared_ptr<const Pairs> pairs = Current();
  if (!pairs || pairs->empty()) return "";
  std::string out = Header();
  for (size_t i = 0; i < pairs->size(); ++i) {
    out +=
        ExpiryLine("listener", files_[2 * i], SSL_CTX_get0_certificate((*pairs)[i]->holder.get()));
  }
  return out;
}

namespace {

// (key, CA file, context) of every running https upstream with a CA file of its own.
struct UpstreamCa {
  std::string key;
  std::string file;
  SSL_CTX* ctx;
};
std::vector<UpstreamCa> UpstreamCas(const Gateway& gateway, const Config& running) {
  std::vector<UpstreamCa> out;
  if (gateway.upstream_tls != nullptr && !running.upstream.ca_file.empty()) {
    out.push_back({"upstream.ca_file", running.upstream.ca_file, gateway.upstream_tls});
  }
  for (const auto& [name, ctx] : gateway.upstream_group_tls) {
    auto group = running.upstream_groups.find(name);
    if (group == running.upstream_groups.end() || group->second.ca_file.empty()) continue;
    out.push_back({"upstreams." + name + ".ca_file", group->second.ca_file, ctx});
  }
  return out;
}

}  // namespace

std::string VerifyUpstreamCas(const Gateway& gateway, const Config& running) {
  for (const UpstreamCa& ca : UpstreamCas(gateway, running)) {
    std::string error;
    if (!MakeClientTlsContext(ca.file, &error)) return ca.key + ": " + error;
  }
  return "";
}

std::string ReloadUpstreamCas(const Gateway& gateway, const Config& running) {
  std::string changes;
  for (const UpstreamCa& ca : UpstreamCas(gateway, running)) {
    std::string error;
    const TlsReload outcome = ReloadClientTls(ca.ctx, ca.file, &error);
    if (outcome == TlsReload::kReplaced) {
      changes += (changes.empty() ? "" : ", ") + ca.key + " reloaded";
    } else if (outcome == TlsReload::kRefused) {  // changed since VerifyUpstreamCas read it
      LogF(LogLevel::kError, "reload", "%s: %s; keeping the running one", ca.key.c_str(),
           error.c_str());
    }
  }
  return changes;
}

std::string RenderCaExpiryMetrics(const Config& config) {
  std::vector<std::pair<std::string, std::string>> files;  // (use, path)
  if (config.upstream.tls && !config.upstream.ca_file.empty()) {
    files.emplace_back("upstream_ca", config.upstream.ca_file);
  }
  for (const auto& [name, group] : config.upstream_groups) {
    if (group.tls && !group.ca_file.empty()) files.emplace_back("upstream_ca", group.ca_file);
  }
  std::string out;
  for (const auto& [use, path] : files) {
    FILE* f = fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    while (X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr)) {
      out += ExpiryLine(use, path, cert);
      X509_free(cert);
    }
    ERR_clear_error();  // the end of the file is reported as an error
    fclose(f);
  }
  return out;
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// The listener's certificate and key, replaced while the gateway serves (SIGHUP): the files are
// read again, verified (they load, the key matches the certificate), and only then used for new
// handshakes; a pair that fails is refused and the running one kept. Also the expiry time of
// each certificate in use (the listener's, and those of the upstream CA files), for /metrics.
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "conf/config.h"
#include "proxy/net/tls.h"

namespace idemgate {

class ServerCertificates {
 public:
  enum class Outcome { kUnchanged, kReplaced, kRefused };

  // Loads the pair and installs a certificate callback on `ctx` (the listener's context, shared
  // by every worker) that hands each new handshake the current pair. False (and *error) when
  // the files do not load or match.
  bool Install(SSL_CTX* ctx, const std::string& cert_file, const std::string& key_file,
               std::string* error);
  // Reads the files again. kReplaced (and *detail: the old and new serial and expiry) when the
  // certificate changed and verified; kRefused (and *detail: why) when the pair does not load or
  // match, the running pair kept; kUnchanged when the same certificate and key were read.
  Outcome Reload(std::string* detail);

  // Expiry series of the listener's certificate (one line), "" when none is installed.
  std::string RenderMetrics() const;

 private:
  struct Pair {
    SslCtxPtr holder;  // a context built from the files: owns the certificate, chain and key
    std::string serial;
    std::string fingerprint;  // SHA-256 of the certificate and the key's public part
    int64_t not_after = 0;    // Unix seconds
  };
  static int OnCertificate(SSL* ssl, void* arg);
  std::shared_ptr<const Pair> Load(std::string* error) const;
  std::shared_ptr<const Pair> Current() const;

  std::string cert_file_;
  std::string key_file_;
  mutable std::mutex mu_;
  std::shared_ptr<const Pair> current_;  // guarded by mu_
};

// Expiry series for the certificates in the upstream CA files of `config` (upstream.ca_file and
// every https group's), read from the files now: one line per certificate.
std::string RenderCaExpiryMetrics(const Config& config);

}  // namespace idemgate

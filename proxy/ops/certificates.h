// SPDX-License-Identifier: Apache-2.0
// The listener's certificates and keys, replaced while the gateway serves (SIGHUP): the files
// are read again, verified (they load, each key matches its certificate), and only then used for
// new handshakes; a pair that fails is refused and every running one kept. With several pairs
// ([[listen.certificates]]) each handshake gets the first whose certificate names the client's
// SNI host, else the first. Also the expiry time of each certificate in use (the listener's, and
// those of the upstream CA files), for /metrics.
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

  // Loads the pairs (`files`: cert, key, cert, key, ...; the first pair is the default) and
  // installs a certificate callback on `ctx` (the listener's context, shared by every worker)
  // that hands each new handshake its current pair. False (and *error) when a pair does not load
  // or match.
  bool Install(SSL_CTX* ctx, const std::vector<std::string>& files, std::string* error);
  // Reads the files again. kReplaced (and *detail: for each changed certificate its file, the old
  // and new serial and expiry) when some changed and all verified; kRefused (and *detail: why)
  // when a pair does not load or match, every running pair kept; kUnchanged when the same
  // certificates and keys were read.
  Outcome Reload(std::string* detail);

  // Expiry series of the listener's certificates (one line each), "" when none is installed.
  std::string RenderMetrics() const;

 private:
  struct Pair {
    SslCtxPtr holder;  // a context built from the files: owns the certificate, chain and key
    std::string serial;
    std::string fingerprint;  // SHA-256 of the certificate and the key's public part
    int64_t not_after = 0;    // Unix seconds
  };
  using Pairs = std::vector<std::shared_ptr<const Pair>>;  // as files_, pair by pair
  static int OnCertificate(SSL* ssl, void* arg);
  static std::shared_ptr<const Pair> Load(const std::string& cert_file, const std::string& key_file,
                                          std::string* error);
  std::shared_ptr<const Pairs> LoadAll(std::string* error) const;
  std::shared_ptr<const Pairs> Current() const;

  std::vector<std::string> files_;  // cert, key, cert, key, ...
  mutable std::mutex mu_;
  std::shared_ptr<const Pairs> current_;  // guarded by mu_
};

struct Gateway;

// SIGHUP for the CA files of the running https upstreams (upstream.ca_file, each https group's;
// the paths are restart-only, so those of `running`). VerifyUpstreamCas: "" when every file
// loads, else why (naming the key); nothing is replaced. ReloadUpstreamCas, after it: each file
// whose bytes changed is used for new connections (ReloadClientTls); returns what changed
// ("upstream.ca_file reloaded, upstreams.NAME.ca_file reloaded") or "".
std::string VerifyUpstreamCas(const Gateway& gateway, const Config& running);
std::string ReloadUpstreamCas(const Gateway& gateway, const Config& running);

// Expiry series for the certificates in the upstream CA files of `config` (upstream.ca_file and
// every https group's), read from the files now: one line per certificate.
std::string RenderCaExpiryMetrics(const Config& config);

}  // namespace idemgate

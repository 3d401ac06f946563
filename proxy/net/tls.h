// SPDX-License-Identifier: Apache-2.0
// TLS contexts: client-facing (certificate + key, TLS 1.2+) and upstream (verification against
// the system CA store or a CA file, SNI and hostname checks). OpenSSL 3.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

namespace idemgate {

struct SslCtxDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;

// For the client-facing listener. nullptr (and *error) when the files do not load or match.
SslCtxPtr MakeServerTlsContext(const std::string& cert_file, const std::string& key_file,
                               std::string* error);

// ALPN on the client-facing context (SPEC §14 H1): "h2" (when `http2`) and "http/1.1", in the
// server's order of preference; a client that offers neither gets no ALPN, and HTTP/1.1.
void OfferAlpn(SSL_CTX* ctx, bool http2);

// For https upstreams: peer verification on, TLS 1.2+. `ca_file` empty = system CA store.
SslCtxPtr MakeClientTlsContext(const std::string& ca_file, std::string* error);

// A new SSL for one upstream connection: SNI and hostname (or IP address) verification set.
// On a context ReloadClientTls replaced, the SSL is made from the replacement.
SSL* NewUpstreamSsl(SSL_CTX* ctx, const std::string& host);

// SIGHUP for an https upstream's CA file: a new context is built from `ca_file` (the file
// loads), and only then do new connections made on `ctx` (MakeClientTlsContext's, whose pointer
// the pools keep) use it; connections open keep theirs. kRefused (and *error) leaves the running
// one; kUnchanged when the file's bytes are those last loaded.
enum class TlsReload { kUnchanged, kReplaced, kRefused };
TlsReload ReloadClientTls(SSL_CTX* ctx, const std::string& ca_file, std::string* error);

// The last OpenSSL error as text (and clears the queue).
std::string OpenSslError();

// Why an upstream TLS handshake on `ssl` with `host` failed: the certificate check's reason
// ("TLS certificate verification failed for HOST: hostname mismatch"), else `openssl_error` (an
// ERR_ code, 0 for none) as text. Empty when neither says anything (the failure was not TLS's).
std::string DescribeTlsFailure(SSL* ssl, unsigned long openssl_error, const std::string& host);

// A blocking TLS handshake with an https upstream over the connected socket `fd` (readiness
// probe: the admin thread, never a loop), verified like the data plane's (NewUpstreamSsl), then
// closed with close_notify. Empty on success, else why (verification, handshake, timeout).
std::string ProbeTlsHandshake(int fd, SSL_CTX* ctx, const std::string& host, int timeout_ms);

}  // namespace idemgate

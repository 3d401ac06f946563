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

// For https upstreams: peer verification on, TLS 1.2+. `ca_file` empty = system CA store.
SslCtxPtr MakeClientTlsContext(const std::string& ca_file, std::string* error);

// A new SSL for one upstream connection: SNI and hostname (or IP address) verification set.
SSL* NewUpstreamSsl(SSL_CTX* ctx, const std::string& host);

// The last OpenSSL error as text (and clears the queue).
std::string OpenSslError();

}  // namespace idemgate

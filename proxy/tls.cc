// TLS contexts for the client side and the upstream side.
#include "proxy/tls.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>

namespace idemgate {

std::string OpenSslError() {
  unsigned long code = ERR_get_error();
  std::string text;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    text = buf;
  }
  ERR_clear_error();
  return text.empty() ? "unknown TLS error" : text;
}

SslCtxPtr MakeServerTlsContext(const std::string& cert_file, const std::string& key_file,
                               std::string* error) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx || !SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION)) {
    *error = "cannot create a TLS context: " + OpenSslError();
    return nullptr;
  }
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) != 1) {
    *error = "listen.tls_cert '" + cert_file + "': " + OpenSslError();
    return nullptr;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = "listen.tls_key '" + key_file + "': " + OpenSslError();
    return nullptr;
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    *error = "listen.tls_key does not match listen.tls_cert: " + OpenSslError();
    return nullptr;
  }
  return ctx;
}

SslCtxPtr MakeClientTlsContext(const std::string& ca_file, std::string* error) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || !SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION)) {
    *error = "cannot create a TLS context: " + OpenSslError();
    return nullptr;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  int ok = ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx.get())
                           : SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr);
  if (ok != 1) {
    *error = (ca_file.empty() ? std::string("cannot load the system CA store")
                              : "upstream.ca_file '" + ca_file + "'") +
             ": " + OpenSslError();
    return nullptr;
  }
  return ctx;
}

SSL* NewUpstreamSsl(SSL_CTX* ctx, const std::string& host) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return nullptr;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  // An IP address is checked against the certificate's IP SANs; a name against its DNS names
  // (and sent as SNI).
  if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
    ERR_clear_error();
    SSL_set_tlsext_host_name(ssl, host.c_str());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set1_host(ssl, host.c_str());
  }
  return ssl;
}

}  // namespace idemgate

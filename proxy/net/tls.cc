// SPDX-License-Identifier: Apache-2.0
// TLS contexts for the client side and the upstream side.
#include "proxy/net/tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <mutex>

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
  // An idle connection gives its record buffers back (about 12 KiB each), as nginx does.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_RELEASE_BUFFERS);
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

namespace {

int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void* arg) {
  static const unsigned char kWithH2[] = "\x02h2\x08http/1.1";
  static const unsigned char kH1Only[] = "\x08http/1.1";
  const bool http2 = arg != nullptr;
  const unsigned char* ours = http2 ? kWithH2 : kH1Only;
  const unsigned int ours_len = http2 ? sizeof(kWithH2) - 1 : sizeof(kH1Only) - 1;
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, ours, ours_len, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // nothing in common: no ALPN, the handshake goes on
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

void OfferAlpn(SSL_CTX* ctx, bool http2) {
  // Any non-null pointer says "h2 on"; the context outlives every connection.
  static int on = 1;
  SSL_CTX_set_alpn_select_cb(ctx, SelectAlpn, http2 ? &on : nullptr);
}

namespace {

// What ReloadClientTls hangs on a context: its replacement (one reference held here) and the
// SHA-256 of the CA file it was built from.
struct ClientTlsSwap {
  std::mutex mu;
  SSL_CTX* current = nullptr;
  std::string file_digest;
};

void FreeSwap(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  auto* swap = static_cast<ClientTlsSwap*>(ptr);
  if (swap == nullptr) return;
  SSL_CTX_free(swap->current);  // null-safe
  delete swap;
}

int SwapIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &FreeSwap);
  return index;
}

std::string FileDigest(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  EVP_DigestInit_ex(md, EVP_sha256(), nullptr);
  char buf[8192];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) EVP_DigestUpdate(md, buf, n);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(md, out, &len);
  EVP_MD_CTX_free(md);
  fclose(f);
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

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
  if (!ca_file.empty()) {  // what a reload compares the file with (ReloadClientTls)
    auto* swap = new ClientTlsSwap;
    swap->file_digest = FileDigest(ca_file);
    SSL_CTX_set_ex_data(ctx.get(), SwapIndex(), swap);
  }
  return ctx;
}

TlsReload ReloadClientTls(SSL_CTX* ctx, const std::string& ca_file, std::string* error) {
  auto* swap = static_cast<ClientTlsSwap*>(SSL_CTX_get_ex_data(ctx, SwapIndex()));
  if (swap == nullptr || ca_file.empty()) return TlsReload::kUnchanged;  // the system CA store
  const std::string digest = FileDigest(ca_file);
  {
    std::lock_guard<std::mutex> lock(swap->mu);
    if (!digest.empty() && digest == swap->file_digest) return TlsReload::kUnchanged;
  }
  SslCtxPtr next = MakeClientTlsContext(ca_file, error);  // loads the file: verified first
  if (!next) return TlsReload::kRefused;
  if (STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(SSL_CTX_get_cert_store(next.get()));
      !ca_file.empty() && (objects == nullptr || sk_X509_OBJECT_num(objects) == 0)) {
    *error = "upstream.ca_file '" + ca_file + "': no certificate in it";
    return TlsReload::kRefused;
  }
  std::lock_guard<std::mutex> lock(swap->mu);
  SSL_CTX_free(swap->current);
  swap->current = next.release();
  swap->file_digest = digest;
  return TlsReload::kReplaced;
}

SSL* NewUpstreamSsl(SSL_CTX* ctx, const std::string& host) {
  SSL_CTX* held = nullptr;  // the replacement, if ReloadClientTls made one (a reference of ours)
  if (auto* swap = static_cast<ClientTlsSwap*>(SSL_CTX_get_ex_data(ctx, SwapIndex()))) {
    std::lock_guard<std::mutex> lock(swap->mu);
    if (swap->current != nullptr && SSL_CTX_up_ref(swap->current) == 1) held = swap->current;
  }
  SSL* ssl = SSL_new(held != nullptr ? held : ctx);  // the SSL holds its own reference
  SSL_CTX_free(held);
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

std::string DescribeTlsFailure(SSL* ssl, unsigned long openssl_error, const std::string& host) {
  long verify = ssl != nullptr ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (verify != X509_V_OK) {
    return "TLS certificate verification failed for " + host + ": " +
           X509_verify_cert_error_string(verify);
  }
  if (openssl_error == 0) return {};
  char buf[256];
  ERR_error_string_n(openssl_error, buf, sizeof(buf));
  return std::string("TLS handshake failed: ") + buf;
}

std::string ProbeTlsHandshake(int fd, SSL_CTX* ctx, const std::string& host, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  ERR_clear_error();
  SSL* ssl = NewUpstreamSsl(ctx, host);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    if (ssl != nullptr) SSL_free(ssl);
    return "TLS setup failed: " + OpenSslError();
  }
  std::string error;
  for (;;) {
    int rc = SSL_connect(ssl);
    if (rc == 1) break;
    int want = SSL_get_error(ssl, rc);
    if (want != SSL_ERROR_WANT_READ && want != SSL_ERROR_WANT_WRITE) {
      error = DescribeTlsFailure(ssl, ERR_peek_last_error(), host);
      if (error.empty()) error = "TLS handshake failed: the upstream closed the connection";
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, static_cast<short>(want == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      error = "no TLS handshake within " + std::to_string(timeout_ms) + "ms";
      break;
    }
  }
  if (error.empty()) SSL_shutdown(ssl);  // close_notify; the answer is not awaited
  ERR_clear_error();
  SSL_free(ssl);
  return error;
}

}  // namespace idemgate

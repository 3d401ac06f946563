// SPDX-License-Identifier: Apache-2.0
// TLS test tools: a throwaway PKI made at test time with the openssl CLI (no key is committed),
// and curl runs as child processes, for tests of the gateway's TLS listener and https upstreams.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/http_text.h"
#include "tests/support/temp_dir.h"

namespace idemgate::test {

// The full path of `name` found on $PATH (execve needs one), or "" when absent.
std::string FindProgram(std::string_view name);

// A program run to completion: its exit code (-1 when it did not exit by itself within the
// timeout, or could not start) and its stdout+stderr.
struct ProgramResult {
  int exit_code = -1;
  std::string output;
};
ProgramResult RunProgram(const std::string& binary, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));

// PEM files of a certificate and its private key.
struct CertFiles {
  std::string cert;
  std::string key;
};

// A self-signed CA (P-256, CA:TRUE) written to dir/NAME.pem and dir/NAME.key. nullopt (and the
// openssl output in *error) on failure.
std::optional<CertFiles> MakeTestCa(const TempDir& dir, const std::string& name,
                                    std::string* error);

// A server certificate signed by `ca`, subject CN=`cn`, subjectAltName `san` (e.g.
// "DNS:localhost,IP:127.0.0.1"), written to dir/NAME.pem and dir/NAME.key.
std::optional<CertFiles> MakeTestServerCert(const TempDir& dir, const std::string& name,
                                            const CertFiles& ca, const std::string& cn,
                                            const std::string& san, std::string* error);

// One curl run: exit code (0 = a response arrived; 35 = handshake failed; 60 = the peer's
// certificate did not verify), and the last response's status, headers and body.
struct CurlResult {
  int exit_code = -1;
  int status = 0;
  HeaderList headers;
  std::string body;
  std::string output;  // curl's own messages (stderr)

  std::optional<std::string> Header(std::string_view name) const {
    return FindHeader(headers, name);
  }
};

// Runs `curl -sS -D <file> -o <file> ARGS...` with its files in `dir`.
CurlResult RunCurl(const TempDir& dir, const std::vector<std::string>& args);

}  // namespace idemgate::test

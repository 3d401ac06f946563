// SPDX-License-Identifier: Apache-2.0
// TLS test tools: the openssl CLI for a throwaway PKI, curl as a TLS client (see tls_tools.h).
#include "tests/support/tls_tools.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "tests/support/gateway_process.h"

namespace idemgate::test {

std::string FindProgram(std::string_view name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + std::string(name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

ProgramResult RunProgram(const std::string& binary, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout) {
  ProgramResult result;
  GatewayProcess process;
  if (!process.Start(binary, args)) {
    result.output = process.error();
    return result;
  }
  std::optional<ExitStatus> status = process.Wait(timeout);
  result.output = process.log();
  if (status && status->exited()) result.exit_code = status->code();
  return result;
}

namespace {

bool RunOpenssl(const std::vector<std::string>& args, std::string* error) {
  static const std::string openssl = FindProgram("openssl");
  ProgramResult r = RunProgram(openssl, args);
  if (r.exit_code == 0) return true;
  if (error != nullptr) *error = "openssl exit " + std::to_string(r.exit_code) + ": " + r.output;
  return false;
}

const std::vector<std::string> kEcKey = {"-newkey", "ec", "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1", "-nodes"};

}  // namespace

std::optional<CertFiles> MakeTestCa(const TempDir& dir, const std::string& name,
                                    std::string* error) {
  CertFiles ca{dir.Path(name + ".pem"), dir.Path(name + ".key")};
  std::vector<std::string> args = {"req", "-x509"};
  args.insert(args.end(), kEcKey.begin(), kEcKey.end());
  args.insert(args.end(),
              {"-keyout", ca.key, "-out", ca.cert, "-days", "2", "-subj",
               "/CN=idemgate test " + name, "-addext", "basicConstraints=critical,CA:TRUE",
               "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
  if (!RunOpenssl(args, error)) return std::nullopt;
  return ca;
}

std::optional<CertFiles> MakeTestServerCert(const TempDir& dir, const std::string& name,
                                            const CertFiles& ca, const std::string& cn,
                                            const std::string& san, std::string* error) {
  CertFiles leaf{dir.Path(name + ".pem"), dir.Path(name + ".key")};
  std::string csr = dir.Path(name + ".csr");
  std::vector<std::string> req = {"req", "-new"};
  req.insert(req.end(), kEcKey.begin(), kEcKey.end());
  req.insert(req.end(), {"-keyout", leaf.key, "-out", csr, "-subj", "/CN=" + cn});
  if (!RunOpenssl(req, error)) return std::nullopt;
  std::string ext = dir.WriteFile(name + ".ext", "subjectAltName=" + san +
                                                     "\nbasicConstraints=CA:FALSE\n"
                                                     "extendedKeyUsage=serverAuth\n");
  static std::atomic<int> serial{0x1000};
  if (!RunOpenssl({"x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-set_serial",
                   std::to_string(serial++), "-days", "2", "-out", leaf.cert, "-extfile", ext},
                  error)) {
    return std::nullopt;
  }
  return leaf;
}

CurlResult RunCurl(const TempDir& dir, const std::vector<std::string>& args) {
  static std::atomic<int> counter{0};
  std::string tag = "curl-" + std::to_string(counter++);
  std::string head_file = dir.Path(tag + ".head"), body_file = dir.Path(tag + ".body");
  std::vector<std::string> all = {"-sS", "-D", head_file, "-o", body_file};
  all.insert(all.end(), args.begin(), args.end());
  static const std::string curl = FindProgram("curl");
  ProgramResult r = RunProgram(curl, all);
  CurlResult result;
  result.exit_code = r.exit_code;
  result.output = r.output;
  result.body = dir.ReadFile(tag + ".body");
  // The last response in the dump (after any 1xx): "HTTP/1.1 201 Created\r\nName: v\r\n...".
  std::string heads = dir.ReadFile(tag + ".head");
  size_t start = heads.rfind("HTTP/");
  if (start == std::string::npos) return result;
  std::string_view block(heads);
  block.remove_prefix(start);
  size_t end = block.find("\r\n\r\n");
  if (end != std::string_view::npos) block = block.substr(0, end);
  size_t line_end = block.find("\r\n");
  std::string_view status_line = block.substr(0, line_end);
  size_t sp = status_line.find(' ');
  if (sp != std::string_view::npos)
    result.status = std::atoi(std::string(status_line.substr(sp + 1, 3)).c_str());
  if (line_end != std::string_view::npos)
    ParseHeaderLines(block.substr(line_end + 2), &result.headers);
  return result;
}

}  // namespace idemgate::test

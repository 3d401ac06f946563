// SPDX-License-Identifier: Apache-2.0
#include "proxy/ops/ops_metrics.h"

#include <dirent.h>
#include <openssl/evp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/hex.h"
#include "proxy/ops/build_info.h"

namespace idemgate {
namespace {

double NowSeconds() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() / 1000.0;
}

// Set when the binary starts (static initialization), for process_start_time_seconds.
const double kProcessStart = NowSeconds();

void Gauge(std::string* out, const char* name, const char* type, const char* help,
           const std::string& labels, double value) {
  char line[512];
  snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s%s%s%s %.17g\n", name, help, name,
           type, name, labels.empty() ? "" : "{", labels.c_str(), labels.empty() ? "" : "}", value);
  out->append(line);
}

std::string LabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out.append("\\n");
      continue;
    }
    out.push_back(c);
  }
  return out;
}

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory's own descriptor
}

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string ConfigFileHash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::string text = bytes.str();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr) != 1) return "";
  return LowerHex(md, std::min(len, 8u));
}

void ReloadStats::ConfigLoaded(const std::string& path) {
  std::string hash = ConfigFileHash(path);
  std::lock_guard<std::mutex> lock(mu_);
  hash_ = hash;
  loaded_at_s_ = NowSeconds();
}

void ReloadStats::ReloadSucceeded(const std::string& path) {
  successes_.fetch_add(1, std::memory_order_relaxed);
  last_ok_ = true;
  ConfigLoaded(path);
}

std::string ReloadStats::Render() const {
  std::string out;
  out.append(
      "# HELP idemgate_config_reloads_total SIGHUP reloads by result (failed: the running config "
      "was kept).\n# TYPE idemgate_config_reloads_total counter\n");
  out.append("idemgate_config_reloads_total{result=\"success\"} " +
             std::to_string(successes_.load()) + "\n");
  out.append("idemgate_config_reloads_total{result=\"failure\"} " +
             std::to_string(failures_.load()) + "\n");
  Gauge(&out, "idemgate_config_last_reload_successful", "gauge",
        "1 when the last reload (or the start) loaded the file, 0 when it was refused.", "",
        last_ok_ ? 1 : 0);
  std::lock_guard<std::mutex> lock(mu_);
  Gauge(&out, "idemgate_config_info", "gauge",
        "The running config: hash = the first 16 hex digits of the file's SHA-256.",
        "hash=\"" + hash_ + "\"", 1);
  Gauge(&out, "idemgate_config_loaded_timestamp_seconds", "gauge",
        "When the running config was loaded (Unix time).", "", loaded_at_s_);
  return out;
}

std::string RenderProcessMetrics() {
  const BuildInfo& b = GetBuildInfo();
  std::string out;
  Gauge(&out, "idemgate_build_info", "gauge", "The build: version, commit and library versions.",
        "version=\"" + LabelValue(b.version) + "\",commit=\"" + LabelValue(b.commit) +
            "\",libevent=\"" + LabelValue(b.libevent) + "\",openssl=\"" + LabelValue(b.openssl) +
            "\",rocksdb=\"" + LabelValue(b.rocksdb) + "\"",
        1);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  double cpu = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
               (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  Gauge(&out, "process_cpu_seconds_total", "counter", "User and system CPU time spent.", "", cpu);
  Gauge(&out, "process_resident_memory_bytes", "gauge", "Resident memory size.", "",
        static_cast<double>(ResidentBytes()));
  Gauge(&out, "process_open_fds", "gauge", "Open file descriptors.", "", CountOpenFds());
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  Gauge(&out, "process_max_fds", "gauge", "The open file descriptor limit.", "",
        static_cast<double>(nofile.rlim_cur));
  Gauge(&out, "process_start_time_seconds", "gauge", "When the process started (Unix time).", "",
        kProcessStart);
  return out;
}

}  // namespace idemgate

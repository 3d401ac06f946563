// Metrics about the process rather than the traffic: idemgate_build_info, the standard process_*
// series (CPU, RSS, descriptors, start time) and the config reloads (count by result, the loaded
// file's hash and time). Appended to /metrics (Metrics::SetExtraSource).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace idemgate {

// What SIGHUP did, and which config is running. Thread-safe.
class ReloadStats {
 public:
  // The config the process runs now: its file's SHA-256 (hex prefix) and when it was loaded.
  void ConfigLoaded(const std::string& path);
  void ReloadFailed() {
    failures_.fetch_add(1, std::memory_order_relaxed);
    last_ok_ = false;
  }
  void ReloadSucceeded(const std::string& path);

  std::string Render() const;  // Prometheus text

 private:
  std::atomic<uint64_t> successes_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<bool> last_ok_{true};
  mutable std::mutex mu_;
  std::string hash_;        // guarded by mu_
  double loaded_at_s_ = 0;  // guarded by mu_
};

// SHA-256 of the file's bytes, the first 16 hex digits; "" when it cannot be read.
std::string ConfigFileHash(const std::string& path);

// idemgate_build_info and process_* (from /proc/self and getrusage).
std::string RenderProcessMetrics();

}  // namespace idemgate

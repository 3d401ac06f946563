// The access log: one JSON line per exchange, buffered in memory and written by a background
// thread so the loops never wait on disk; reopened on SIGHUP for log rotation. The thread writes
// every flush interval (or when the buffer reaches the flush size), not once per line: lines
// still buffered are lost on kill -9, never on a clean shutdown or a reopen.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "proxy/exchange/report_types.h"

namespace idemgate {

// {"time":...,"method":...} without the trailing newline.
std::string FormatAccessLine(const AccessEntry& entry);
// The same, appended to *out (a buffer the caller reuses: no allocation per line).
void AppendAccessLine(const AccessEntry& entry, std::string* out);
// RFC 3339 UTC: "2024-05-01T12:00:00Z", or with milliseconds "2024-05-01T12:00:00.123Z".
std::string FormatRfc3339(int64_t unix_ms, bool millis);

class AccessLog {
 public:
  static constexpr size_t kDefaultBufferBytes = 4 << 20;
  static constexpr size_t kFlushBytes = 64 << 10;  // write early once this much is queued
  static constexpr std::chrono::milliseconds kDefaultFlushInterval{100};

  // `destination` is "stdout" or a file path (appended to, created 0640). Null, with *error,
  // when the file cannot be opened.
  static std::unique_ptr<AccessLog> Open(
      const std::string& destination, std::string* error,
      size_t max_buffer_bytes = kDefaultBufferBytes,
      std::chrono::milliseconds flush_interval = kDefaultFlushInterval);
  ~AccessLog();  // Close()
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Thread-safe, never waits on disk nor wakes the writer per line: queues `line` plus a newline,
  // or drops it (counted) when the buffer is full.
  void Write(std::string_view line);
  // Thread-safe: lines queued before this call go to the old file, later ones to a file newly
  // opened at the same path. Nothing for stdout.
  void Reopen();
  // Writes everything queued, then stops the writer thread. Idempotent.
  void Close();

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t reopens() const { return reopens_.load(std::memory_order_relaxed); }
  // write() calls made so far (a batch of lines each, under load).
  uint64_t writes() const { return writes_.load(std::memory_order_relaxed); }

 private:
  AccessLog(std::string path, int fd, size_t max_buffer_bytes,
            std::chrono::milliseconds flush_interval);
  void Run();
  void WriteOut(std::string_view bytes);
  void DoReopen();

  const std::string path_;  // empty for stdout
  int fd_;                  // writer thread only (after construction)
  const size_t max_buffer_bytes_;
  const size_t flush_bytes_;
  const std::chrono::milliseconds flush_interval_;
  std::thread writer_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::string buffer_;               // guarded by mu_
  std::optional<size_t> reopen_at_;  // guarded by mu_: buffer_ offset of a pending reopen
  bool stop_ = false;                // guarded by mu_
  bool idle_ = false;                // guarded by mu_: the writer sleeps untimed (nothing queued)
  bool write_failed_ = false;        // writer thread only
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> reopens_{0};
  std::atomic<uint64_t> writes_{0};
};

}  // namespace idemgate

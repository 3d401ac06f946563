// SPDX-License-Identifier: Apache-2.0
// The access log: JSON line formatting, and a buffered writer thread with reopen and drop.
#include "proxy/ops/access_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include "common/log.h"
#include "common/thread_name.h"

namespace idemgate {

namespace {

// '"', '\\' and every byte outside printable ASCII, as a table: every string of every line is
// scanned.
constexpr std::array<bool, 256> kNeedsEscape = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c == '"' || c == '\\' || c < 0x20 || c >= 0x7F;
  return t;
}();
bool NeedsEscape(unsigned char c) { return kNeedsEscape[c]; }

// JSON string contents; bytes outside printable ASCII are escaped so every line is valid JSON
// whatever the request carried.
void AppendJsonString(std::string* out, std::string_view text) {
  out->push_back('"');
  size_t plain = 0;  // the common case: nothing to escape, one append
  while (plain < text.size() && !NeedsEscape(static_cast<unsigned char>(text[plain]))) ++plain;
  out->append(text.substr(0, plain));
  static constexpr char kHex[] = "0123456789abcdef";
  for (char ch : text.substr(plain)) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (NeedsEscape(c)) {
      char buf[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out->append(buf, sizeof(buf));
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

// ,"name": in one append (the name is a literal: its size is known here).
template <size_t N>
void AppendField(std::string* out, const char (&name)[N]) {
  char buf[N + 3] = {',', '"'};
  memcpy(buf + 2, name, N - 1);
  buf[N + 1] = '"';
  buf[N + 2] = ':';
  out->append(buf, sizeof(buf));
}

template <typename Int>
void AppendInt(std::string* out, Int value) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, res.ptr);
}

// Microseconds as milliseconds with three decimals.
void AppendMillis(std::string* out, int64_t micros) {
  AppendInt(out, micros / 1000);
  int64_t frac = micros % 1000;
  char buf[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                 static_cast<char>('0' + frac % 10)};
  out->append(buf, sizeof(buf));
}

// "YYYY-MM-DDTHH:MM:SS" of a second, formatted once per second per thread.
std::string_view SecondPrefix(time_t seconds) {
  thread_local time_t cached_second = -1;
  thread_local char cached[32];
  thread_local size_t cached_len = 0;
  if (seconds != cached_second) {
    tm utc{};
    gmtime_r(&seconds, &utc);
    cached_len = strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &utc);
    cached_second = seconds;
  }
  return std::string_view(cached, cached_len);
}

void AppendRfc3339(std::string* out, int64_t unix_ms, bool millis) {
  time_t seconds = static_cast<time_t>(unix_ms / 1000);
  int64_t ms = unix_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    --seconds;
  }
  out->append(SecondPrefix(seconds));
  if (millis) {
    char buf[4] = {'.', static_cast<char>('0' + ms / 100), static_cast<char>('0' + ms / 10 % 10),
                   static_cast<char>('0' + ms % 10)};
    out->append(buf, sizeof(buf));
  }
  out->push_back('Z');
}

}  // namespace

std::string FormatRfc3339(int64_t unix_ms, bool millis) {
  std::string out;
  AppendRfc3339(&out, unix_ms, millis);
  return out;
}

void AppendAccessLine(const AccessEntry& e, std::string* out) {
  int64_t unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(e.time.time_since_epoch()).count();
  out->append("{\"time\":\"");
  AppendRfc3339(out, unix_ms, true);
  out->push_back('"');
  AppendField(out, "method");
  AppendJsonString(out, e.method);
  AppendField(out, "path");
  AppendJsonString(out, e.path);
  if (e.protocol[0] != '\0') {
    AppendField(out, "protocol");
    AppendJsonString(out, e.protocol);
  }
  AppendField(out, "client_ip");
  AppendJsonString(out, e.client_ip);
  if (!e.request_id.empty()) {
    AppendField(out, "request_id");
    AppendJsonString(out, e.request_id);
  }
  AppendField(out, "status");
  AppendInt(out, e.client_closed ? 499 : e.status);
  if (e.client_closed && e.status != 0) {  // 0: it had no answer (a waiter that was dropped)
    AppendField(out, "answer_status");
    AppendInt(out, e.status);
  }
  AppendField(out, "outcome");
  AppendJsonString(out, e.outcome);
  if (e.error) {
    AppendField(out, "error");
    AppendJsonString(out, GetErrorInfo(*e.error).code);
  }
  if (!e.error_detail.empty()) {
    AppendField(out, "error_detail");
    AppendJsonString(out, e.error_detail);
  }
  if (e.attempt > 0) {
    AppendField(out, "attempt");
    AppendInt(out, e.attempt);
  }
  AppendField(out, "latency_ms");
  AppendMillis(out, std::max<int64_t>(0, e.total_us));
  if (e.upstream_us >= 0) {
    AppendField(out, "upstream_ms");
    AppendMillis(out, e.upstream_us);
  }
  if (e.wait_us >= 0) {
    AppendField(out, "wait_ms");
    AppendMillis(out, e.wait_us);
  }
  AppendField(out, "bytes_out");
  AppendInt(out, e.client_closed ? 0 : e.bytes_out);
  if (!e.key_hash.empty()) {
    AppendField(out, "key_hash");
    AppendJsonString(out, e.key_hash);
  }
  out->push_back('}');
}

std::string FormatAccessLine(const AccessEntry& e) {
  std::string out;
  out.reserve(256 + e.path.size());
  AppendAccessLine(e, &out);
  return out;
}

namespace {
// 0640 whatever the umask (the gateway runs with 077): the owner writes, its group (log
// shippers, adm) reads.
int OpenLogFile(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd >= 0) fchmod(fd, 0640);
  return fd;
}
}  // namespace

std::unique_ptr<AccessLog> AccessLog::Open(const std::string& destination, std::string* error,
                                           size_t max_buffer_bytes,
                                           std::chrono::milliseconds flush_interval) {
  if (destination == "stdout") {
    return std::unique_ptr<AccessLog>(
        new AccessLog("", STDOUT_FILENO, max_buffer_bytes, flush_interval));
  }
  int fd = OpenLogFile(destination);
  if (fd < 0) {
    *error = "cannot open access log '" + destination + "': " + strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<AccessLog>(
      new AccessLog(destination, fd, max_buffer_bytes, flush_interval));
}

AccessLog::AccessLog(std::string path, int fd, size_t max_buffer_bytes,
                     std::chrono::milliseconds flush_interval)
    : path_(std::move(path)),
      fd_(fd),
      max_buffer_bytes_(max_buffer_bytes),
      flush_bytes_(std::max<size_t>(1, std::min(kFlushBytes, max_buffer_bytes / 2))),
      flush_interval_(flush_interval) {
  writer_ = std::thread([this] { Run(); });
  NameThread(writer_, "idg-accesslog");
}

AccessLog::~AccessLog() { Close(); }

void AccessLog::Write(std::string_view line) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || buffer_.size() + line.size() + 1 > max_buffer_bytes_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    size_t before = buffer_.size();
    buffer_.append(line);
    buffer_.push_back('\n');
    // The writer's timer picks the line up; wake it only when it sleeps without one (the first
    // line after a quiet spell) or when this line filled the buffer to the flush size.
    wake = (idle_ && before == 0) || (before < flush_bytes_ && buffer_.size() >= flush_bytes_);
  }
  if (wake) cv_.notify_one();
}

void AccessLog::Reopen() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reopen_at_) reopen_at_ = buffer_.size();
  }
  cv_.notify_one();
}

void AccessLog::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !writer_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_one();
  if (writer_.joinable()) writer_.join();
  if (!path_.empty() && fd_ >= 0) close(fd_);
  fd_ = -1;
}

// Writes what is queued, then gathers lines for one flush interval (or until the buffer reaches
// the flush size, a reopen or a stop); sleeps untimed once an interval brought nothing. Under
// load that is one write() per interval or per flush size, and no wake-up per line.
void AccessLog::Run() {
  std::string batch;  // swapped with buffer_: both keep their capacity
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (buffer_.empty() && !reopen_at_ && !stop_) {
      idle_ = true;
      cv_.wait(lock, [this] { return !buffer_.empty() || reopen_at_ || stop_; });
      idle_ = false;
    }
    batch.swap(buffer_);
    std::optional<size_t> reopen_at = reopen_at_;
    reopen_at_.reset();
    bool stop = stop_;
    lock.unlock();
    if (reopen_at) {
      WriteOut(std::string_view(batch).substr(0, *reopen_at));
      DoReopen();
      WriteOut(std::string_view(batch).substr(*reopen_at));
    } else {
      WriteOut(batch);
    }
    batch.clear();
    lock.lock();
    if (stop && buffer_.empty()) return;
    cv_.wait_for(lock, flush_interval_,
                 [this] { return buffer_.size() >= flush_bytes_ || reopen_at_ || stop_; });
  }
}

void AccessLog::WriteOut(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write(fd_, bytes.data(), bytes.size());
    writes_.fetch_add(1, std::memory_order_relaxed);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!write_failed_) {
        LogF(LogLevel::kError, "access_log", "write to the access log failed: %s", strerror(errno));
      }
      write_failed_ = true;
      return;
    }
    write_failed_ = false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void AccessLog::DoReopen() {
  if (path_.empty()) return;
  int fd = OpenLogFile(path_);
  if (fd < 0) {
    LogF(LogLevel::kError, "access_log", "cannot reopen '%s': %s (still writing the old file)",
         path_.c_str(), strerror(errno));
    return;
  }
  close(fd_);
  fd_ = fd;
  reopens_.fetch_add(1, std::memory_order_relaxed);
  LogF(LogLevel::kInfo, "access_log", "access log reopened");
}

}  // namespace idemgate

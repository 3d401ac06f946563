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

// The line is written through a pointer into room reserved once (LineBound): no capacity check
// per field. Every Put returns where the next byte goes.

// Whether any of 8 bytes needs escaping: a control byte (< 0x20), '"', '\\', DEL or above.
// Exact for the word as a whole (a borrow can only mark bytes above one that really matched).
bool WordNeedsEscape(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
  auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  return ((w & kHigh) | ((w - 0x20 * kOnes) & ~w & kHigh) | has_zero(w ^ (0x22 * kOnes)) |
          has_zero(w ^ (0x5C * kOnes)) | has_zero(w ^ (0x7F * kOnes))) != 0;
}

char* PutEscaped(char* p, char ch) {
  static constexpr char kHex[] = "0123456789abcdef";
  unsigned char c = static_cast<unsigned char>(ch);
  if (!NeedsEscape(c)) {
    *p++ = ch;
  } else if (c == '"' || c == '\\') {
    *p++ = '\\';
    *p++ = ch;
  } else {
    const char buf[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
    memcpy(p, buf, sizeof(buf));
    p += sizeof(buf);
  }
  return p;
}

// JSON string contents; bytes outside printable ASCII are escaped so every line is valid JSON
// whatever the request carried. At most 6 bytes out per byte in, plus the quotes. Eight bytes
// at a time while none needs escaping (paths, ids and addresses: nearly always).
char* PutJsonString(char* p, std::string_view text) {
  *p++ = '"';
  const char* in = text.data();
  const char* end = in + text.size();
  for (; end - in >= 8; in += 8) {
    uint64_t w;
    memcpy(&w, in, 8);
    if (!WordNeedsEscape(w)) {
      memcpy(p, in, 8);
      p += 8;
      continue;
    }
    for (int i = 0; i < 8; ++i) p = PutEscaped(p, in[i]);
  }
  for (; in < end; ++in) p = PutEscaped(p, *in);
  *p++ = '"';
  return p;
}
size_t JsonStringBound(std::string_view text) { return 6 * text.size() + 2; }

// ,"name": (the name is a literal: its size is known here).
template <size_t N>
char* PutField(char* p, const char (&name)[N]) {
  *p++ = ',';
  *p++ = '"';
  memcpy(p, name, N - 1);
  p += N - 1;
  *p++ = '"';
  *p++ = ':';
  return p;
}

template <size_t N>
char* PutLiteral(char* p, const char (&text)[N]) {
  memcpy(p, text, N - 1);
  return p + N - 1;
}

template <typename Int>
char* PutInt(char* p, Int value) {
  return std::to_chars(p, p + 24, value).ptr;
}

// Microseconds as milliseconds with three decimals.
char* PutMillis(char* p, int64_t micros) {
  p = PutInt(p, micros / 1000);
  int64_t frac = micros % 1000;
  *p++ = '.';
  *p++ = static_cast<char>('0' + frac / 100);
  *p++ = static_cast<char>('0' + frac / 10 % 10);
  *p++ = static_cast<char>('0' + frac % 10);
  return p;
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

// At most 32 bytes (the cached prefix) + ".mmmZ".
char* PutRfc3339(char* p, int64_t unix_ms, bool millis) {
  time_t seconds = static_cast<time_t>(unix_ms / 1000);
  int64_t ms = unix_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    --seconds;
  }
  std::string_view prefix = SecondPrefix(seconds);
  memcpy(p, prefix.data(), prefix.size());
  p += prefix.size();
  if (millis) {
    *p++ = '.';
    *p++ = static_cast<char>('0' + ms / 100);
    *p++ = static_cast<char>('0' + ms / 10 % 10);
    *p++ = static_cast<char>('0' + ms % 10);
  }
  *p++ = 'Z';
  return p;
}

// What the line can take at most: field names, numbers and time (under 400 bytes) and every
// string escaped at its worst.
size_t LineBound(const AccessEntry& e, std::string_view error_code) {
  return 512 + JsonStringBound(e.method) + JsonStringBound(e.path) + JsonStringBound(e.protocol) +
         JsonStringBound(e.client_ip) + JsonStringBound(e.request_id) + JsonStringBound(e.outcome) +
         JsonStringBound(error_code) + JsonStringBound(e.error_detail) +
         JsonStringBound(e.key_hash);
}

// From the status on: what the exchange did and what it cost.
char* PutOutcome(char* p, const AccessEntry& e, std::string_view error_code) {
  p = PutField(p, "status");
  p = PutInt(p, e.client_closed ? 499 : e.status);
  if (e.client_closed && e.status != 0) {  // 0: it had no answer (a waiter that was dropped)
    p = PutField(p, "answer_status");
    p = PutInt(p, e.status);
  }
  p = PutField(p, "outcome");
  p = PutJsonString(p, e.outcome);
  if (e.error) {
    p = PutField(p, "error");
    p = PutJsonString(p, error_code);
  }
  if (!e.error_detail.empty()) {
    p = PutField(p, "error_detail");
    p = PutJsonString(p, e.error_detail);
  }
  if (e.attempt > 0) {
    p = PutField(p, "attempt");
    p = PutInt(p, e.attempt);
  }
  p = PutField(p, "latency_ms");
  p = PutMillis(p, std::max<int64_t>(0, e.total_us));
  if (e.upstream_us >= 0) {
    p = PutField(p, "upstream_ms");
    p = PutMillis(p, e.upstream_us);
  }
  if (e.wait_us >= 0) {
    p = PutField(p, "wait_ms");
    p = PutMillis(p, e.wait_us);
  }
  p = PutField(p, "bytes_out");
  return PutInt(p, e.client_closed ? 0 : e.bytes_out);
}

}  // namespace

std::string FormatRfc3339(int64_t unix_ms, bool millis) {
  char buf[48];
  return std::string(buf, PutRfc3339(buf, unix_ms, millis));
}

void AppendAccessLine(const AccessEntry& e, std::string* out) {
  int64_t unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(e.time.time_since_epoch()).count();
  std::string_view error_code = e.error ? GetErrorInfo(*e.error).code : std::string_view();
  const size_t at = out->size();
  out->resize(at + LineBound(e, error_code));
  char* p = out->data() + at;
  p = PutLiteral(p, "{\"time\":\"");
  p = PutRfc3339(p, unix_ms, true);
  *p++ = '"';
  p = PutField(p, "method");
  p = PutJsonString(p, e.method);
  p = PutField(p, "path");
  p = PutJsonString(p, e.path);
  if (e.protocol[0] != '\0') {
    p = PutField(p, "protocol");
    p = PutJsonString(p, e.protocol);
  }
  p = PutField(p, "client_ip");
  p = PutJsonString(p, e.client_ip);
  if (!e.request_id.empty()) {
    p = PutField(p, "request_id");
    p = PutJsonString(p, e.request_id);
  }
  p = PutOutcome(p, e, error_code);
  if (!e.key_hash.empty()) {
    p = PutField(p, "key_hash");
    p = PutJsonString(p, e.key_hash);
  }
  *p++ = '}';
  out->resize(static_cast<size_t>(p - out->data()));
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

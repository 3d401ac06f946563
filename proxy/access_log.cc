// The access log: JSON line formatting, and a buffered writer thread with reopen and drop.
#include "proxy/access_log.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/log.h"

namespace idemgate {

namespace {

// JSON string contents; bytes outside printable ASCII are escaped so every line is valid JSON
// whatever the request carried.
void AppendJsonString(std::string* out, std::string_view text) {
  out->push_back('"');
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

void AppendField(std::string* out, const char* name) {
  out->append(",\"");
  out->append(name);
  out->append("\":");
}

// Microseconds as milliseconds with three decimals.
void AppendMillis(std::string* out, int64_t micros) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(micros / 1000),
           static_cast<long long>(micros % 1000));
  out->append(buf);
}

}  // namespace

std::string FormatRfc3339(int64_t unix_ms, bool millis) {
  time_t seconds = static_cast<time_t>(unix_ms / 1000);
  int64_t ms = unix_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    --seconds;
  }
  tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[40];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &utc);
  if (millis) n += snprintf(buf + n, sizeof(buf) - n, ".%03lld", static_cast<long long>(ms));
  snprintf(buf + n, sizeof(buf) - n, "Z");
  return buf;
}

std::string KeyHash(const ScopeId& scope, std::string_view key) {
  std::string input(reinterpret_cast<const char*>(scope.data()), scope.size());
  input.append(key);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

std::string FormatAccessLine(const AccessEntry& e) {
  std::string out;
  out.reserve(256 + e.path.size());
  int64_t unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(e.time.time_since_epoch()).count();
  out.append("{\"time\":\"").append(FormatRfc3339(unix_ms, true)).append("\"");
  AppendField(&out, "method");
  AppendJsonString(&out, e.method);
  AppendField(&out, "path");
  AppendJsonString(&out, e.path);
  AppendField(&out, "client_ip");
  AppendJsonString(&out, e.client_ip);
  if (!e.request_id.empty()) {
    AppendField(&out, "request_id");
    AppendJsonString(&out, e.request_id);
  }
  AppendField(&out, "status");
  out.append(std::to_string(e.client_closed ? 499 : e.status));
  if (e.client_closed && e.status != 0) {  // 0: it had no answer (a waiter that was dropped)
    AppendField(&out, "answer_status");
    out.append(std::to_string(e.status));
  }
  AppendField(&out, "outcome");
  AppendJsonString(&out, e.outcome);
  if (e.error) {
    AppendField(&out, "error");
    AppendJsonString(&out, GetErrorInfo(*e.error).code);
  }
  if (!e.error_detail.empty()) {
    AppendField(&out, "error_detail");
    AppendJsonString(&out, e.error_detail);
  }
  if (e.attempt > 0) {
    AppendField(&out, "attempt");
    out.append(std::to_string(e.attempt));
  }
  AppendField(&out, "latency_ms");
  AppendMillis(&out, std::max<int64_t>(0, e.total_us));
  if (e.upstream_us >= 0) {
    AppendField(&out, "upstream_ms");
    AppendMillis(&out, e.upstream_us);
  }
  if (e.wait_us >= 0) {
    AppendField(&out, "wait_ms");
    AppendMillis(&out, e.wait_us);
  }
  AppendField(&out, "bytes_out");
  out.append(std::to_string(e.client_closed ? 0 : e.bytes_out));
  if (!e.key_hash.empty()) {
    AppendField(&out, "key_hash");
    AppendJsonString(&out, e.key_hash);
  }
  out.push_back('}');
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
                                           size_t max_buffer_bytes) {
  if (destination == "stdout") {
    return std::unique_ptr<AccessLog>(new AccessLog("", STDOUT_FILENO, max_buffer_bytes));
  }
  int fd = OpenLogFile(destination);
  if (fd < 0) {
    *error = "cannot open access log '" + destination + "': " + strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<AccessLog>(new AccessLog(destination, fd, max_buffer_bytes));
}

AccessLog::AccessLog(std::string path, int fd, size_t max_buffer_bytes)
    : path_(std::move(path)), fd_(fd), max_buffer_bytes_(max_buffer_bytes) {
  writer_ = std::thread([this] { Run(); });
}

AccessLog::~AccessLog() { Close(); }

void AccessLog::Write(std::string_view line) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || buffer_.size() + line.size() + 1 > max_buffer_bytes_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    was_empty = buffer_.empty();
    buffer_.append(line);
    buffer_.push_back('\n');
  }
  if (was_empty) cv_.notify_one();
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

void AccessLog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !buffer_.empty() || reopen_at_ || stop_; });
    std::string batch;
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
    lock.lock();
    if (stop && buffer_.empty()) return;
  }
}

void AccessLog::WriteOut(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write(fd_, bytes.data(), bytes.size());
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

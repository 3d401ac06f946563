// SPDX-License-Identifier: Apache-2.0
#include "common/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace idemgate {
namespace {

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

std::string VFormat(const char* format, va_list ap) {
  char small[512];
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(small, sizeof(small), format, copy);
  va_end(copy);
  if (n < 0) return format;
  if (static_cast<size_t>(n) < sizeof(small)) return std::string(small, n);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  vsnprintf(out.data(), out.size(), format, ap);
  out.resize(static_cast<size_t>(n));
  return out;
}

void WriteAll(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) return;  // stderr is gone: nothing better to do
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string FormatLogLine(std::chrono::system_clock::time_point when, LogLevel level,
                          std::string_view subsystem, std::string_view message) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(when.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(ms / 1000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char stamp[64];  // room for any tm the formats could print, not just four-digit years
  snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
           utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
           static_cast<int>(ms % 1000));
  std::string line;
  line.reserve(48 + subsystem.size() + message.size());
  line.append(stamp).append(" ").append(LevelName(level)).append(" ");
  line.append(subsystem).append(": ");
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) {
    message.remove_suffix(1);
  }
  // A line break and the indentation after it (libpq's "\n\tIs the server running...") become
  // "; ", any other tab or control byte a space: one readable line, no escape sequences.
  for (size_t i = 0; i < message.size(); ++i) {
    const char c = message[i];
    if (c == '\n') {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      line.append("; ");
      while (i + 1 < message.size() && (message[i + 1] == ' ' || message[i + 1] == '\t' ||
                                        message[i + 1] == '\r' || message[i + 1] == '\n')) {
        ++i;
      }
    } else if (c == '\r') {
      continue;
    } else {
      line.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
    }
  }
  line.push_back('\n');
  return line;
}

void Log(LogLevel level, std::string_view subsystem, std::string_view message) {
  WriteAll(FormatLogLine(std::chrono::system_clock::now(), level, subsystem, message));
}

void LogF(LogLevel level, const char* subsystem, const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  std::string message = VFormat(format, ap);
  va_end(ap);
  Log(level, subsystem, message);
}

bool LogLimiter::Allow(uint64_t* suppressed, std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_window_ == 0 || now - window_start_ >= interval_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

void LogLimited(LogLimiter& limiter, LogLevel level, const char* subsystem, const char* format,
                ...) {
  uint64_t suppressed = 0;
  if (!limiter.Allow(&suppressed)) return;
  if (suppressed > 0) {
    LogF(level, subsystem, "suppressed %llu similar lines",
         static_cast<unsigned long long>(suppressed));
  }
  va_list ap;
  va_start(ap, format);
  std::string message = VFormat(format, ap);
  va_end(ap);
  Log(level, subsystem, message);
}

}  // namespace idemgate

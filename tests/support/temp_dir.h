// SPDX-License-Identifier: Apache-2.0
// TempDir: a fresh directory under $TMPDIR (or /tmp) for one test, removed with its contents.
#pragma once

#include <string>
#include <string_view>

namespace idemgate::test {

class TempDir {
 public:
  TempDir();   // aborts the test process if no directory can be made
  ~TempDir();  // removes the directory recursively, unless IDEMGATE_KEEP_TEMP is set
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name (no file is created).
  std::string Path(std::string_view name) const;
  // Writes `contents` to path()/name, creating parent directories; returns the full path.
  std::string WriteFile(std::string_view name, std::string_view contents) const;
  // The contents of path()/name, or "" when it cannot be read.
  std::string ReadFile(std::string_view name) const;

 private:
  std::string path_;
};

}  // namespace idemgate::test

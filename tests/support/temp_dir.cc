// SPDX-License-Identifier: Apache-2.0
// TempDir: mkdtemp on construction, recursive removal on destruction.
#include "tests/support/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace idemgate::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/idemgate-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  if (std::getenv("IDEMGATE_KEEP_TEMP") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Path(std::string_view name) const { return path_ + "/" + std::string(name); }

std::string TempDir::WriteFile(std::string_view name, std::string_view contents) const {
  std::string full = Path(name);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(full).parent_path(), ec);
  std::ofstream out(full, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  return full;
}

std::string TempDir::ReadFile(std::string_view name) const {
  std::ifstream in(Path(name), std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace idemgate::test

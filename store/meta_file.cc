// SPDX-License-Identifier: Apache-2.0
// Meta files of a store (see meta_file.h).
#include "store/meta_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace idemgate {
namespace {

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > Store::kMaxMetaName) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

std::string MetaPath(const std::string& dir, std::string_view name) {
  return dir + "/IDEMGATE-META-" + std::string(name);
}

StoreStatus Failed(const std::string& what, int error) {
  return {error == ENOSPC ? StoreCode::kNoSpace : StoreCode::kIoError,
          what + ": " + std::strerror(error)};
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

StoreStatus SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Failed("opening " + dir, errno);
  const bool ok = fsync(fd) == 0;
  const int error = errno;
  close(fd);
  return ok ? StoreStatus{} : Failed("syncing " + dir, error);
}

}  // namespace

StoreStatus ReadMetaFile(const std::string& dir, std::string_view name,
                         std::optional<std::string>* value) {
  value->reset();
  if (!ValidName(name)) return {StoreCode::kIoError, "bad meta name"};
  const std::string path = MetaPath(dir, name);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? StoreStatus{} : Failed("opening " + path, errno);
  std::string data;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return Failed("reading " + path, error);
    }
    data.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  *value = std::move(data);
  return {};
}

StoreStatus WriteMetaFile(const std::string& dir, std::string_view name, std::string_view value) {
  if (!ValidName(name)) return {StoreCode::kIoError, "bad meta name"};
  const std::string path = MetaPath(dir, name);
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("creating " + tmp, errno);
  const bool ok = WriteAll(fd, value) && fsync(fd) == 0;
  const int error = errno;
  close(fd);
  if (!ok) {
    unlink(tmp.c_str());
    return Failed("writing " + tmp, error);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    unlink(tmp.c_str());
    return Failed("renaming " + tmp, rename_error);
  }
  return SyncDir(dir);
}

}  // namespace idemgate

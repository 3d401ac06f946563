// Checkpoint and restore of the embedded store (see store_backup.h).
#include "store/store_backup.h"

#include <errno.h>
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/utilities/checkpoint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

namespace idemgate {
namespace {

namespace fs = std::filesystem;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string SyncPath(const std::string& path, bool directory) {
  int fd = open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Errno("opening " + path);
  std::string error = fsync(fd) == 0 ? "" : Errno("syncing " + path);
  close(fd);
  return error;
}

// Copies one regular file, created with `mode` (exclusive: never over an existing file), synced.
std::string CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Errno("opening " + from);
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (out < 0) {
    std::string error = Errno("creating " + to);
    close(in);
    return error;
  }
  std::string error;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = read(in, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = Errno("reading " + from);
    if (n <= 0) break;
    for (ssize_t done = 0; done < n && error.empty();) {
      ssize_t w = write(out, buffer + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) error = Errno("writing " + to);
      if (w > 0) done += w;
    }
    if (!error.empty()) break;
  }
  if (error.empty() && fsync(out) != 0) error = Errno("syncing " + to);
  close(in);
  close(out);
  return error;
}

bool IsMetaFile(const fs::path& path) {
  return path.filename().string().rfind("IDEMGATE-META-", 0) == 0 && path.extension() != ".tmp";
}

StoreStatus Failed(const std::string& message) { return {StoreCode::kIoError, message}; }

}  // namespace

StoreStatus WriteRocksCheckpoint(rocksdb::DB* db, const std::string& db_dir,
                                 const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) return Failed("'" + dir + "' already exists");
  const std::string partial = dir + ".partial";
  fs::remove_all(partial, ec);  // what a crash during an earlier backup left
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db, &raw);
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush 0: the memtable is flushed first, so the copy is table files + MANIFEST.
  if (s.ok()) s = checkpoint->CreateCheckpoint(partial, /*log_size_for_flush=*/0);
  if (!s.ok()) return Failed("checkpoint: " + s.ToString());
  for (const fs::directory_entry& entry : fs::directory_iterator(db_dir, ec)) {
    if (!entry.is_regular_file() || !IsMetaFile(entry.path())) continue;
    std::string to = partial + "/" + entry.path().filename().string();
    if (std::string e = CopyFile(entry.path().string(), to, 0600); !e.empty()) return Failed(e);
  }
  if (ec) return Failed("listing " + db_dir + ": " + ec.message());
  if (std::string e = SyncPath(partial, true); !e.empty()) return Failed(e);
  if (rename(partial.c_str(), dir.c_str()) != 0) return Failed(Errno("renaming to " + dir));
  std::string parent = fs::path(dir).parent_path().string();
  if (std::string e = SyncPath(parent.empty() ? "." : parent, true); !e.empty()) return Failed(e);
  return {};
}

std::string RestoreCheckpoint(const std::string& from, const std::string& store_path) {
  std::error_code ec;
  // A backup is written as NAME.partial and renamed to NAME once it is complete and synced: a
  // .partial directory is one that a crash or a failure left unfinished.
  std::string name = fs::path(from).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(from).lexically_normal().parent_path().filename().string();
  if (name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0) {
    return "'" + from +
           "' is an unfinished backup (a .partial directory is renamed once the checkpoint is "
           "complete); restore a finished one";
  }
  if (!fs::is_regular_file(fs::path(from) / "CURRENT", ec)) {
    return "'" + from + "' is not a store checkpoint (it has no CURRENT file)";
  }
  if (fs::exists(store_path, ec) && !fs::is_empty(store_path, ec)) {
    return "store.path '" + store_path +
           "' is not empty: restore into a new or empty directory (move the old store away "
           "first; the gateway must be stopped)";
  }
  fs::create_directories(store_path, ec);
  if (ec || chmod(store_path.c_str(), 0700) != 0) {
    return "cannot create store.path '" + store_path + "'" + (ec ? ": " + ec.message() : "");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(from, ec)) {
    if (!entry.is_regular_file()) continue;
    std::string to = store_path + "/" + entry.path().filename().string();
    if (std::string e = CopyFile(entry.path().string(), to, 0600); !e.empty()) return e;
  }
  if (ec) return "listing " + from + ": " + ec.message();
  return SyncPath(store_path, true);
}

}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
#include "store/wal_prewrite.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <rocksdb/file_system.h>

#include "common/log.h"

namespace idemgate {
namespace {

#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

const char* Zeros() {
  static const char* zeros = new char[kWalPrewriteChunkBytes]();  // never freed: used to the end
  return zeros;
}

bool IsWal(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0;
}

// One WAL file: RocksDB's own file object does every append and sync; a second descriptor on
// the same file writes the zeros ahead of it (positioned writes, so the first one's offset stays
// RocksDB's). A failed zero write (a full disk) ends the prewriting for this file and fails
// nothing: the appends go on as plain appends and report their own errors.
class PrewrittenWal final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  PrewrittenWal(std::unique_ptr<rocksdb::FSWritableFile> file, const std::string& name)
      : FSWritableFileOwnerWrapper(std::move(file)),
        name_(name),
        fd_(::open(name.c_str(), O_WRONLY | O_CLOEXEC)) {}
  ~PrewrittenWal() override { CloseFd(); }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    Ahead(data.size(), o, d);
    return target()->Append(data, o, d);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v,
                           rocksdb::IODebugContext* d) override {
    Ahead(data.size(), o, d);
    return target()->Append(data, o, v, d);
  }
  // RocksDB trims its own preallocation on Close; the zeros past the records go the same way.
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    uint64_t size = target()->GetFileSize(o, d);
    rocksdb::IOStatus s = target()->Close(o, d);
    if (fd_ >= 0 && zeroed_ > size && ::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store", "trimming the WAL's zeros in %s: %s",
                           name_.c_str(), strerror(errno));
    }
    CloseFd();
    return s;
  }

 private:
  // Keeps at least half a chunk of zeros past where this append ends.
  void Ahead(size_t n, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) {
    if (fd_ < 0) return;
    uint64_t end = target()->GetFileSize(o, d) + n;
    while (fd_ >= 0 && end + kWalPrewriteChunkBytes / 2 > zeroed_) {
      ssize_t w = ::pwrite(fd_, Zeros(), kWalPrewriteChunkBytes, static_cast<off_t>(zeroed_));
      if (w != static_cast<ssize_t>(kWalPrewriteChunkBytes)) {
        IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store",
                             "writing zeros ahead of the WAL %s: %s; appending plainly",
                             name_.c_str(), w < 0 ? strerror(errno) : "short write");
        CloseFd();
        return;
      }
      // Starts the zeros' writeback now, so the next sync does not wait for a MiB of them.
      (void)::sync_file_range(fd_, static_cast<off_t>(zeroed_), kWalPrewriteChunkBytes,
                              SYNC_FILE_RANGE_WRITE);
      zeroed_ += kWalPrewriteChunkBytes;
    }
  }
  void CloseFd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  const std::string name_;
  int fd_;
  uint64_t zeroed_ = 0;  // zeros (or records over them) reach this offset
};

class WalPrewriteFs final : public rocksdb::FileSystemWrapper {
 public:
  explicit WalPrewriteFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : FileSystemWrapper(base) {}
  const char* Name() const override { return "WalPrewriteFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* out,
                                    rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, o, out, d);
    if (s.ok() && IsWal(name)) *out = std::make_unique<PrewrittenWal>(std::move(*out), name);
    return s;
  }
};

}  // namespace

bool WalPrewriteHelps(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return false;
  return fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC;
}

std::unique_ptr<rocksdb::Env> NewWalPrewriteEnv(rocksdb::Env* base) {
  if (base == nullptr) base = rocksdb::Env::Default();
  return rocksdb::NewCompositeEnv(std::make_shared<WalPrewriteFs>(base->GetFileSystem()));
}

std::unique_ptr<rocksdb::Env> WalPrewriteEnvFor(const std::string& dir, rocksdb::Env* base) {
  if (!WalPrewriteHelps(dir)) return nullptr;
  LogF(LogLevel::kInfo, "store",
       "%s is on ext4 or XFS: its WAL is written over zeros written ahead, so a sync writes only "
       "the records", dir.c_str());
  return NewWalPrewriteEnv(base);
}

}  // namespace idemgate

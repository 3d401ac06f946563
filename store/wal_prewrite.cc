// SPDX-License-Identifier: Apache-2.0
#include "store/wal_prewrite.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <rocksdb/file_system.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "common/log.h"

namespace idemgate {
namespace {

#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

// calloc'd, so its pages stay the kernel's shared zero page until written (never): no RSS.
const char* Zeros() {
  static const char* zeros = static_cast<const char*>(std::calloc(kWalPrewriteChunkBytes, 1));
  return zeros;
}

std::string_view WithoutTrailingSlashes(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  return path;
}

// A WAL of the database in `dir`: "<dir>/NNNNNN.log" (not a checkpoint's copy elsewhere).
bool IsWalIn(std::string_view dir, std::string_view name) {
  size_t slash = name.rfind('/');
  if (slash == std::string_view::npos) return false;
  if (WithoutTrailingSlashes(name.substr(0, slash)) != WithoutTrailingSlashes(dir)) return false;
  std::string_view base = name.substr(slash + 1);
  if (base.size() <= 4 || base.substr(base.size() - 4) != ".log") return false;
  base.remove_suffix(4);
  return base.find_first_not_of("0123456789") == std::string_view::npos;
}

class PrewrittenWal;

class WalPrewriteFs final : public rocksdb::FileSystemWrapper {
 public:
  WalPrewriteFs(const std::string& db_dir, const std::shared_ptr<rocksdb::FileSystem>& base)
      : FileSystemWrapper(base), db_dir_(db_dir) {}
  const char* Name() const override { return "WalPrewriteFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* out,
                                    rocksdb::IODebugContext* d) override;
  // An open log's size is its records' (a checkpoint copies a live WAL up to this size).
  rocksdb::IOStatus GetFileSize(const std::string& name, const rocksdb::IOOptions& o,
                                uint64_t* size, rocksdb::IODebugContext* d) override;
  // ReopenWritableFile and ReuseWritableFile stay RocksDB's: a reopened log already holds
  // records, which zeros from offset 0 would overwrite.

  void Forget(const std::string& name, const PrewrittenWal* file) {
    std::lock_guard lock(mu_);
    auto it = open_.find(name);
    if (it != open_.end() && it->second == file) open_.erase(it);
  }

 private:
  const std::string db_dir_;
  std::mutex mu_;
  std::unordered_map<std::string, const PrewrittenWal*> open_;
};

// One WAL file: RocksDB's own file object does every append and sync; a second descriptor on
// the same file writes the zeros ahead of it (positioned writes, so the first one's offset stays
// RocksDB's). A failed zero write (a full disk) ends the prewriting for this file and fails
// nothing: the appends go on as plain appends and report their own errors.
class PrewrittenWal final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  PrewrittenWal(std::unique_ptr<rocksdb::FSWritableFile> file, const std::string& name,
                WalPrewriteFs* fs)
      : FSWritableFileOwnerWrapper(std::move(file)),
        name_(name),
        fs_(fs),
        fd_(::open(name.c_str(), O_WRONLY | O_CLOEXEC)) {
    if (fd_ < 0) Stop("opening it", strerror(errno));
  }
  ~PrewrittenWal() override {
    fs_->Forget(name_, this);
    CloseFd();
  }

  uint64_t RecordsSize() const { return size_.load(std::memory_order_acquire); }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* d) override {
    return Appended(data.size(), o, d, [&] { return target()->Append(data, o, d); });
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v,
                           rocksdb::IODebugContext* d) override {
    return Appended(data.size(), o, d, [&] { return target()->Append(data, o, v, d); });
  }
  // RocksDB writes a WAL by appending only; should it ever write one at an offset or cut it,
  // the zeros' bookkeeping no longer holds, so the prewriting stops first.
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* d) override {
    Stop("a positioned write", "not how a WAL is written");
    return Tracked(target()->PositionedAppend(data, offset, o, d), o, d);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     const rocksdb::DataVerificationInfo& v,
                                     rocksdb::IODebugContext* d) override {
    Stop("a positioned write", "not how a WAL is written");
    return Tracked(target()->PositionedAppend(data, offset, o, v, d), o, d);
  }
  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
    Stop("a truncation", "not how a WAL is written");
    return Tracked(target()->Truncate(size, o, d), o, d);
  }
  // RocksDB trims its preallocated space on Close, and with it the zeros; a file it did not
  // preallocate (allow_fallocate = false) has them trimmed here.
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    const uint64_t size = RecordsSize();
    rocksdb::IOStatus s = target()->Close(o, d);
    if (fd_ >= 0 && zeroed_ > size && ::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store", "trimming the WAL's zeros in %s: %s",
                           name_.c_str(), strerror(errno));
    }
    CloseFd();
    fs_->Forget(name_, this);
    return s;
  }

 private:
  // Zeros ahead of an append of `n` bytes, the append itself, then the records' size.
  template <typename AppendFn>
  rocksdb::IOStatus Appended(size_t n, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d,
                             AppendFn append) {
    Ahead(size_.load(std::memory_order_relaxed) + n);
    return Tracked(append(), o, d);
  }
  // The records' size after any write to the file (what GetFileSize and Close go by).
  rocksdb::IOStatus Tracked(rocksdb::IOStatus s, const rocksdb::IOOptions& o,
                            rocksdb::IODebugContext* d) {
    size_.store(target()->GetFileSize(o, d), std::memory_order_release);
    return s;
  }
  // Keeps at least half a chunk of zeros past `end`.
  void Ahead(uint64_t end) {
    while (fd_ >= 0 && end + kWalPrewriteChunkBytes / 2 > zeroed_) {
      ssize_t w = ::pwrite(fd_, Zeros(), kWalPrewriteChunkBytes, static_cast<off_t>(zeroed_));
      if (w != static_cast<ssize_t>(kWalPrewriteChunkBytes)) {
        Stop("writing zeros ahead of it", w < 0 ? strerror(errno) : "a short write");
        return;
      }
      // Starts the zeros' writeback at once, ahead of the next sync's own pass over the file.
      (void)::sync_file_range(fd_, static_cast<off_t>(zeroed_), kWalPrewriteChunkBytes,
                              SYNC_FILE_RANGE_WRITE);
      zeroed_ += kWalPrewriteChunkBytes;
    }
  }
  void Stop(const char* doing, const char* why) {
    IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store", "WAL %s: %s: %s; appending plainly",
                         name_.c_str(), doing, why);
    CloseFd();
  }
  void CloseFd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  const std::string name_;
  WalPrewriteFs* const fs_;  // outlives its files (the Env owning it outlives the DB)
  int fd_;
  uint64_t zeroed_ = 0;                // zeros (or records over them) reach this offset
  std::atomic<uint64_t> size_{0};  // the file's size as RocksDB's writes left it (its writer only)
};

rocksdb::IOStatus WalPrewriteFs::NewWritableFile(const std::string& name,
                                                 const rocksdb::FileOptions& o,
                                                 std::unique_ptr<rocksdb::FSWritableFile>* out,
                                                 rocksdb::IODebugContext* d) {
  rocksdb::IOStatus s = target()->NewWritableFile(name, o, out, d);
  if (!s.ok() || o.use_direct_writes || !IsWalIn(db_dir_, name)) return s;
  auto file = std::make_unique<PrewrittenWal>(std::move(*out), name, this);
  std::lock_guard lock(mu_);
  open_[name] = file.get();
  *out = std::move(file);
  return s;
}

rocksdb::IOStatus WalPrewriteFs::GetFileSize(const std::string& name, const rocksdb::IOOptions& o,
                                             uint64_t* size, rocksdb::IODebugContext* d) {
  {
    std::lock_guard lock(mu_);
    auto it = open_.find(name);
    if (it != open_.end()) {
      *size = it->second->RecordsSize();
      return rocksdb::IOStatus::OK();
    }
  }
  return target()->GetFileSize(name, o, size, d);
}

}  // namespace

bool WalPrewriteHelps(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return false;
  return fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC;
}

std::unique_ptr<rocksdb::Env> NewWalPrewriteEnv(const std::string& db_dir, rocksdb::Env* base) {
  if (base == nullptr) base = rocksdb::Env::Default();
  return rocksdb::NewCompositeEnv(std::make_shared<WalPrewriteFs>(db_dir, base->GetFileSystem()));
}

std::unique_ptr<rocksdb::Env> WalPrewriteEnvFor(const std::string& db_dir,
                                                const rocksdb::DBOptions& o) {
  if (o.wal_recovery_mode != rocksdb::WALRecoveryMode::kPointInTimeRecovery ||
      o.recycle_log_file_num != 0 || !WalPrewriteHelps(db_dir)) {
    return nullptr;
  }
  LogF(LogLevel::kInfo, "store",
       "%s is on ext4 or XFS: its WAL is written over zeros written ahead, so a sync writes only "
       "the records", db_dir.c_str());
  return NewWalPrewriteEnv(db_dir, o.env);
}

}  // namespace idemgate

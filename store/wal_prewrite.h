// SPDX-License-Identifier: Apache-2.0
// The WAL written over zeros. RocksDB appends its write-ahead log, so the fdatasync of every
// group commit also writes the file's inode (its size, and in fallocate'd space its extents): a
// second synchronous write after the data. This layer writes zeros ahead of the log's end, a MiB
// at a time, so RocksDB's appends land on blocks whose size and extents are already on the disk
// and each sync writes only the data. RocksDB's own appends, syncs and recovery are untouched:
// its log reader skips a zero-filled block without reporting a drop, so a log killed with a zero
// tail recovers the same records as one without it, and Close trims the tail off.
//
// Only on ext4 and XFS, where overwriting written blocks spares the inode write. On tmpfs a sync
// costs nothing to spare, and on copy-on-write file systems an overwrite is a new allocation.
#pragma once

#include <rocksdb/env.h>

#include <cstdint>
#include <memory>
#include <string>

namespace idemgate {

// How far ahead of the log's end zeros are written, and how much at a time.
inline constexpr uint64_t kWalPrewriteChunkBytes = 1 << 20;

// True when `dir` is on a file system where the layer spares a write per sync (ext4, XFS).
bool WalPrewriteHelps(const std::string& dir);

// An Env whose WAL files (*.log) are written over zeros; the rest goes to `base` (nullptr:
// Env::Default()) unchanged. The returned Env must outlive the DB opened with it.
std::unique_ptr<rocksdb::Env> NewWalPrewriteEnv(rocksdb::Env* base);

// NewWalPrewriteEnv(base) when `dir` is where it helps (and a log line saying so), else null.
std::unique_ptr<rocksdb::Env> WalPrewriteEnvFor(const std::string& dir, rocksdb::Env* base);

}  // namespace idemgate

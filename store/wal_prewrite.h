// SPDX-License-Identifier: Apache-2.0
// The WAL written over zeros. RocksDB appends its write-ahead log, so the fdatasync of every
// group commit also writes the file's inode (its size, and in fallocate'd space its extents): a
// second synchronous write after the data. This layer writes zeros ahead of the log's end, a chunk
// at a time, so RocksDB's appends land on blocks whose size and extents are already on the disk
// and each sync writes only the data. RocksDB's own appends, syncs and recovery are untouched:
// its log reader skips a zero-filled block without reporting a drop, so a log killed with a zero
// tail recovers the same records as one without it, and Close trims the tail off. Whoever asks
// the file system for an open log's size (a checkpoint copying the live WAL) gets the records'
// size, not the zeros'.
//
// Only on ext4 and XFS, where overwriting written blocks spares the inode write (on tmpfs a sync
// costs nothing to spare; on copy-on-write file systems an overwrite is a new allocation), and
// only with point-in-time recovery and no WAL recycling: a torn record over zeros is then the
// log's end, as a torn record at the end of a file is (the stricter recovery modes would refuse
// to open after a crash mid-write, and a recycled log is written over its old records).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/options.h>

#include <cstdint>
#include <memory>
#include <string>

namespace idemgate {

// How much is zeroed at a time; at least half of it stays ahead of the log's end. The sync after
// a chunk is written carries it (and the new size), so the chunk is a tail latency: 64 KiB keeps
// that sync's p99 where a plain append's is, where a MiB made it several times longer
// (docs/performance.md).
inline constexpr uint64_t kWalPrewriteChunkBytes = 64 << 10;

// True when `dir` is on a file system where the layer spares a write per sync (ext4, XFS).
bool WalPrewriteHelps(const std::string& dir);

// An Env whose WAL files in `db_dir` (NNNNNN.log) are written over zeros, its other files
// through `base`'s file system (nullptr: Env::Default()'s) unchanged; its clock and thread pools
// are Env::Default()'s, as they are in every Env the store is given. It must outlive the DB
// opened with it.
std::unique_ptr<rocksdb::Env> NewWalPrewriteEnv(const std::string& db_dir, rocksdb::Env* base);

// NewWalPrewriteEnv(db_dir, o.env) when `db_dir` is where it helps and `o` recovers the way it
// relies on (with a log line saying so), else null.
std::unique_ptr<rocksdb::Env> WalPrewriteEnvFor(const std::string& db_dir,
                                                const rocksdb::DBOptions& o);

}  // namespace idemgate

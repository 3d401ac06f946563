// Online backups of the embedded store: a RocksDB checkpoint written while the gateway serves,
// and the restore that copies one into a new store directory (docs/operations.md "Backup and
// restore").
#pragma once

#include <string>

#include "store/store.h"

namespace rocksdb {
class DB;
}

namespace idemgate {

// Writes a consistent copy of `db` (whose directory is `db_dir`) as the new directory `dir`
// (which must not exist; its parent must): a RocksDB checkpoint (the memtable flushed, table
// files hard-linked when `dir` is on the same filesystem, copied otherwise) plus the store's meta
// files (its settings signature). Built as `dir`.partial and renamed into place once synced, so
// `dir` either is a complete store or does not exist. Safe while the store serves.
StoreStatus WriteRocksCheckpoint(rocksdb::DB* db, const std::string& db_dir,
                                 const std::string& dir);

// Copies the checkpoint `from` into `store_path` (created 0700 when missing; it must be empty),
// each file 0600 and synced, then the directory synced: the restored store shares no file with
// the backup. "" or why not. The gateway must not be running on `store_path`.
std::string RestoreCheckpoint(const std::string& from, const std::string& store_path);

}  // namespace idemgate

// RocksDB options for the store, and how RocksDB statuses map to store codes.
#include "store/rocks_options.h"

#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string_view>

#include "common/log.h"
#include "store/meta_file.h"

namespace idemgate {
namespace {

constexpr size_t kBlockCacheBytes = 32 << 20;
constexpr size_t kWriteBufferBytes = 16 << 20;
constexpr uint64_t kPeriodicCompactionSeconds = 12 * 3600;
// kDynamic: filling a store to 3.5M records (docs/performance.md "As the store grows"), fresh CPU
// per request stayed at 39-44 us with these, against 44 -> 52 us with the static defaults
// (256 MiB base, 64 MiB files), whose compaction threads grew from 4 to 13 us per request.
constexpr uint64_t kDynamicLevelBaseBytes = 32 << 20;
constexpr uint64_t kDynamicTargetFileBytes = 8 << 20;

}  // namespace

StoreStatus MapStatus(const rocksdb::Status& s) {
  if (s.ok()) return {};
  StoreCode code = StoreCode::kIoError;
  if (s.IsNoSpace()) {
    code = StoreCode::kNoSpace;
  } else if (s.IsCorruption()) {
    code = StoreCode::kCorruption;
  } else if (s.IsShutdownInProgress()) {
    code = StoreCode::kShutdown;
  }
  return {code, s.ToString()};
}

namespace {

// RocksDB's own diagnostics go to stderr, never to a LOG file in the data directory: on a full
// disk a failed LOG write followed by another one aborts in Debian's assert-enabled build, and
// the gateway must survive a full disk (503, then recover).
class StderrLogger final : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    int n = vsnprintf(line, sizeof(line), format, ap);
    size_t len = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof(line) - 1);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == ' ')) --len;
    // A checkpoint (POST /backup) nests RocksDB's own disabling of file deletions, which it
    // reports at WARN ("File Deletions Disabled, but already disabled"): nothing is wrong.
    if (std::string_view(line, len).find("File Deletions") != std::string_view::npos) return;
    IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store", "rocksdb: %.*s", static_cast<int>(len), line);
  }
};

}  // namespace

rocksdb::Options MakeDbOptions(rocksdb::Env* env, const rocksdb::CompactionFilter* filter,
                               LevelLayout layout) {
  rocksdb::Options o;
  if (layout == LevelLayout::kDynamic) {
    o.level_compaction_dynamic_level_bytes = true;
    o.max_bytes_for_level_base = kDynamicLevelBaseBytes;
    o.target_file_size_base = kDynamicTargetFileBytes;
  }
  o.create_if_missing = true;
  o.info_log = std::make_shared<StderrLogger>();
  if (env != nullptr) o.env = env;
  o.max_background_jobs = 2;
  o.env->SetBackgroundThreads(2, rocksdb::Env::LOW);
  o.env->SetBackgroundThreads(1, rocksdb::Env::HIGH);
  o.write_buffer_size = kWriteBufferBytes;
  o.max_write_buffer_number = 3;
  o.compaction_filter = filter;
  o.periodic_compaction_seconds = kPeriodicCompactionSeconds;
  o.manual_wal_flush = false;
  // The writer calls Resume() itself before the next batch; RocksDB's own retry thread would
  // make that call return Busy for up to a second.
  o.max_bgerror_resume_count = 0;
  // Most claims are for new keys: a memtable bloom filter answers those without a skiplist walk.
  o.memtable_whole_key_filtering = true;
  o.memtable_prefix_bloom_size_ratio = 0.05;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  t.whole_key_filtering = true;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

StoreStatus ChooseLevelLayout(const std::string& dir, LevelLayout* layout) {
  std::optional<std::string> value;
  StoreStatus read = ReadMetaFile(dir, kLayoutMetaName, &value);
  if (!read.ok()) return read;
  if (value.has_value()) {
    *layout = *value == kDynamicLayoutValue ? LevelLayout::kDynamic : LevelLayout::kStatic;
    return {};
  }
  std::error_code ec;
  if (std::filesystem::exists(dir + "/CURRENT", ec) || ec) {
    *layout = LevelLayout::kStatic;  // a store created before layouts were recorded
    return {};
  }
  *layout = LevelLayout::kDynamic;
  return WriteMetaFile(dir, kLayoutMetaName, kDynamicLayoutValue);
}

}  // namespace idemgate

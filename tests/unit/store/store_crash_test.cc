// SPDX-License-Identifier: Apache-2.0
// Crash: a child completes records with sync=true and reports each; after SIGKILL all are there,
// with the WAL as it was left and with a torn record written over the zeros past its end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "store/rocks_store.h"
#include "store/wal_prewrite.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

constexpr int kChains = 8;           // concurrent claim+complete chains in the child
constexpr int kReportsBeforeKill = 3000;  // ~1 MB of WAL: many chunks of zeros, one after another

std::string Key(uint32_t i) { return std::string("crash-") + std::to_string(i); }

// The child: runs kChains closed loops of claim -> complete -> report on `fd` -> next claim.
[[noreturn]] void ChildMain(const std::string& path, int fd) {
  FakeClock clock;
  RocksStoreOptions o;
  o.path = path;
  o.clock = &clock;
  o.sync = true;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(o, &error);
  if (!store) _exit(2);
  std::atomic<uint32_t> next{0};
  std::function<void()> start = [&] {
    uint32_t i = next++;
    store->Claim(Req(Key(i)), [&, i](ClaimResult r) {
      if (!r.status.ok() || r.outcome != ClaimOutcome::kFresh) _exit(3);
      store->Complete(r.token, Resp(200, Key(i)), [&, i](StoreStatus s) {
        if (!s.ok()) _exit(4);
        if (write(fd, &i, sizeof i) != sizeof i) _exit(5);  // reported: must be durable
        start();
      });
    });
  };
  for (int c = 0; c < kChains; ++c) start();
  for (;;) pause();  // until killed
}

// Runs the child at `path` until it has reported kReportsBeforeKill completions, SIGKILLs it and
// returns every completion it reported.
std::set<uint32_t> KillWhileCompleting(const std::string& path) {
  std::set<uint32_t> reported;
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return reported;
  }
  pid_t pid = fork();
  if (pid < 0) {  // never on to kill(pid): kill(-1) signals every process we may signal
    ADD_FAILURE() << "fork: " << strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return reported;
  }
  if (pid == 0) {
    close(fds[0]);
    ChildMain(path, fds[1]);
  }
  close(fds[1]);
  uint32_t i;
  while (reported.size() < kReportsBeforeKill && read(fds[0], &i, sizeof i) == sizeof i) {
    reported.insert(i);
  }
  EXPECT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child exited by itself, status " << status;
  while (read(fds[0], &i, sizeof i) == sizeof i) reported.insert(i);  // reported before death
  close(fds[0]);
  EXPECT_GE(reported.size(), static_cast<size_t>(kReportsBeforeKill));
  return reported;
}

// How many of `reported` the store at `path` does not hold as completed with their body.
int MissingAfterReopen(const std::string& path, const std::set<uint32_t>& reported) {
  FakeClock clock;
  std::unique_ptr<Store> store = OpenRocksAt(path, &clock);
  if (!store) return static_cast<int>(reported.size());
  int missing = 0;
  for (uint32_t k : reported) {
    LookupResult l = store->Lookup(Scope(7), Key(k));
    if (l.outcome != LookupOutcome::kFound || l.record.state != RecordState::kCompleted ||
        l.record.response.body != Key(k)) {
      ++missing;
    }
  }
  return missing;
}

// The newest WAL in `path`, read whole; its name in *name.
std::string NewestWal(const std::string& path, std::string* name) {
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    std::string n = e.path().string();
    if (e.path().extension() == ".log" && n > *name) *name = n;
  }
  std::ifstream in(*name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Where the log's records end, read as RocksDB's log format: 32 KiB blocks of records, each with
// a 7-byte header (checksum, 2-byte length, type), a block's last < 7 bytes left as zeros; the
// records end at the first all-zero header or the file's end.
size_t RecordsEnd(const std::string& wal) {
  constexpr size_t kBlock = 32 << 10;
  constexpr size_t kHeader = 7;
  size_t at = 0;
  while (at + kHeader <= wal.size()) {
    size_t left = kBlock - at % kBlock;
    if (left < kHeader) {
      at += left;
      continue;
    }
    size_t length = static_cast<uint8_t>(wal[at + 4]) | static_cast<uint8_t>(wal[at + 5]) << 8;
    if (length == 0 && wal[at + 6] == 0) break;
    at += kHeader + length;
  }
  return std::min(at, wal.size());
}

TEST(StoreCrash, EveryReportedCompletionSurvivesSigkill) {
  TempDir dir;
  std::string path = dir.path() + "/db";
  std::set<uint32_t> reported = KillWhileCompleting(path);
  ASSERT_FALSE(reported.empty());
  if (WalPrewriteHelps(dir.path())) {
    // The kill left the WAL as the prewrite writes it: records, then zeros to a chunk boundary.
    std::string name;
    std::string wal = NewestWal(path, &name);
    EXPECT_EQ(wal.size() % kWalPrewriteChunkBytes, 0u) << name << ": " << wal.size() << " bytes";
    EXPECT_GE(wal.size() - RecordsEnd(wal), kWalPrewriteChunkBytes / 2) << name;
  }
  EXPECT_EQ(MissingAfterReopen(path, reported), 0) << "of " << reported.size()
                                                  << " reported completions";
}

// A power cut can tear the write in flight: part of a record lands over the zeros past the last
// synced one. Recovery stops at the torn record and keeps every record before it.
TEST(StoreCrash, ATornRecordOverTheZerosLosesNothingReported) {
  TempDir dir;
  std::string path = dir.path() + "/db";
  if (!WalPrewriteHelps(dir.path())) GTEST_SKIP() << dir.path() << " is not ext4 or XFS";
  std::set<uint32_t> reported = KillWhileCompleting(path);
  ASSERT_FALSE(reported.empty());
  std::string name;
  std::string wal = NewestWal(path, &name);
  size_t end = RecordsEnd(wal);
  ASSERT_GT(wal.size() - end, 200u) << "no zeros past the records in " << name;
  // A header (bad checksum, 100 bytes, a full record) and 40 of its 100 bytes; zeros after.
  const unsigned char torn[7] = {0xde, 0xad, 0xbe, 0xef, 100, 0, 1};
  {
    std::fstream f(name, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(end));
    f.write(reinterpret_cast<const char*>(torn), sizeof torn);
    f.write(std::string(40, 'x').data(), 40);
    ASSERT_TRUE(f.good());
  }
  EXPECT_EQ(MissingAfterReopen(path, reported), 0) << "of " << reported.size()
                                                  << " reported completions";
}

}  // namespace
}  // namespace idemgate

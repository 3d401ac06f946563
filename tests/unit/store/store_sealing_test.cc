// SPDX-License-Identifier: Apache-2.0
// Encryption at rest below the store seam (SPEC §13): key files refused as E1 says, sealed bytes
// that hide the answer and open only for their own record, attempt and scope (E2), and a
// SealedStore over RocksDB: clear records from before, a copied value, a missing or wrong key,
// rotation and retirement (E5, E6).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "store/rocks_store_internal.h"
#include "store/sealed_store.h"
#include "store/sealing.h"
#include "tests/unit/store/store_backends.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

// No 4 bytes repeat inside it: a compressed table of the control still holds it literally.
constexpr char kMarker[] = "MARKER-4929381373652047";

StoredResponse Answer() {
  StoredResponse r;
  r.status = 201;
  r.reason = "Created";
  r.headers = {{"Content-Type", "application/json"}, {"X-Card", kMarker}};
  r.body = std::string("{\"card\":\"") + kMarker + "\"}";
  return r;
}

std::shared_ptr<const SealKeys> Keys(const std::map<std::string, std::string>& files,
                                     const std::string& active) {
  std::string error;
  auto keys = LoadSealKeys(files, active, &error);
  EXPECT_NE(keys, nullptr) << error;
  return keys;
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// The files under `dir` (recursively) whose bytes hold `needle`; every file read is counted.
std::vector<std::string> FilesHolding(const std::string& dir, std::string_view needle,
                                      int* files_read) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    ++*files_read;
    if (Contains(bytes.str(), needle)) found.push_back(e.path().filename().string());
  }
  return found;
}

class KeyFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text, mode_t mode) {
    const std::string path = dir_.path() + "/k" + std::to_string(++n_) + ".key";
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  std::string Refusal(const std::string& path) {
    std::array<uint8_t, kSealKeyBytes> key{};
    std::string error;
    EXPECT_FALSE(ReadKeyFile(path, &key, &error)) << path;
    EXPECT_TRUE(Contains(error, path)) << error;  // the message names the file
    return error;
  }
  TempDir dir_;
  int n_ = 0;
};

TEST_F(KeyFileTest, AcceptsSixtyFourHexDigitsWithOrWithoutANewline) {
  std::array<uint8_t, kSealKeyBytes> key{};
  std::string error;
  EXPECT_TRUE(ReadKeyFile(Write(std::string(64, 'A') + "\n", 0600), &key, &error)) << error;
  EXPECT_EQ(key[0], 0xAA);
  EXPECT_TRUE(ReadKeyFile(Write(std::string(63, '0') + "f", 0400), &key, &error)) << error;
  EXPECT_EQ(key[31], 0x0F);
}

TEST_F(KeyFileTest, RefusesWhatOthersCouldReadOrWhatIsNotAKey) {
  const std::string key = std::string(64, 'a') + "\n";
  EXPECT_TRUE(Contains(Refusal(Write(key, 0644)), "mode 0644"));
  EXPECT_TRUE(Contains(Refusal(Write(key, 0640)), "chmod 600"));
  EXPECT_TRUE(Contains(Refusal(Write(std::string(62, 'a'), 0600)), "64 hex digits"));
  EXPECT_TRUE(Contains(Refusal(Write(std::string(64, 'g'), 0600)), "64 hex digits"));
  EXPECT_TRUE(Contains(Refusal(Write(key + "\n", 0600)), "64 hex digits"));
  EXPECT_TRUE(Contains(Refusal(dir_.path() + "/absent.key"), "cannot open"));
  EXPECT_TRUE(Contains(Refusal(dir_.path()), "not a regular file"));
}

TEST_F(KeyFileTest, RefusesAFileOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the file to another user";
  const std::string path = Write(std::string(64, 'a'), 0600);
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(Contains(Refusal(path), "owned by uid 65534"));
}

class SealingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    k1_ = WriteKeyFile(dir_, "k1", '1');
    k2_ = WriteKeyFile(dir_, "k2", '2');
    keys_ = Keys({{"k1", k1_}, {"k2", k2_}}, "k1");
  }
  OpenResult Open(const SealKeys& keys, const SealIdentity& id, const StoredResponse& sealed,
                  StoredResponse* out = nullptr) {
    StoredResponse ignored;
    std::string key_id;
    return OpenResponse(keys, id, sealed, out != nullptr ? out : &ignored, &key_id);
  }
  TempDir dir_;
  std::string k1_, k2_;
  std::shared_ptr<const SealKeys> keys_;
  const std::string record_ = MakeRecordKey(Scope(7), "key-1");
};

TEST_F(SealingTest, SealedBytesHideTheAnswerAndOpenToIt) {
  auto sealed = SealResponse(*keys_->active(), {record_, 1}, Answer());
  ASSERT_TRUE(sealed);
  EXPECT_TRUE(IsSealed(*sealed));
  EXPECT_EQ(SealedKeyId(*sealed), "k1");
  EXPECT_FALSE(Contains(EncodeRecord(Record{.response = *sealed}), kMarker));
  EXPECT_FALSE(Contains(sealed->body, "Created"));
  StoredResponse opened;
  EXPECT_EQ(Open(*keys_, {record_, 1}, *sealed, &opened), OpenResult::kOk);
  EXPECT_EQ(opened, Answer());
  // The same identity and answer seal to the same bytes (a retried Complete is the same one);
  // a different answer, to different ones.
  EXPECT_EQ(*SealResponse(*keys_->active(), {record_, 1}, Answer()), *sealed);
  StoredResponse other = Answer();
  other.body += " ";
  EXPECT_NE(SealResponse(*keys_->active(), {record_, 1}, other)->body.substr(30),
            sealed->body.substr(30));
}

TEST_F(SealingTest, OpensOnlyForItsOwnRecordAttemptAndScope) {
  auto sealed = SealResponse(*keys_->active(), {record_, 2}, Answer());
  ASSERT_TRUE(sealed);
  EXPECT_EQ(Open(*keys_, {record_, 2}, *sealed), OpenResult::kOk);
  EXPECT_EQ(Open(*keys_, {record_, 1}, *sealed), OpenResult::kRejected);  // another attempt
  EXPECT_EQ(Open(*keys_, {MakeRecordKey(Scope(7), "key-2"), 2}, *sealed),
            OpenResult::kRejected);  // another key
  EXPECT_EQ(Open(*keys_, {MakeRecordKey(Scope(8), "key-1"), 2}, *sealed),
            OpenResult::kRejected);  // another scope
}

TEST_F(SealingTest, AlteredTruncatedOrWronglyKeyedBytesDoNotOpen) {
  auto sealed = SealResponse(*keys_->active(), {record_, 1}, Answer());
  ASSERT_TRUE(sealed);
  for (size_t at : {size_t{7}, size_t{12}, sealed->body.size() / 2, sealed->body.size() - 1}) {
    StoredResponse flipped = *sealed;
    flipped.body[at] ^= 0x01;
    EXPECT_NE(Open(*keys_, {record_, 1}, flipped), OpenResult::kOk) << "byte " << at;
  }
  // Cut into the ciphertext and the tag: the lengths no longer hold.
  for (size_t cut : {size_t{1}, sealed->body.size() - 40, sealed->body.size() - 8}) {
    StoredResponse truncated = *sealed;
    truncated.body.resize(truncated.body.size() - cut);
    EXPECT_EQ(Open(*keys_, {record_, 1}, truncated), OpenResult::kRejected) << "cut " << cut;
  }
  // The same id with other bytes (a wrong key file): rejected, not a garbled answer.
  auto wrong = Keys({{"k1", k2_}}, "");
  EXPECT_EQ(Open(*wrong, {record_, 1}, *sealed), OpenResult::kRejected);
  // A key id that is not loaded.
  auto only_k2 = Keys({{"k2", k2_}}, "k2");
  std::string key_id;
  StoredResponse out;
  EXPECT_EQ(OpenResponse(*only_k2, {record_, 1}, *sealed, &out, &key_id), OpenResult::kNoKey);
  EXPECT_EQ(key_id, "k1");
}

// A SealedStore over a real RocksDB.
class SealedStoreTest : public SealingTest {
 protected:
  void SetUp() override {
    SealingTest::SetUp();
    Open();
  }
  void TearDown() override { Close(); }
  void Open() {
    auto rocks = OpenRocksAt(dir_.path() + "/db", &clock_);
    ASSERT_NE(rocks, nullptr);
    inner_ = rocks.get();
    store_ = std::make_unique<SealedStore>(std::move(rocks), keys_);
  }
  void Close() {
    if (store_) store_->Close();
    store_.reset();
    inner_ = nullptr;
  }
  // A completed record on `store`, the fingerprint Fp(1).
  void Completed(Store& store, ClaimRequest request, const StoredResponse& answer = Answer()) {
    ClaimResult claim = ClaimNow(store, std::move(request));
    ASSERT_TRUE(claim.status.ok()) << claim.status.message;
    ASSERT_EQ(claim.outcome, ClaimOutcome::kFresh);
    ASSERT_TRUE(CompleteNow(store, claim.token, answer).ok());
  }
  FakeClock clock_;
  Store* inner_ = nullptr;  // the RocksStore under store_
  std::unique_ptr<SealedStore> store_;
};

TEST_F(SealedStoreTest, StoresSealedBytesAndReplaysTheAnswer) {
  Completed(*store_, Req("a"));
  LookupResult raw = inner_->Lookup(Scope(7), "a", LookupMode::kMayBlock);
  ASSERT_EQ(raw.outcome, LookupOutcome::kFound);
  EXPECT_TRUE(IsSealed(raw.record.response));
  EXPECT_FALSE(Contains(EncodeRecord(raw.record), kMarker));
  ClaimResult replay = ClaimNow(*store_, Req("a"));
  ASSERT_EQ(replay.outcome, ClaimOutcome::kReplay) << replay.status.message;
  EXPECT_EQ(replay.record.response, Answer());
  EXPECT_EQ(store_->Lookup(Scope(7), "a", LookupMode::kMayBlock).record.response, Answer());
  // The same Complete again (its first write reported a failure but landed) is still ok.
  ClaimRequest again = Req("b");
  ClaimResult fresh = ClaimNow(*store_, again);
  ASSERT_TRUE(CompleteNow(*store_, fresh.token, Answer()).ok());
  EXPECT_TRUE(CompleteNow(*store_, fresh.token, Answer()).ok());
}

// A sealed value written onto another record (key, attempt, scope) is refused: 503 material,
// never a replay of someone else's answer.
TEST_F(SealedStoreTest, AValueCopiedOntoAnotherRecordDoesNotOpen) {
  Completed(*store_, Req("a"));
  const StoredResponse sealed =
      inner_->Lookup(Scope(7), "a", LookupMode::kMayBlock).record.response;
  ClaimRequest other_scope = Req("a");
  other_scope.scope = Scope(9);
  for (ClaimRequest target : {Req("b"), other_scope}) {
    Completed(*inner_, target, sealed);  // written below the seam, as an attacker would
    ClaimResult r = ClaimNow(*store_, target);
    EXPECT_EQ(r.status.code, StoreCode::kSealed) << target.key;
    EXPECT_TRUE(Contains(r.status.message, "\"k1\"")) << r.status.message;
    EXPECT_EQ(store_->Lookup(target.scope, target.key, LookupMode::kMayBlock).outcome,
              LookupOutcome::kError);
  }
  // Another attempt of the same record: taken over (attempt 2), then completed with attempt 1's
  // sealed bytes.
  ClaimResult first = ClaimNow(*store_, Req("c", 1, 1'000));
  clock_.Advance(2'000);
  ClaimResult takeover = ClaimNow(*inner_, Req("c", 1, 1'000));
  ASSERT_EQ(takeover.outcome, ClaimOutcome::kTakeover);
  auto attempt1 = SealResponse(*keys_->active(), {first.token.record_key, 1}, Answer());
  ASSERT_TRUE(CompleteNow(*inner_, takeover.token, *attempt1).ok());
  EXPECT_EQ(ClaimNow(*store_, Req("c", 1, 1'000)).status.code, StoreCode::kSealed);
  EXPECT_EQ(store_->Stats().front().failures, 5u);  // each target: a claim and a lookup
}

// E5 and E6: a key taken away makes its records refuse (naming it) and others still open; put
// back, they replay again. Rotation: the new key seals, the old keeps opening what it sealed.
TEST_F(SealedStoreTest, RotationRetirementAndAKeyPutBack) {
  Completed(*store_, Req("old"));
  store_->SetKeys(Keys({{"k1", k1_}, {"k2", k2_}}, "k2"));
  Completed(*store_, Req("new"));
  EXPECT_EQ(SealedKeyId(inner_->Lookup(Scope(7), "new", LookupMode::kMayBlock).record.response),
            "k2");
  EXPECT_EQ(ClaimNow(*store_, Req("old")).outcome, ClaimOutcome::kReplay);
  store_->SetKeys(Keys({{"k2", k2_}}, "k2"));  // k1 retired
  ClaimResult refused = ClaimNow(*store_, Req("old"));
  EXPECT_EQ(refused.status.code, StoreCode::kSealed);
  EXPECT_TRUE(Contains(refused.status.message, "\"k1\", which is not loaded"))
      << refused.status.message;
  EXPECT_EQ(ClaimNow(*store_, Req("new")).record.response, Answer());
  // Refused is not executed: the record is still there, completed, and replays with k1 back.
  store_->SetKeys(Keys({{"k1", k1_}, {"k2", k2_}}, "k2"));
  ClaimResult back = ClaimNow(*store_, Req("old"));
  ASSERT_EQ(back.outcome, ClaimOutcome::kReplay) << back.status.message;
  EXPECT_EQ(back.record.response, Answer());
  std::map<std::string, SealKeyStats> stats;
  for (const SealKeyStats& s : store_->Stats()) stats[s.id] = s;
  EXPECT_EQ(stats["k1"].seals, 1u);
  EXPECT_EQ(stats["k2"].seals, 1u);
  EXPECT_TRUE(stats["k2"].active);
  EXPECT_FALSE(stats["k1"].active);
  EXPECT_GT(stats["k1"].last_seal_unix_ms, 0);
  EXPECT_EQ(stats["k1"].failures, 1u);
  EXPECT_TRUE(Contains(store_->RenderMetrics(), "idemgate_store_key_seals_total{key=\"k2\"} 1"));
}

// Turning encryption on over a store with clear records: they replay as stored, and one
// written with the plain fingerprint is compared as written (E3, E6).
TEST_F(SealedStoreTest, ClearRecordsFromBeforeReplayAndKeepTheirFingerprints) {
  Completed(*inner_, Req("clear", 1));    // before encryption: plain fingerprint Fp(1), in clear
  ClaimRequest keyed = Req("clear", 42);  // with encryption on the guard sends a keyed one...
  keyed.legacy_fingerprint = Fp(1);       // ...and the plain one beside it
  ClaimResult replay = ClaimNow(*store_, keyed);
  ASSERT_EQ(replay.outcome, ClaimOutcome::kReplay) << replay.status.message;
  EXPECT_EQ(replay.record.response, Answer());
  // A different request on that key is still a mismatch; a new key is stored keyed.
  ClaimRequest different = Req("clear", 43);
  different.legacy_fingerprint = Fp(2);
  EXPECT_EQ(ClaimNow(*store_, different).outcome, ClaimOutcome::kMismatch);
  keyed.key = "new";
  Completed(*store_, keyed);
  EXPECT_EQ(inner_->Lookup(Scope(7), "new", LookupMode::kMayBlock).record.fingerprint, Fp(42));
  // An in-flight clear record with an expired lease is taken over as before.
  ClaimResult first = ClaimNow(*inner_, Req("inflight", 1, 1'000));
  ASSERT_EQ(first.outcome, ClaimOutcome::kFresh);
  clock_.Advance(2'000);
  keyed.key = "inflight";
  keyed.lease_ms = 1'000;
  EXPECT_EQ(ClaimNow(*store_, keyed).outcome, ClaimOutcome::kTakeover);
}

// The answer's marker in no file of the store: the write-ahead log, the tables a flush and a
// compaction wrote, the MANIFEST; the control (no active key: nothing sealed) holds it.
TEST_F(SealedStoreTest, NoFileOfTheStoreHoldsTheAnswerAfterAFlushAndACompaction) {
  for (bool sealing : {true, false}) {
    SCOPED_TRACE(sealing ? "sealing" : "control");
    Close();
    std::filesystem::remove_all(dir_.path() + "/db");
    Open();
    if (!sealing) store_->SetKeys(Keys({{"k1", k1_}}, ""));
    for (int i = 0; i < 50; ++i) Completed(*store_, Req("k" + std::to_string(i)));
    int read = 0;
    std::vector<std::string> wal = FilesHolding(dir_.path() + "/db", kMarker, &read);
    ASSERT_TRUE(CompactRocksStore(inner_).ok());  // flushes the memtable, then compacts
    std::vector<std::string> tables = FilesHolding(dir_.path() + "/db", kMarker, &read);
    Close();  // and reopened: the log replayed
    Open();
    EXPECT_EQ(ClaimNow(*store_, Req("k7")).record.response, Answer());
    std::vector<std::string> reopened = FilesHolding(dir_.path() + "/db", kMarker, &read);
    EXPECT_GT(read, 10);
    if (sealing) {
      EXPECT_TRUE(wal.empty()) << wal.front();
      EXPECT_TRUE(tables.empty()) << tables.front();
      EXPECT_TRUE(reopened.empty()) << reopened.front();
    } else {
      EXPECT_FALSE(wal.empty());
      EXPECT_FALSE(tables.empty());
      bool sst = false;
      for (const std::string& f : tables) sst = sst || f.ends_with(".sst");
      EXPECT_TRUE(sst);
    }
  }
}

// With no key listed a sealed record (left from a run with encryption on) is refused, never
// replayed as its stored bytes; clear records pass through untouched.
TEST_F(SealedStoreTest, WithoutKeysASealedRecordIsRefused) {
  Completed(*store_, Req("sealed"));
  store_->SetKeys(Keys({}, ""));
  Completed(*store_, Req("clear"));
  EXPECT_EQ(ClaimNow(*store_, Req("sealed")).status.code, StoreCode::kSealed);
  EXPECT_FALSE(IsSealed(inner_->Lookup(Scope(7), "clear", LookupMode::kMayBlock).record.response));
  EXPECT_EQ(ClaimNow(*store_, Req("clear")).record.response, Answer());
}

}  // namespace
}  // namespace idemgate

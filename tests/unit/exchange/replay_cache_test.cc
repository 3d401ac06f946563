// SPDX-License-Identifier: Apache-2.0
// ReplayCache and UnsentBudget: one shared copy per completed record, gone with a delete or its
// expiry, bounded in bytes; one charge per shared body, released by its last holder.
#include "proxy/exchange/replay_cache.h"

#include <gtest/gtest.h>

#include "proxy/conn/unsent_budget.h"

namespace idemgate {
namespace {

ScopeId Scope(uint8_t b) {
  ScopeId scope{};
  scope.fill(b);
  return scope;
}

Record Completed(std::string body, TimeMs expires_ms = 1'000) {
  Record record;
  record.state = RecordState::kCompleted;
  record.fingerprint.fill(7);
  record.expires_ms = expires_ms;
  record.response.status = 201;
  record.response.body = std::move(body);
  return record;
}

TEST(ReplayCache, EveryReplayOfARecordSharesOneResponse) {
  ReplayCache cache(1 << 20);
  auto first = cache.Keep(Scope(1), "k", Completed("answer"), cache.generation());
  auto second = cache.Keep(Scope(1), "k", Completed("answer"), cache.generation());
  EXPECT_EQ(first.get(), second.get());
  auto hit = cache.Find(Scope(1), "k", 10);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->response.get(), first.get());
  EXPECT_EQ(hit->fingerprint, Completed("").fingerprint);
  EXPECT_FALSE(cache.Find(Scope(2), "k", 10));  // another scope's key is another record
  EXPECT_FALSE(hit->plain);  // encryption off: the stored fingerprint is the plain one
}

// Encryption on: the plain digest of the request that matched the keyed one is kept beside it.
TEST(ReplayCache, KeepsThePlainDigestOfTheMatchingRequest) {
  ReplayCache cache(1 << 20);
  Fingerprint plain{};
  plain.fill(9);
  cache.Keep(Scope(1), "k", Completed("answer"), cache.generation(), plain);
  auto hit = cache.Find(Scope(1), "k", 10);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->fingerprint, Completed("").fingerprint);
  ASSERT_TRUE(hit->plain);
  EXPECT_EQ(*hit->plain, plain);
}

TEST(ReplayCache, ExpiredRecordIsNotFound) {
  ReplayCache cache(1 << 20);
  cache.Keep(Scope(1), "k", Completed("answer", 100), cache.generation());
  EXPECT_TRUE(cache.Find(Scope(1), "k", 99));
  EXPECT_FALSE(cache.Find(Scope(1), "k", 100));
}

// A record read before a delete finished is not cached after it (it may be gone already).
TEST(ReplayCache, DeleteEvictsAndStopsEarlierReadsFromCaching) {
  ReplayCache cache(1 << 20);
  cache.Keep(Scope(1), "k", Completed("answer"), cache.generation());
  uint64_t read_before_delete = cache.generation();
  cache.Erase(Scope(1), "k");
  EXPECT_FALSE(cache.Find(Scope(1), "k", 10));
  auto response = cache.Keep(Scope(1), "k", Completed("answer"), read_before_delete);
  EXPECT_EQ(response->body, "answer");  // still answered with
  EXPECT_FALSE(cache.Find(Scope(1), "k", 10));
}

TEST(ReplayCache, BoundedInBytesLeastRecentlyUsedGoesFirst) {
  ReplayCache cache(4'000);
  cache.Keep(Scope(1), "a", Completed(std::string(600, 'a')), cache.generation());
  cache.Keep(Scope(1), "b", Completed(std::string(600, 'b')), cache.generation());
  ASSERT_TRUE(cache.Find(Scope(1), "a", 10));  // a is now the most recent
  for (int i = 0; i < 6; ++i) {
    cache.Keep(Scope(1), "c" + std::to_string(i), Completed(std::string(600, 'c')),
               cache.generation());
    cache.Find(Scope(1), "a", 10);
  }
  EXPECT_LE(cache.bytes(), 4'000u);
  EXPECT_TRUE(cache.Find(Scope(1), "a", 10));
  EXPECT_FALSE(cache.Find(Scope(1), "b", 10));
  // Over a quarter of the capacity: answered with, not cached.
  auto big = cache.Keep(Scope(1), "big", Completed(std::string(2'000, 'x')), cache.generation());
  EXPECT_EQ(big->body.size(), 2'000u);
  EXPECT_FALSE(cache.Find(Scope(1), "big", 10));
}

TEST(UnsentBudget, ASharedBodyIsChargedOnceUntilItsLastHolderLetsGo) {
  UnsentBudget budget;
  auto shared = std::make_shared<const StoredResponse>(StoredResponse{200, "", {}, "0123456789"});
  auto a = budget.Charge(shared, 15);
  auto b = budget.Charge(shared, 15);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(budget.bytes(), 10u);
  auto other = std::make_shared<const StoredResponse>(StoredResponse{200, "", {}, "0123456789"});
  EXPECT_FALSE(budget.Charge(other, 15));  // 10 + 10 > 15
  a.reset();
  EXPECT_EQ(budget.bytes(), 10u);
  b.reset();
  EXPECT_EQ(budget.bytes(), 0u);
  auto big =
      std::make_shared<const StoredResponse>(StoredResponse{200, "", {}, std::string(99, 'x')});
  EXPECT_TRUE(budget.Charge(big, 15));  // alone, even a body over the limit goes
}

}  // namespace
}  // namespace idemgate

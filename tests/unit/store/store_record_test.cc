// Record encoding: round trips, and decoding never crashes or accepts damaged bytes.
#include <gtest/gtest.h>

#include <random>

#include "store/record.h"

namespace idemgate {
namespace {

Record SampleRecord() {
  Record r;
  r.state = RecordState::kCompleted;
  r.attempt = 3;
  r.owner = 0x0123456789abcdefULL;
  for (size_t i = 0; i < r.fingerprint.size(); ++i) r.fingerprint[i] = static_cast<uint8_t>(i * 7);
  r.created_ms = 1'700'000'000'000;
  r.expires_ms = 1'700'086'400'000;
  r.lease_until_ms = 1'700'000'030'000;
  r.response.status = 201;
  r.response.reason = "Created";
  r.response.headers = {{"Content-Type", "application/json"}, {"X-Empty", ""}, {"Set-Cookie", "a=b"}};
  r.response.body = std::string("{\"id\":\"pay_1\"}\0binary\xff", 22);
  return r;
}

TEST(StoreRecord, RoundTrips) {
  Record r = SampleRecord();
  std::optional<Record> back = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, r);
}

TEST(StoreRecord, RoundTripsEmptyInFlightRecord) {
  Record r;
  r.attempt = 1;
  r.owner = 42;
  r.expires_ms = 99;
  std::optional<Record> back = DecodeRecord(EncodeRecord(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, r);
}

TEST(StoreRecord, FixedHeaderLayoutIsLittleEndian) {
  Record r = SampleRecord();
  std::string bytes = EncodeRecord(r);
  ASSERT_GE(bytes.size(), 70u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), kRecordFormatVersion);
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), static_cast<uint8_t>(RecordState::kCompleted));
  EXPECT_EQ(static_cast<uint8_t>(bytes[2]), 3);  // attempt, low byte first
  EXPECT_EQ(static_cast<uint8_t>(bytes[6]), 0xef);  // owner, low byte first
  EXPECT_EQ(bytes.substr(38, 32),
            std::string(reinterpret_cast<const char*>(r.fingerprint.data()), 32));
}

TEST(StoreRecord, HeaderDecodesFromHeaderAlone) {
  Record r = SampleRecord();
  std::string bytes = EncodeRecord(r);
  auto header = DecodeRecordHeader(std::string_view(bytes).substr(0, 70));
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->version, kRecordFormatVersion);
  EXPECT_EQ(header->state, RecordState::kCompleted);
  EXPECT_EQ(header->expires_ms, r.expires_ms);
  EXPECT_FALSE(DecodeRecordHeader(std::string_view(bytes).substr(0, 69)).has_value());
}

TEST(StoreRecord, EveryTruncationIsRejected) {
  std::string bytes = EncodeRecord(SampleRecord());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeRecord(std::string_view(bytes).substr(0, n)).has_value()) << n;
  }
}

TEST(StoreRecord, TrailingGarbageIsRejected) {
  std::string bytes = EncodeRecord(SampleRecord());
  EXPECT_FALSE(DecodeRecord(bytes + "x").has_value());
}

TEST(StoreRecord, UnknownVersionIsRejected) {
  std::string bytes = EncodeRecord(SampleRecord());
  for (int v : {0, 3, 255}) {
    bytes[0] = static_cast<char>(v);
    EXPECT_FALSE(DecodeRecord(bytes).has_value());
    EXPECT_FALSE(DecodeRecordHeader(bytes).has_value());
  }
}

TEST(StoreRecord, UnknownStateIsRejected) {
  std::string bytes = EncodeRecord(SampleRecord());
  bytes[1] = 7;
  EXPECT_FALSE(DecodeRecord(bytes).has_value());
  EXPECT_FALSE(DecodeRecordHeader(bytes).has_value());
}

TEST(StoreRecord, HugeLengthsAreRejected) {
  std::string bytes = EncodeRecord(SampleRecord());
  // The header count follows status(2) + reason length(4) + "Created"(7) after the header.
  size_t count_at = 78 + 2 + 4 + 7;  // 70 + completed_ms (8)
  for (int i = 0; i < 4; ++i) bytes[count_at + i] = '\xff';
  EXPECT_FALSE(DecodeRecord(bytes).has_value());
  std::string reason_len = EncodeRecord(SampleRecord());
  for (int i = 0; i < 4; ++i) reason_len[80 + i] = '\xff';
  EXPECT_FALSE(DecodeRecord(reason_len).has_value());
}

TEST(StoreRecord, RandomBytesNeverCrash) {
  std::mt19937_64 rng(12345);
  std::string good = EncodeRecord(SampleRecord());
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(rng() % 200);
      for (char& c : bytes) c = static_cast<char>(rng());
      if (!bytes.empty()) bytes[0] = static_cast<char>(kRecordFormatVersion);
      if (bytes.size() > 1) bytes[1] = static_cast<char>(1 + rng() % 2);
    } else {  // flip a few bytes of a valid record
      bytes = good;
      for (int k = 0; k < 3; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    std::optional<Record> r = DecodeRecord(bytes);
    if (r.has_value() && bytes[0] == static_cast<char>(kRecordFormatVersion)) {
      EXPECT_EQ(EncodeRecord(*r), bytes);  // only exact encodings decode
    }
    (void)DecodeRecordHeader(bytes);
  }
}

// R6: format 2 keeps when the response was stored; format 1 (no completed_ms) is still read.
TEST(StoreRecord, CompletedTimeRoundTripsAndFormatOneStillDecodes) {
  Record r = SampleRecord();
  r.completed_ms = 1'700'000'123'456;
  std::string v2 = EncodeRecord(r);
  std::optional<Record> back = DecodeRecord(v2);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->completed_ms, r.completed_ms);
  std::string v1 = v2.substr(0, 70) + v2.substr(78);  // format 1: no completed_ms
  v1[0] = 1;
  std::optional<Record> old = DecodeRecord(v1);
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->completed_ms, 0);
  EXPECT_EQ(old->response, r.response);
  EXPECT_EQ(old->created_ms, r.created_ms);
  auto header = DecodeRecordHeader(v1);
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->version, 1);
  EXPECT_EQ(header->expires_ms, r.expires_ms);
}

TEST(StoreRecord, RecordKeyIsScopeThenKey) {
  ScopeId scope{};
  scope[0] = 0xaa;
  scope[31] = 0xbb;
  std::string k = MakeRecordKey(scope, "order-1001");
  ASSERT_EQ(k.size(), 32u + 10u);
  EXPECT_EQ(static_cast<uint8_t>(k[0]), 0xaa);
  EXPECT_EQ(static_cast<uint8_t>(k[31]), 0xbb);
  EXPECT_EQ(k.substr(32), "order-1001");
}

}  // namespace
}  // namespace idemgate

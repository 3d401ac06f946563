// record_id: the Idempotency-Record value (SPEC §12 A1) is the documented formula
// (docs/fencing.md), which the PostgreSQL schema computes too; a vector computed outside the code
// (Python's hashlib), and the header lines.
#include "proxy/policy/record_id.h"

#include <gtest/gtest.h>

namespace idemgate {
namespace {

ScopeId Bytes0To31() {
  ScopeId s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i);
  return s;
}

TEST(RecordId, IsTheDocumentedDigest) {
  // hashlib.sha256(b"idemgate-record-v1\0" + bytes(range(32)) + b"order-1001").hexdigest()[:32]
  EXPECT_EQ(RecordIdHex(Bytes0To31(), "order-1001"), "efcbdced62623f5cf8b91283edeab701");
  EXPECT_NE(RecordIdHex(Bytes0To31(), "order-1002"), RecordIdHex(Bytes0To31(), "order-1001"));
  ScopeId other = Bytes0To31();
  other[31] ^= 1;
  EXPECT_NE(RecordIdHex(other, "order-1001"), RecordIdHex(Bytes0To31(), "order-1001"));
}

TEST(RecordId, HeaderLines) {
  EXPECT_EQ(FenceHeaderLines(Bytes0To31(), "order-1001", 3),
            "Idempotency-Attempt: 3\r\nIdempotency-Record: efcbdced62623f5cf8b91283edeab701\r\n");
}

}  // namespace
}  // namespace idemgate

// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: DecodeRecord / DecodeRecordHeader on arbitrary bytes. A value that decodes
// of the current format re-encodes to the same bytes (the encoding is canonical), and the two
// decoders agree.
#include <cstdint>
#include <string>
#include <string_view>

#include "store/record.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace idemgate;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::optional<Record> record = DecodeRecord(bytes);
  std::optional<RecordHeader> header = DecodeRecordHeader(bytes);
  if (!record) return 0;
  FUZZ_CHECK(header.has_value());
  // Format 1 (still read) is re-encoded as the current format.
  if (header->version == kRecordFormatVersion) FUZZ_CHECK(EncodeRecord(*record) == bytes);
  FUZZ_CHECK(header->version == 1 || header->version == kRecordFormatVersion);
  FUZZ_CHECK(header->state == record->state);
  FUZZ_CHECK(header->expires_ms == record->expires_ms);
  FUZZ_CHECK(DecodeRecord(EncodeRecord(*record)) == record);
  return 0;
}

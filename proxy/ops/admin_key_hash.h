// SPDX-License-Identifier: Apache-2.0
// GET /records?key_hash=...: support looks a record up by the key_hash of an access-log line
// (16 hex digits of SHA-256(scope id || key)), without the merchant's credential. The answer
// names each matching record's scope (16 hex digits) and key.
#pragma once

#include <string>
#include <string_view>

#include "store/store.h"

namespace idemgate {

struct AdminAnswer {
  int code = 200;
  const char* reason = "OK";
  std::string body;  // JSON
};

// The JSON of one match's record, as the admin API writes records.
using RecordJsonFn = std::string (*)(const KeyHashMatch& match);

// The answer to a key_hash lookup in `store` (a scan, on the admin thread): 200 with the
// matches, 400 for a malformed key_hash, 404 when none, 503 when the store could not be read.
AdminAnswer KeyHashLookup(Store* store, std::string_view key_hash, RecordJsonFn record_json);

}  // namespace idemgate

// libFuzzer target: upstream bytes -> ResponseParser -> ToStoredResponse -> SerializeResponse,
// and the serialized bytes must parse back to the same status, headers and body.
//
// Input: byte 0 = flags (bit 0: the request was HEAD, bit 1: small body limit, bit 2: replayed,
// bit 3: close), byte 1 = the seed of the split sizes, the rest = what the upstream sends.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/http/http_message.h"
#include "proxy/http/http_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace idemgate {
namespace {

struct Outcome {
  bool complete = false;
  ParseError error = ParseError::kNone;
  std::string detail;
  Response response;
};

// Feeds the pieces as UpstreamConn does, then the upstream's close when nothing completed.
Outcome Parse(std::string_view stream, const std::vector<size_t>& pieces, bool head,
              uint64_t max_body) {
  ResponseParser parser(max_body);
  parser.Begin(head);
  Outcome out;
  size_t offset = 0;
  for (size_t piece : pieces) {
    size_t used = parser.Feed(stream.data() + offset, piece);
    FUZZ_CHECK(used <= piece);
    FUZZ_CHECK(used == piece || parser.message_complete() || parser.error() != ParseError::kNone);
    offset += piece;
    if (parser.message_complete() || parser.error() != ParseError::kNone) break;
  }
  if (!parser.message_complete() && parser.error() == ParseError::kNone) parser.FeedEof();
  out.error = parser.error();
  out.complete = parser.message_complete();
  // FeedEof always settles it: a response, or an error for a person.
  FUZZ_CHECK(out.complete != (out.error != ParseError::kNone));
  out.detail = parser.error_detail();
  if (out.error != ParseError::kNone) FUZZ_CHECK(!out.detail.empty());
  if (out.complete) out.response = parser.TakeResponse();
  return out;
}

bool SameHeaders(const Headers& a, const Headers& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].value != b[i].value) return false;
  }
  return true;
}

bool StatusHasBody(int status) {
  return !((status >= 100 && status < 200) || status == 204 || status == 304);
}

// What the client receives parses back to what was stored.
void CheckRoundTrip(const StoredResponse& stored, bool replayed, bool close, bool head) {
  std::string bytes = SerializeResponse(
      stored, replayed, close ? ConnectionHeader::kClose : ConnectionHeader::kNone, head);
  ResponseParser parser(1 << 24);
  parser.Begin(head);
  size_t used = parser.Feed(bytes.data(), bytes.size());
  if (!parser.message_complete() && parser.error() == ParseError::kNone) parser.FeedEof();
  FUZZ_CHECK(parser.error() == ParseError::kNone);
  FUZZ_CHECK(parser.message_complete());
  FUZZ_CHECK(used == bytes.size());
  Response back = parser.TakeResponse();
  FUZZ_CHECK(back.status == stored.status);
  if (!stored.reason.empty()) FUZZ_CHECK(back.reason == stored.reason);
  const bool body_sent = StatusHasBody(stored.status) && !head;
  FUZZ_CHECK(back.body == (body_sent ? stored.body : std::string()));
  FUZZ_CHECK(back.keep_alive == !close);
  StoredResponse again = ToStoredResponse(back, head);
  // Idempotent-Replayed is the gateway's own: sent on replays, never stored (R2).
  FUZZ_CHECK(again.headers == stored.headers);
  const std::string head_bytes = bytes.substr(0, bytes.find("\r\n\r\n") + 2);  // not the body
  FUZZ_CHECK((head_bytes.find("\r\nIdempotent-Replayed: true\r\n") != std::string::npos) ==
             replayed);
}

}  // namespace
}  // namespace idemgate

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace idemgate;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const bool head = flags & 1;
  const uint64_t max_body = (flags & 2) ? 64 : (8 << 20);
  const bool replayed = flags & 4;
  const bool close = flags & 8;
  std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);

  Outcome whole = Parse(stream, {stream.size()}, head, max_body);
  Outcome split = Parse(stream, fuzz::SplitSizes(data[1], stream.size()), head, max_body);
  if (std::getenv("FUZZ_VERBOSE") != nullptr) {
    for (const Outcome* o : {&whole, &split}) {
      std::fprintf(stderr, "%s: complete %d, error %d (%s)\n", o == &whole ? "whole" : "split",
                   o->complete, static_cast<int>(o->error), o->detail.c_str());
    }
  }
  FUZZ_CHECK(whole.error == split.error);
  FUZZ_CHECK(whole.complete == split.complete);
  if (!whole.complete) return 0;
  const Response& r = whole.response;
  const Response& s = split.response;
  FUZZ_CHECK(r.status == s.status && r.reason == s.reason && r.body == s.body &&
             r.keep_alive == s.keep_alive && SameHeaders(r.headers, s.headers));
  FUZZ_CHECK(r.status >= 200 && r.status <= 999);
  FUZZ_CHECK(r.body.size() <= max_body);
  if (head) FUZZ_CHECK(r.body.empty());

  StoredResponse stored = ToStoredResponse(r, head);
  for (const auto& [name, value] : stored.headers) {
    FUZZ_CHECK(head || !HeaderNameEquals(name, "Content-Length"));  // HEAD keeps its size
    FUZZ_CHECK(!IsHopByHop(name, r.headers));
    FUZZ_CHECK(!HeaderNameEquals(name, "Idempotent-Replayed"));
  }
  CheckRoundTrip(stored, replayed, close, head);
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// Inside H2Session (h2_session.h): the nghttp2 session, each stream's state, and the flood
// counters nghttp2 does not keep itself. Shared by the wrapper (h2_session.cc) and the
// nghttp2 callbacks (h2_session_callbacks.cc); nothing outside proxy/http/ includes it.
#pragma once

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proxy/http/h2_session.h"
#include "store/clock.h"

namespace idemgate {
namespace h2_internal {

// A streamed answer's queued bytes at or below this after a send: OnResponseDrained.
inline constexpr size_t kDrainedBytes = 16 << 10;


// A token bucket: `burst` events at once, refilled at `rate` per second.
class RateLimit {
 public:
  RateLimit(uint64_t burst, uint64_t rate, int64_t now_ms)
      : burst_milli_(burst * 1000), rate_(rate), tokens_milli_(burst * 1000), last_ms_(now_ms) {}
  // False when the event is over the limit.
  bool Take(int64_t now_ms) {
    if (now_ms > last_ms_) {
      const uint64_t refill = static_cast<uint64_t>(now_ms - last_ms_) * rate_;
      tokens_milli_ = std::min(burst_milli_, tokens_milli_ + refill);
      last_ms_ = now_ms;
    }
    if (tokens_milli_ < 1000) return false;
    tokens_milli_ -= 1000;
    return true;
  }

 private:
  uint64_t burst_milli_;
  uint64_t rate_;
  uint64_t tokens_milli_;
  int64_t last_ms_;
};

}  // namespace h2_internal

struct H2Session::Impl {
  struct Stream {
    explicit Stream(int32_t stream_id, const H2Limits& limits)
        : id(stream_id),
          builder(limits.max_header_bytes,
                  limits.max_header_bytes * std::max<uint32_t>(limits.header_bomb_factor, 1)) {}
    int32_t id;
    H2RequestBuilder builder;
    Request request;
    H2BodyPlan plan;
    bool head_done = false;  // OnRequestHead was called (or the request was refused)
    bool rejected = false;   // refused with the gateway's answer: its body is discarded
    bool request_done = false;
    size_t unconsumed = 0;   // kStream: delivered, not yet acknowledged by Consume
    bool answering = false;  // an answer was submitted
    bool answered = false;   // its END_STREAM went out
    // The answer's body: a whole one read from `whole`, or a streamed one queued in `out`.
    std::shared_ptr<const StoredResponse> whole;
    size_t whole_sent = 0;
    std::string out;
    size_t out_sent = 0;
    bool out_end = false;
    bool deferred = false;  // the data source said "nothing now": resume on more
  };

  Impl(H2SessionHandler* h, H2Limits l)
      : handler(h),
        limits(std::move(l)),
        clock(limits.now_ms ? limits.now_ms : MonotonicNowMs),
        control(limits.control_burst, limits.control_rate, clock()),
        resets(limits.reset_burst, limits.reset_rate, clock()) {}

  H2SessionHandler* handler;
  H2Limits limits;
  std::function<int64_t()> clock;
  h2_internal::RateLimit control;
  h2_internal::RateLimit resets;  // RST_STREAM from the client (rapid reset)
  nghttp2_session* session = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams;
  std::vector<int32_t> drained;  // streams whose queued answer fell low in this send
  uint32_t fail_code = 0;        // set by a callback that ends the connection
  std::string reason;
  bool failed = false;   // a connection error: nothing more is read
  bool flooded = false;  // the client floods without reading: no point flushing
  uint32_t goaway_code = 0;
  size_t continuations = 0;  // fallback CONTINUATION count for the header block being read

  Stream* Find(int32_t id) {
    auto it = streams.find(id);
    return it == streams.end() ? nullptr : it->second.get();
  }
  // From a callback: end the connection with GOAWAY(code) once mem_recv returns.
  int Fail(uint32_t code, std::string why) {
    if (fail_code == 0) {
      fail_code = code;
      reason = std::move(why);
    }
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  void Reject(Stream* s, ErrorCode code, const std::string& detail) {
    if (s->rejected) return;
    s->rejected = true;
    s->head_done = true;
    if (s->unconsumed > 0) nghttp2_session_consume(session, s->id, s->unconsumed);
    s->unconsumed = 0;
    handler->OnRequestRejected(s->id, code, detail);
  }
  void OnHead(Stream* s, bool end_stream);
  void SubmitContinue(Stream* s);  // the interim 100 (Continue)
  void OnRequestDone(Stream* s);
  void OnData(Stream* s, const uint8_t* data, size_t len);
  int OnFrameRecv(const nghttp2_frame* frame);
  int OnFrameSend(const nghttp2_frame* frame);
  void OnClose(int32_t id, uint32_t error_code);
  bool Submit(Stream* s, const H2Fields& fields, bool with_body);
  void Setup();
};

}  // namespace idemgate

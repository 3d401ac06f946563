// SPDX-License-Identifier: Apache-2.0
// The far side of an H2Session under test, in process: nghttp2's own client session
// (tests/support/h2_test_client.h) for what a well-behaved client sends, raw frames (header
// blocks encoded by nghttp2's HPACK deflater) for what only an attacker sends, a recording
// handler, and a pump that moves bytes both ways.
#pragma once

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proxy/http/h2_session.h"
#include "proxy/policy/errors.h"
#include "tests/support/h2_frames.h"
#include "tests/support/h2_test_client.h"

namespace idemgate::h2test {

// Records what the session reports; answers refusals with the gateway's JSON error.
struct Recorder : H2SessionHandler {
  H2Session* session = nullptr;
  H2BodyPlan plan;
  bool answer_rejections = true;
  std::map<int32_t, Request> heads, requests;
  std::map<int32_t, std::string> streamed;  // kStream bodies
  std::set<int32_t> ended;
  std::map<int32_t, ErrorCode> rejected;
  std::map<int32_t, std::pair<H2StreamEnd, uint32_t>> closed;
  std::vector<int32_t> drained;

  H2BodyPlan OnRequestHead(int32_t id, Request& head, bool) override {
    heads[id] = head;
    return plan;
  }
  void OnRequest(int32_t id, Request request) override { requests[id] = std::move(request); }
  void OnRequestBody(int32_t id, std::string_view piece) override { streamed[id].append(piece); }
  void OnRequestEnd(int32_t id) override { ended.insert(id); }
  void OnRequestRejected(int32_t id, ErrorCode code, const std::string& detail) override {
    rejected[id] = code;
    if (answer_rejections) Answer(id, MakeErrorResponse(code, detail));
  }
  void OnStreamClosed(int32_t id, H2StreamEnd how, uint32_t code) override {
    closed[id] = {how, code};
  }
  void OnResponseDrained(int32_t id) override { drained.push_back(id); }

  bool Answer(int32_t id, StoredResponse response, bool replayed = false,
              std::string_view extra = {}, bool head = false) {
    auto shared = std::make_shared<const StoredResponse>(std::move(response));
    bool send_body = false;
    H2Fields fields = H2AnswerFields(*shared, replayed, extra, head, "req-1", &send_body);
    return session->SubmitResponse(id, std::move(fields), shared, send_body);
  }
};

// Everything the server has to send now.
inline std::string Drain(H2Session& server) {
  std::string out;
  for (std::string_view piece = server.PullOutput(); !piece.empty(); piece = server.PullOutput()) {
    out.append(piece);
  }
  return out;
}

// Moves bytes both ways until neither side has more.
inline void Pump(TestClient& client, H2Session& server) {
  for (int i = 0; i < 10'000; ++i) {
    std::string up = client.TakeOutput();
    if (!up.empty()) server.Receive(up);
    std::string down = Drain(server);
    client.Feed(down);
    if (up.empty() && down.empty()) return;
  }
  ADD_FAILURE() << "the pump never settled";
}

}  // namespace idemgate::h2test

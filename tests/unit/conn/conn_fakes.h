// SPDX-License-Identifier: Apache-2.0
// In-process fakes for the client side's seam: a ClientEnv whose streamed calls wait for the
// test's answer (FakeStreamCall) and which records reports and closes, and a StreamSink that
// records what a relay hands it. No Worker, no upstream process.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proxy/conn/client_env.h"
#include "proxy/conn/passthrough_relay.h"

namespace idemgate::test {

// One streamed call: what the relay wrote, and the receiver and callback the test answers with.
class FakeStreamCall final : public StreamCall {
 public:
  void WriteBody(std::string_view prefix, std::string_view data, std::string_view suffix) override {
    written.append(prefix).append(data).append(suffix);
  }
  void EndBody() override { ended = true; }
  size_t Unsent() const override { return unsent; }
  void PauseResponse(bool paused) override { response_paused = paused; }
  void Cancel() override { cancelled = true; }

  std::string head;     // what SendStream got (the head and the body read before the call)
  std::string written;  // the body written after
  bool ended = false;
  bool cancelled = false;
  bool response_paused = false;
  size_t unsent = 0;
  UpstreamLimits limits;
  StreamReceiver* receiver = nullptr;
  UpstreamCallback done;
};

class FakeClientEnv final : public ClientEnv {
 public:
  FakeClientEnv() : config(std::make_shared<Config>()) {}

  event_base* base() override { return loop; }
  std::shared_ptr<const Config> Snapshot() override { return config; }
  UnsentBudget* unsent() override { return nullptr; }
  bool draining() const override { return is_draining; }
  int64_t MonoUs() const override { return now_us; }
  Exchange* NewExchange(ResponseSink* sink, std::shared_ptr<const Config> cfg, Request request,
                        const std::string& client_ip, bool tls) override {
    ADD_FAILURE() << "a passthrough request made an exchange";
    return nullptr;
  }
  StreamCall* SendStream(std::string head, bool head_request, const UpstreamLimits& limits,
                         StreamReceiver* receiver, UpstreamCallback done) override {
    if (missing_group) return nullptr;
    calls.push_back(std::make_unique<FakeStreamCall>());
    FakeStreamCall* call = calls.back().get();
    call->head = std::move(head);
    call->limits = limits;
    call->receiver = receiver;
    call->done = std::move(done);
    return call;
  }
  bool WantsAccessEntry() const override { return true; }
  void RecordExchange(const ExchangeSample& sample, const AccessEntry* entry) override {
    samples.push_back(sample);
    ASSERT_NE(entry, nullptr);
    entries.push_back(FormatEntry(*entry));
  }
  void RecordConnectionError(ErrorCode code, Protocol, std::string_view, size_t) override {
    connection_errors.push_back(code);
  }
  void RecordAnswerDropped() override {}
  void ConnectionClosed(ClientConn*, CloseReason reason) override { closes.push_back(reason); }

  FakeStreamCall& call(size_t i = 0) { return *calls.at(i); }

  // The parts of an access-log entry the tests look at (its views die with the call).
  struct Entry {
    std::string method, path, request_id, outcome, error_detail;
    int status = 0;
    uint64_t bytes_out = 0;
    int64_t total_us = 0, upstream_us = -1;
    bool client_closed = false;
  };
  static Entry FormatEntry(const AccessEntry& e) {
    return Entry{std::string(e.method),
                 std::string(e.path),
                 std::string(e.request_id),
                 e.outcome,
                 std::string(e.error_detail),
                 e.status,
                 e.bytes_out,
                 e.total_us,
                 e.upstream_us,
                 e.client_closed};
  }

  event_base* loop = nullptr;
  std::shared_ptr<Config> config;
  bool is_draining = false;
  bool missing_group = false;
  int64_t now_us = 1'000'000;
  std::vector<std::unique_ptr<FakeStreamCall>> calls;
  std::vector<ExchangeSample> samples;
  std::vector<Entry> entries;
  std::vector<ErrorCode> connection_errors;
  std::vector<CloseReason> closes;
};

// Records what the relay hands the client side.
class RecordingStreamSink final : public StreamSink {
 public:
  void SendResponse(std::shared_ptr<const StoredResponse> response, bool replayed,
                    std::string_view extra_headers) override {
    whole.push_back(response);
  }
  void SendHead(const StoredResponse& head, int64_t length, std::string_view request_id,
                bool request_complete) override {
    heads.push_back(head);
    head_length = length;
    head_request_id = std::string(request_id);
  }
  void SendBody(std::string_view piece) override { body.append(piece); }
  void Flush() override { ++flushes; }
  void EndStream(bool clean, bool request_complete) override {
    ends.push_back(clean);
    end_request_complete = request_complete;
  }
  void SendError(std::shared_ptr<const StoredResponse> response, bool request_complete) override {
    errors.push_back(response);
    error_request_complete = request_complete;
  }
  void PauseRequestBody(bool paused) override { request_paused = paused; }
  void ReadRequestBody() override { ++reads; }

  std::vector<std::shared_ptr<const StoredResponse>> whole, errors;
  std::vector<StoredResponse> heads;
  int64_t head_length = 0;
  std::string head_request_id, body;
  int flushes = 0, reads = 0;
  std::vector<bool> ends;
  bool end_request_complete = false, error_request_complete = false;
  bool request_paused = false;
};

}  // namespace idemgate::test

// The far side of an H2Session under test, in process: nghttp2's own client session for what a
// well-behaved client sends, raw frames (header blocks encoded by nghttp2's HPACK deflater) for
// what only an attacker sends, a recording handler, and a pump that moves bytes both ways.
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

#include "proxy/errors.h"
#include "proxy/http/h2_session.h"

namespace idemgate::h2test {

using Fields = std::vector<std::pair<std::string, std::string>>;

// What the client saw of one stream.
struct ClientStream {
  int status = 0;
  Fields headers;  // regular fields of the final answer, as received
  std::string body;
  bool closed = false;
  uint32_t error_code = 0;  // RST_STREAM's (0 = closed cleanly)
  std::string Header(const std::string& name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "<none>";
  }
};

inline std::vector<nghttp2_nv> ToNv(const Fields& fields) {
  std::vector<nghttp2_nv> nva;
  for (const auto& [n, v] : fields) {
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                   NGHTTP2_NV_FLAG_NONE});
  }
  return nva;
}

class TestClient {
 public:
  // `window`: the client's stream window for answers; `auto_window`: false = it acknowledges
  // answer bytes only through Read().
  explicit TestClient(uint32_t window = 65535, bool auto_window = true) {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, OnData);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, OnClose);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, OnFrame);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, auto_window ? 0 : 1);
    nghttp2_option_set_max_send_header_block_length(opt, 4 << 20);
    nghttp2_session_client_new2(&session_, cbs, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1);
  }
  ~TestClient() { nghttp2_session_del(session_); }

  // A request: `fields` after the four pseudo-headers; `body` sent whole, then END_STREAM
  // unless `open` (more may follow with Send, End).
  int32_t Request(const std::string& method, const std::string& path, const Fields& fields = {},
                  std::string body = {}, bool open = false) {
    Fields all = {
        {":method", method}, {":scheme", "https"}, {":authority", "api.test"}, {":path", path}};
    all.insert(all.end(), fields.begin(), fields.end());
    std::vector<nghttp2_nv> nva = ToNv(all);
    auto source = std::make_unique<Upload>();
    source->data = std::move(body);
    source->open = open;
    nghttp2_data_provider provider{};
    provider.source.ptr = source.get();
    provider.read_callback = ReadUpload;
    const bool has_body = !source->data.empty() || open;
    const int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                              has_body ? &provider : nullptr, nullptr);
    uploads_[id] = std::move(source);
    return id;
  }
  // More body for an open request, and its end.
  void Send(int32_t id, const std::string& more) {
    uploads_[id]->data.append(more);
    nghttp2_session_resume_data(session_, id);
  }
  void End(int32_t id) {
    uploads_[id]->open = false;
    nghttp2_session_resume_data(session_, id);
  }
  void Reset(int32_t id, uint32_t code) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, code);
  }
  // Acknowledges `n` answer bytes of a stream (auto_window = false).
  void Read(int32_t id, size_t n) { nghttp2_session_consume(session_, id, n); }
  size_t UploadLeft(int32_t id) const {
    const Upload& u = *uploads_.at(id);
    return u.data.size() - u.sent;
  }

  std::string TakeOutput() {
    std::string out;
    const uint8_t* data = nullptr;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(session_, &data)) > 0) {
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    return out;
  }
  void Feed(const std::string& bytes) {
    if (bytes.empty()) return;
    ASSERT_EQ(nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(bytes.data()),
                                       bytes.size()),
              static_cast<ssize_t>(bytes.size()));
  }

  std::map<int32_t, ClientStream> streams;
  bool goaway = false;
  uint32_t goaway_code = 0;
  int32_t goaway_last_stream = 0;

 private:
  struct Upload {
    std::string data;
    size_t sent = 0;
    bool open = false;
  };
  static TestClient* Of(void* p) { return static_cast<TestClient*>(p); }
  static ssize_t ReadUpload(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                            nghttp2_data_source* source, void*) {
    auto* u = static_cast<Upload*>(source->ptr);
    const size_t n = std::min(length, u->data.size() - u->sent);
    if (n == 0 && u->open) return NGHTTP2_ERR_DEFERRED;
    std::memcpy(buf, u->data.data() + u->sent, n);
    u->sent += n;
    if (u->sent == u->data.size() && !u->open) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* p) {
    ClientStream& s = Of(p)->streams[frame->hd.stream_id];
    std::string n(reinterpret_cast<const char*>(name), namelen);
    std::string v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":status") {
      s.status = std::stoi(v);
      s.headers.clear();  // a final answer after an interim one
    } else {
      s.headers.emplace_back(std::move(n), std::move(v));
    }
    return 0;
  }
  static int OnData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
                    void* p) {
    Of(p)->streams[id].body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int OnClose(nghttp2_session*, int32_t id, uint32_t code, void* p) {
    ClientStream& s = Of(p)->streams[id];
    s.closed = true;
    s.error_code = code;
    return 0;
  }
  static int OnFrame(nghttp2_session*, const nghttp2_frame* frame, void* p) {
    if (frame->hd.type != NGHTTP2_GOAWAY) return 0;
    Of(p)->goaway = true;
    Of(p)->goaway_code = frame->goaway.error_code;
    Of(p)->goaway_last_stream = frame->goaway.last_stream_id;
    return 0;
  }

  nghttp2_session* session_ = nullptr;
  std::map<int32_t, std::unique_ptr<Upload>> uploads_;
};

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

  H2BodyPlan OnRequestHead(int32_t id, const Request& head, bool) override {
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

// ----- Raw frames, for what nghttp2's client would never send -----

inline std::string Frame(uint8_t type, uint8_t flags, int32_t stream, std::string_view payload) {
  std::string f;
  const size_t n = payload.size();
  f.push_back(static_cast<char>(n >> 16));
  f.push_back(static_cast<char>(n >> 8));
  f.push_back(static_cast<char>(n));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) f.push_back(static_cast<char>(stream >> shift));
  f.append(payload);
  return f;
}

inline std::string Preface() {
  return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(NGHTTP2_SETTINGS, 0, 0, "");
}

// One connection's HPACK encoder.
class Encoder {
 public:
  Encoder() { nghttp2_hd_deflate_new(&deflater_, 4096); }
  ~Encoder() { nghttp2_hd_deflate_del(deflater_); }
  std::string Block(const Fields& fields) {
    std::vector<nghttp2_nv> nva = ToNv(fields);
    std::string out(nghttp2_hd_deflate_bound(deflater_, nva.data(), nva.size()), '\0');
    ssize_t n = nghttp2_hd_deflate_hd(deflater_, reinterpret_cast<uint8_t*>(out.data()), out.size(),
                                      nva.data(), nva.size());
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return out;
  }

 private:
  nghttp2_hd_deflater* deflater_ = nullptr;
};

inline Fields PostHead(const std::string& path = "/v1/pay") {
  return {{":method", "POST"}, {":scheme", "https"}, {":authority", "api.test"}, {":path", path}};
}

// The frames the server sent, as (type, stream, error code for RST_STREAM / GOAWAY).
struct SeenFrame {
  uint8_t type;
  int32_t stream;
  uint32_t code;
};
inline std::vector<SeenFrame> ParseFrames(std::string_view bytes) {
  std::vector<SeenFrame> out;
  auto u32 = [](std::string_view b) {
    return (uint32_t(uint8_t(b[0])) << 24) | (uint32_t(uint8_t(b[1])) << 16) |
           (uint32_t(uint8_t(b[2])) << 8) | uint32_t(uint8_t(b[3]));
  };
  while (bytes.size() >= 9) {
    const size_t len = (size_t(uint8_t(bytes[0])) << 16) | (size_t(uint8_t(bytes[1])) << 8) |
                       size_t(uint8_t(bytes[2]));
    if (bytes.size() < 9 + len) break;
    SeenFrame f{uint8_t(bytes[3]), int32_t(u32(bytes.substr(5)) & 0x7fffffff), 0};
    std::string_view payload = bytes.substr(9, len);
    if (f.type == NGHTTP2_RST_STREAM && len >= 4) f.code = u32(payload);
    if (f.type == NGHTTP2_GOAWAY && len >= 8) f.code = u32(payload.substr(4));
    out.push_back(f);
    bytes.remove_prefix(9 + len);
  }
  return out;
}
inline const SeenFrame* FindFrame(const std::vector<SeenFrame>& frames, uint8_t type,
                                  int32_t stream = -1) {
  for (const SeenFrame& f : frames) {
    if (f.type == type && (stream < 0 || f.stream == stream)) return &f;
  }
  return nullptr;
}

}  // namespace idemgate::h2test

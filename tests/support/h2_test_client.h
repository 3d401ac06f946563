// SPDX-License-Identifier: Apache-2.0
// An HTTP/2 client for tests, in memory: nghttp2's own client session, bytes in and out through
// TakeOutput/Feed (a unit test pumps them into an H2Session, an integration test through a
// socket). It records what each stream got. Depends only on nghttp2, not on the gateway.
#pragma once

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace idemgate::h2test

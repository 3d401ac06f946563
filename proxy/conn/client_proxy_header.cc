// SPDX-License-Identifier: Apache-2.0
// ClientConn's PROXY protocol header (listen.proxy_protocol): read from the socket before
// anything else (before TLS), byte-exact, so what follows it is the client's own; the client it
// names becomes the connection's peer. A connection without a valid header is closed.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "proxy/conn/client_conn.h"
#include "proxy/net/proxy_protocol.h"

namespace idemgate {

void ClientConn::AwaitProxyHeader() {
  // Within the idle timeout, as a client's first request (OnTimer closes in State::kIdle).
  if (!timer_.initialized()) timer_.Init<ClientConn, &ClientConn::OnTimer>(env_->base(), this);
  sniff_.reset(event_new(env_->base(), fd_, EV_READ,
                         &EventTrampoline<ClientConn, &ClientConn::OnProxyBytes>, this));
  event_add(sniff_.get(), nullptr);
  timer_.Arm(env_->Snapshot()->limits.idle_timeout_ms);
}

// What has come is peeked at, not taken, until the header's end is known: then exactly the
// header's bytes are taken. Bytes of a header still incomplete are all the header's, so they
// are taken (a peek that found them again would wake this at once, for ever).
void ClientConn::OnProxyBytes() {
  char buf[16 + kProxyV2MaxPayload];
  const size_t room = sizeof buf - std::min(proxy_head_.size(), sizeof buf - 1);
  const ssize_t n = recv(fd_, buf, room, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    event_add(sniff_.get(), nullptr);
    return;
  }
  if (n <= 0) return Close(n == 0 ? CloseReason::kClientClosed : CloseReason::kSocketError);
  const size_t had = proxy_head_.size();
  proxy_head_.append(buf, static_cast<size_t>(n));
  ProxyHeader header;
  const ProxyParse parsed = ParseProxyHeader(proxy_head_, &header);
  if (parsed == ProxyParse::kInvalid) {
    IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "listen",
                         "closed a connection from %s: %s (listen.proxy_protocol is on)",
                         peer_ip_.c_str(), header.error.c_str());
    return Close(CloseReason::kBadProxyHeader);
  }
  const size_t take = parsed == ProxyParse::kDone ? header.size - had : static_cast<size_t>(n);
  if (recv(fd_, buf, take, MSG_DONTWAIT) != static_cast<ssize_t>(take)) {
    return Close(CloseReason::kSocketError);
  }
  if (parsed == ProxyParse::kNeedMore) {
    event_add(sniff_.get(), nullptr);
    return;
  }
  proxy_head_.clear();
  proxy_head_.shrink_to_fit();
  if (header.has_address) peer_ip_ = header.source_ip;
  timer_.Cancel();
  StartTransport();
}

}  // namespace idemgate

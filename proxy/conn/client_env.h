// SPDX-License-Identifier: Apache-2.0
// What a client connection and its passthrough relay need from their surroundings, as a narrow
// interface (as ExchangeEnv is the exchange's): the loop, the config in force, the answers'
// memory budget, exchanges for guarded requests, streamed upstream calls for relayed ones, and
// where reports and closes go. The Worker implements it; tests/unit/conn fakes it in-process.
// An HTTP/2 session will sit on the same seam.
#pragma once

#include <event2/event.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "conf/config.h"
#include "proxy/conn/conn_types.h"
#include "proxy/exchange/report_types.h"
#include "proxy/exchange/response_sink.h"
#include "proxy/http/http_message.h"
#include "proxy/upstream/upstream.h"

namespace idemgate {

class ClientConn;
class Exchange;
class UnsentBudget;

class ClientEnv {
 public:
  virtual ~ClientEnv() = default;

  virtual event_base* base() = 0;
  // The config in force now (a reload replaces it between requests).
  virtual std::shared_ptr<const Config> Snapshot() = 0;
  // The process's budget for answers clients have not read (null: unbounded).
  virtual UnsentBudget* unsent() = 0;
  // The gateway is shutting down: connections close after their current answer.
  virtual bool draining() const = 0;
  virtual int64_t MonoUs() const = 0;  // monotonic microseconds

  // A guarded request's exchange, answering through `sink`; owned here, freed when done.
  virtual Exchange* NewExchange(ResponseSink* sink, std::shared_ptr<const Config> config,
                                Request request, const std::string& client_ip, bool tls) = 0;
  // A relayed request's streamed call to the group `limits.group` names; null when the running
  // config has no such group (then `done` never runs). Otherwise as UpstreamGroup::SendStream.
  virtual StreamCall* SendStream(std::string head, bool head_request, const UpstreamLimits& limits,
                                 StreamReceiver* receiver, UpstreamCallback done) = 0;

  // A finished request's metrics and access-log entry (null when WantsAccessEntry() is false).
  virtual bool WantsAccessEntry() const = 0;
  virtual void RecordExchange(const ExchangeSample& sample, const AccessEntry* entry) = 0;
  // An error the connection answered itself, before any exchange existed (malformed request,
  // too large, client timeout): counted as rejected and written to the access log.
  virtual void RecordConnectionError(ErrorCode code, Protocol protocol, std::string_view client_ip,
                                     size_t bytes_out) = 0;
  // An answer not queued because of limits.max_unsent_bytes (its connection is closed).
  virtual void RecordAnswerDropped() = 0;
  // The connection is closed: freed after this loop turn.
  virtual void ConnectionClosed(ClientConn* conn, CloseReason reason) = 0;
};

}  // namespace idemgate

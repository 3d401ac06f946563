// SPDX-License-Identifier: Apache-2.0
// The readiness probes (see probes.h).
#include "proxy/ops/probes.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "proxy/net/tls.h"
#include "proxy/policy/errors.h"
#include "proxy/upstream/upstream_stats.h"
#include "store/claim_rules.h"

namespace idemgate {

namespace {
using std::chrono::milliseconds;
// The readiness probe's record: an all-zero scope id (no SHA-256 output) and a reserved key.
constexpr char kProbeKey[] = "idemgate-internal-readyz-probe";
}  // namespace

std::string ProbeStore(Store* store, milliseconds timeout) {
  auto done = std::make_shared<std::promise<StoreStatus>>();
  std::future<StoreStatus> result = done->get_future();
  ClaimRequest claim;
  claim.scope = ScopeId{};
  claim.key = kProbeKey;
  claim.lease_ms = 1'000;
  claim.ttl_ms = 60'000;
  // Runs on the store's thread; a winning claim is released at once (a first attempt's record
  // is deleted, R3a), so the probe leaves nothing behind.
  store->Claim(std::move(claim), [store, done](ClaimResult claimed) {
    if (!claimed.status.ok()) return done->set_value(claimed.status);
    if (claimed.outcome == ClaimOutcome::kFresh || claimed.outcome == ClaimOutcome::kTakeover) {
      return store->Release(claimed.token, [done](StoreStatus s) { done->set_value(s); });
    }
    done->set_value(StoreStatus{});  // another probe holds it: the store still answered
  });
  if (result.wait_for(timeout) != std::future_status::ready) {
    return "no answer within " + std::to_string(timeout.count()) + "ms";
  }
  StoreStatus status = result.get();
  if (status.ok()) return {};
  return status.message.empty() ? "the store refused the write" : status.message;
}

std::string ProbeUpstream(const HostPort& upstream, milliseconds timeout, SSL_CTX* tls) {
  std::string where = upstream.host + ":" + std::to_string(upstream.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(upstream.port);
  if (int rc = getaddrinfo(upstream.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return "cannot resolve " + where + ": " + gai_strerror(rc);
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  std::string error;
  if (fd < 0) {
    error = std::string("socket: ") + strerror(errno);
  } else if (connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
    error = "cannot connect to " + where + ": " + strerror(errno);
  } else {
    pollfd p{fd, POLLOUT, 0};
    int n = poll(&p, 1, static_cast<int>(timeout.count()));
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (n == 0) {
      error = "no connection to " + where + " within " + std::to_string(timeout.count()) + "ms";
    } else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
      error = "cannot connect to " + where + ": " + strerror(errno);
    } else if (so_error != 0) {
      error = "cannot connect to " + where + ": " + strerror(so_error);
    } else if (tls != nullptr) {  // https: the handshake and certificate check, as requests do
      error = ProbeTlsHandshake(fd, tls, upstream.host, static_cast<int>(timeout.count()));
      if (!error.empty()) error = where + ": " + error;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return error;
}

std::string ProbeUpstreamGroup(const Config::Upstream& group, milliseconds timeout, SSL_CTX* tls) {
  std::vector<HostPort> servers = group.addrs;
  if (servers.empty()) servers.push_back(group.addr);
  std::string errors;
  for (const HostPort& server : servers) {
    std::string error = ProbeUpstream(server, timeout, tls);
    if (error.empty()) return "";
    errors += (errors.empty() ? "" : "; ") + error;
  }
  return errors;
}

std::string RouteGroupsDownJson(const UpstreamStats& stats) {
  const std::vector<std::string> down = stats.GroupsDown();
  if (down.empty()) return "";
  std::string out = ",\"route_groups\":[";
  for (size_t i = 0; i < down.size(); ++i) {
    out += (i == 0 ? "\"" : ",\"") + JsonEscape(down[i]) + "\"";
  }
  return out + "]";
}

}  // namespace idemgate

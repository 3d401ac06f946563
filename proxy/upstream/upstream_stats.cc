// SPDX-License-Identifier: Apache-2.0
// The per-server upstream counters summed across loops (see upstream_stats.h).
#include "proxy/upstream/upstream_stats.h"

#include <map>

#include "store/clock.h"

namespace idemgate {

namespace {
uint64_t Load(const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); }
}  // namespace

void UpstreamStats::Entry::SetReason(std::string why) {
  std::lock_guard lock(mu_);
  reason_ = std::move(why);
}

std::string UpstreamStats::Entry::Reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

UpstreamStats::Entry* UpstreamStats::Add(std::string group, std::string server,
                                         std::string address) {
  std::lock_guard lock(mu_);
  Entry& e = entries_.emplace_back();
  e.group = std::move(group);
  e.server = std::move(server);
  e.address = std::move(address);
  return &e;
}

std::vector<UpstreamStats::Server> UpstreamStats::Snapshot() const {
  const int64_t now = MonotonicNowMs();
  std::vector<Server> out;
  std::map<std::string, size_t> index;  // group \n server \n address -> out's index
  std::lock_guard lock(mu_);
  for (const Entry& e : entries_) {
    const std::string id = e.group + "\n" + e.server + "\n" + e.address;
    auto [it, added] = index.emplace(id, out.size());
    if (added) {
      Server& fresh = out.emplace_back();
      fresh.group = e.group;
      fresh.server = e.server;
      fresh.address = e.address;
    }
    Server& s = out[it->second];
    s.requests += Load(e.requests);
    s.taken_out += Load(e.taken_out);
    s.health_failed += Load(e.health_failed);
    for (size_t k = 0; k < kUpstreamErrorKinds; ++k) s.errors[k] += Load(e.errors[k]);
    if (e.gone.load(std::memory_order_relaxed)) continue;
    const bool health_down = e.health_down.load(std::memory_order_relaxed);
    const bool out_now = e.out_until_ms.load(std::memory_order_relaxed) > now;
    if (health_down) {
      ++s.loops_health_down;
    } else if (out_now) {
      ++s.loops_out;
    } else {
      ++s.loops_up;
    }
    if ((health_down || out_now) && s.reason.empty()) s.reason = e.Reason();
  }
  return out;
}

std::vector<std::string> UpstreamStats::GroupsDown() const {
  struct Group {
    bool any_up = false;  // a server that no loop has out
    std::string why;
  };
  std::map<std::string, Group> groups;
  for (const Server& s : Snapshot()) {
    if (s.group == "default") continue;
    const int loops = s.loops_up + s.loops_out + s.loops_health_down;
    if (loops == 0) continue;  // gone everywhere
    Group& g = groups[s.group];
    if (s.loops_out + s.loops_health_down == 0) {
      g.any_up = true;
      continue;
    }
    std::string label =
        s.server +
        (s.address == s.server.substr(0, s.server.rfind(':')) ? "" : " (" + s.address + ")");
    g.why += (g.why.empty() ? "" : "; ") + label +
             (s.loops_health_down > 0 ? " " : " taken out: ") + s.reason;
  }
  std::vector<std::string> out;
  for (const auto& [name, g] : groups) {
    if (!g.any_up && !g.why.empty()) out.push_back(name + ": every server is out: " + g.why);
  }
  return out;
}

}  // namespace idemgate

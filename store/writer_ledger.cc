// SPDX-License-Identifier: Apache-2.0
// The writer's bookkeeping: local attempts (monotonic leases) and the undo of a failed batch.
#include "store/writer_ledger.h"

#include <algorithm>

namespace idemgate {

void LocalAttempts::Start(const std::string& key, uint64_t owner, uint32_t attempt,
                          TimeMs mono_end) {
  attempts_[key] = Attempt{owner, attempt, mono_end};
}

void LocalAttempts::End(const std::string& key) { attempts_.erase(key); }

TimeMs LocalAttempts::LeftMs(const std::string& key, const std::optional<Record>& existing,
                             TimeMs mono_now) {
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return 0;
  const Attempt& a = it->second;
  if (!existing.has_value() || existing->state != RecordState::kInFlight ||
      existing->owner != a.owner || existing->attempt != a.attempt || a.mono_end <= mono_now) {
    attempts_.erase(it);  // not ours any more, or passed
    return 0;
  }
  return a.mono_end - mono_now;
}

void LocalAttempts::Prune(TimeMs mono_now) {
  std::erase_if(attempts_, [mono_now](const auto& kv) { return kv.second.mono_end <= mono_now; });
}

void LocalAttempts::StageStart(std::string_view key, uint64_t owner, uint32_t attempt,
                               TimeMs mono_end) {
  staged_.push_back(Change{key, true, Attempt{owner, attempt, mono_end}});
}

void LocalAttempts::StageEnd(std::string_view key) { staged_.push_back(Change{key, false, {}}); }

void LocalAttempts::Commit(TimeMs mono_now) {
  for (Change& c : staged_) {
    if (c.start) {
      attempts_.insert_or_assign(std::string(c.key), c.attempt);
    } else if (auto it = attempts_.find(c.key); it != attempts_.end()) {
      attempts_.erase(it);
    }
  }
  staged_.clear();
  if (attempts_.size() > prune_at_) {
    Prune(mono_now);
    prune_at_ = std::max<size_t>(1024, 2 * attempts_.size());
  }
}

void BatchUndo::Note(Kind kind, std::string_view key, const std::optional<Record>& existing,
                     WriteAction action, const Record& record, TimeMs now) {
  if (action == WriteAction::kNone) return;
  Noted& n = notes_.emplace_back(Noted{kind, key, action, std::nullopt, Record{}});
  // Reconcile puts `before` back only for a key whose first write in the batch was a claim (a
  // key completed, released or deleted in the batch gets no claim undone), so only claims keep it.
  if (kind == Kind::kClaim && existing.has_value() && existing->state == RecordState::kInFlight &&
      !existing->ExpiredAt(now)) {
    n.before = existing;  // in flight: no response body, cheap to keep
  }
  if (kind == Kind::kReleaseOrDelete && action == WriteAction::kPut) n.record = record;
}

std::vector<ReconcileWrite> BatchUndo::Reconcile() const {
  std::unordered_map<std::string_view, KeyState> keys;
  for (const Noted& n : notes_) {
    auto [it, inserted] = keys.try_emplace(n.key);
    KeyState& k = it->second;
    if (inserted) k.before = n.before;  // what the batch's first write to the key found
    switch (n.kind) {
      case Kind::kClaim:
        k.claimed = true;
        break;
      case Kind::kComplete:
        k.completed = true;
        k.last.reset();
        break;
      case Kind::kReleaseOrDelete:
        k.completed = false;
        k.last = ReconcileWrite{std::string(n.key), n.action, n.record};
        break;
    }
  }
  std::vector<ReconcileWrite> out;
  for (const auto& [key, k] : keys) {
    if (k.completed) continue;  // ambiguous on purpose: the owner's retried Complete settles it
    if (k.last.has_value()) {
      out.push_back(*k.last);
    } else if (k.claimed) {
      ReconcileWrite w{std::string(key), WriteAction::kDelete, {}};
      if (k.before.has_value()) {
        w.action = WriteAction::kPut;
        w.record = *k.before;
      }
      out.push_back(std::move(w));
    }
  }
  return out;
}

}  // namespace idemgate

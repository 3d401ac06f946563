// The process-wide list of waiting duplicates per record key (see wait_registry.h).
#include "proxy/exchange/wait_registry.h"

#include <algorithm>

namespace idemgate {

size_t WaitRegistry::Slot(std::string_view record_key) {
  return std::hash<std::string_view>{}(record_key) % std::tuple_size_v<decltype(epochs_)>;
}

uint64_t WaitRegistry::Epoch(std::string_view record_key) const {
  return epochs_[Slot(record_key)].load(std::memory_order_acquire);
}

WaitRegistry::AddResult WaitRegistry::Add(const std::string& record_key, uint64_t epoch, Wake wake,
                                          uint64_t max_waiters, uint64_t* id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (epochs_[Slot(record_key)].load(std::memory_order_relaxed) != epoch) {
    return AddResult::kChanged;
  }
  if (count_ >= max_waiters) return AddResult::kFull;
  *id = next_id_++;
  by_key_[record_key].push_back({*id, std::move(wake)});
  ++count_;
  return AddResult::kAdded;
}

void WaitRegistry::Remove(const std::string& record_key, uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(record_key);
  if (it == by_key_.end()) return;
  auto& list = it->second;
  auto w = std::find_if(list.begin(), list.end(), [id](const Waiter& x) { return x.id == id; });
  if (w == list.end()) return;
  list.erase(w);
  --count_;
  if (list.empty()) by_key_.erase(it);
}

void WaitRegistry::Notify(const std::string& record_key) {
  std::vector<Waiter> woken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epochs_[Slot(record_key)].fetch_add(1, std::memory_order_release);
    auto it = by_key_.find(record_key);
    if (it == by_key_.end()) return;
    woken.swap(it->second);
    by_key_.erase(it);
    count_ -= woken.size();
  }
  for (Waiter& w : woken) w.wake();  // outside the lock: each posts to its own loop
}

uint64_t WaitRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

}  // namespace idemgate

// Duplicates that wait for the first answer (SPEC §10): the process-wide list of waiters per
// record key. An exchange that completes or releases a key wakes every waiter of that key, each
// on its own loop (through the wake function it registered). Bounded by limits.max_waiters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace idemgate {

class WaitRegistry {
 public:
  using Wake = std::function<void()>;  // thread-safe: posts the waiter's work to its loop

  // A wake may come between the read that found the key in flight and Add: the caller reads
  // Epoch(key) before that read and hands it to Add, which then refuses with kChanged.
  uint64_t Epoch(std::string_view record_key) const;

  enum class AddResult { kAdded, kFull, kChanged };
  // Adds a waiter for `record_key` (*id set) unless max_waiters wait already (kFull) or the key
  // was notified since `epoch` was read (kChanged: look at the record again).
  AddResult Add(const std::string& record_key, uint64_t epoch, Wake wake, uint64_t max_waiters,
                uint64_t* id);
  // Removes a waiter (woken, timed out, client gone). Unknown ids are ignored.
  void Remove(const std::string& record_key, uint64_t id);
  // The key's record changed (completed, released): wakes and forgets its waiters.
  void Notify(const std::string& record_key);
  uint64_t size() const;

 private:
  struct Waiter {
    uint64_t id;
    Wake wake;
  };
  static size_t Slot(std::string_view record_key);

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<Waiter>> by_key_;
  // Notifications per hash slot of the key: a collision only costs a spurious re-check. Read
  // without the lock (every guarded request reads one); changed and compared under it.
  std::array<std::atomic<uint64_t>, 4096> epochs_{};
  uint64_t next_id_ = 1;
  uint64_t count_ = 0;
};

}  // namespace idemgate

// Duplicates that wait for the first answer (SPEC §10): the process-wide list of waiters per
// record key. An exchange that completes or releases a key wakes every waiter of that key, each
// on its own loop (through the wake function it registered). Bounded by limits.max_waiters.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace idemgate {

class WaitRegistry {
 public:
  using Wake = std::function<void()>;  // thread-safe: posts the waiter's work to its loop

  // Adds a waiter for `record_key`; 0 when the registry is full (max_waiters), else its id.
  uint64_t Add(const std::string& record_key, Wake wake, uint64_t max_waiters);
  // Removes a waiter (woken, timed out, client gone). Unknown ids are ignored.
  void Remove(const std::string& record_key, uint64_t id);
  // The key's record changed (completed, released, deleted): wakes and forgets its waiters.
  void Notify(const std::string& record_key);
  uint64_t size() const;

 private:
  struct Waiter {
    uint64_t id;
    Wake wake;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<Waiter>> by_key_;
  uint64_t next_id_ = 1;
  uint64_t count_ = 0;
};

}  // namespace idemgate

// The memory held by answers written to clients that have not read them yet, bounded in total
// across every connection of the process (limits.max_unsent_bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "store/record.h"

namespace idemgate {

// The memory held by answers written to clients that have not read them yet, bounded in total
// (limits.max_unsent_bytes). A body is charged once however many connections send it.
class UnsentBudget {
 public:
  // A charge for `response`'s body, shared by every holder of the same response; released when
  // the last holder drops it. nullptr when charging it would pass `limit` (an answer is always
  // admitted when nothing else is charged, so one answer larger than the limit still goes).
  std::shared_ptr<const void> Charge(std::shared_ptr<const StoredResponse> response,
                                     uint64_t limit);
  uint64_t bytes() const;

 private:
  struct Pin;
  mutable std::mutex mu_;
  std::unordered_map<const StoredResponse*, std::weak_ptr<Pin>> pins_;  // guarded by mu_
  uint64_t bytes_ = 0;                                                  // guarded by mu_
};

}  // namespace idemgate

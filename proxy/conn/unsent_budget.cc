// UnsentBudget (see unsent_budget.h).
#include "proxy/conn/unsent_budget.h"

namespace idemgate {

struct UnsentBudget::Pin {
  Pin(UnsentBudget* budget, std::shared_ptr<const StoredResponse> response)
      : budget(budget), response(std::move(response)), bytes(this->response->body.size()) {}
  ~Pin() {
    std::lock_guard<std::mutex> lock(budget->mu_);
    budget->bytes_ -= bytes;
    auto it = budget->pins_.find(response.get());
    if (it != budget->pins_.end() && it->second.expired()) budget->pins_.erase(it);
  }
  UnsentBudget* budget;
  std::shared_ptr<const StoredResponse> response;
  uint64_t bytes;
};

std::shared_ptr<const void> UnsentBudget::Charge(std::shared_ptr<const StoredResponse> response,
                                                 uint64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pins_.find(response.get());
  if (it != pins_.end()) {
    if (std::shared_ptr<Pin> pin = it->second.lock()) return pin;  // already charged
  }
  uint64_t size = response->body.size();
  if (bytes_ > 0 && bytes_ + size > limit) return nullptr;
  auto pin = std::make_shared<Pin>(this, std::move(response));
  pins_[pin->response.get()] = pin;
  bytes_ += size;
  return pin;
}

uint64_t UnsentBudget::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace idemgate

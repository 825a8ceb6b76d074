// Autocast's cache of weight casts, set for a scope (AutocastScope, in models/staged_model.h,
// sets autocast itself).
#pragma once

#include <ATen/autocast_mode.h>

namespace parbench {

// Sets whether autocast caches its casts of the weights (thread-local) for the enclosed code,
// then restores it. A captured CUDA graph runs with the cache off: every replay must redo the
// casts of the weights it updated.
class AutocastCacheSetting {
 public:
  explicit AutocastCacheSetting(bool enabled) : was_enabled_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(enabled);
  }
  ~AutocastCacheSetting() { at::autocast::set_autocast_cache_enabled(was_enabled_); }
  AutocastCacheSetting(const AutocastCacheSetting&) = delete;
  AutocastCacheSetting& operator=(const AutocastCacheSetting&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace parbench

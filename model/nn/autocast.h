#pragma once

#include <ATen/autocast_mode.h>

namespace dbh::model {

/// Switches CUDA autocast off for a scope and restores the previous state.
/// The DB head's last layers, the binarization and the losses run inside one
/// (spec §11 pitfall 2: keep them in float32 under AMP).
class AutocastOffGuard {
 public:
  AutocastOffGuard()
      : was_enabled_(at::autocast::is_autocast_enabled(at::kCUDA)) {
    if (was_enabled_) at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
  ~AutocastOffGuard() {
    if (was_enabled_) at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace dbh::model

namespace dbh::model {

/// Enables CUDA autocast with `dtype` (kHalf or kBFloat16) for a scope, as
/// torch.autocast("cuda", dtype) does; a no-op when `enabled` is false.
class AutocastGuard {
 public:
  AutocastGuard(bool enabled, at::ScalarType dtype) : enabled_(enabled) {
    if (!enabled_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    prev_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, prev_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kHalf;
};

}  // namespace dbh::model

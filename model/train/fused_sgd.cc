#include "model/train/fused_sgd.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

namespace dbh::model {
namespace {

// Elements per task of the intra-op threads: a parameter smaller than this
// is updated by one thread.
constexpr int64_t kGrain = int64_t{1} << 15;

bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.defined() && b.defined() && a.scalar_type() == b.scalar_type() && a.device() == b.device() &&
         a.sizes() == b.sizes() && a.strides() == b.strides();
}

// Note [One pass of SGD]: one parameter's update over the elements
// [begin, end) of its memory, as torch::optim::SGD computes it:
//   d = g + wd·p  (when wd ≠ 0),  buf = d (first step) or buf·m + d,
//   p = p + (−lr)·buf  (p + (−lr)·d without momentum).
// Compiled once for the baseline instruction set and, on x86, once more for
// AVX2 (picked at run time); both vectorise (this file is built with -O3),
// neither contracts a multiply-add, so both give the same bits.
template <bool kDecay, bool kMomentum, bool kFirst>
inline __attribute__((always_inline)) void update_loop(float* __restrict p, const float* __restrict g,
                                                       float* __restrict buf, int64_t begin, int64_t end, float wd,
                                                       float m, float neg_lr) {
  for (int64_t i = begin; i < end; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kMomentum) {
      if constexpr (kFirst) {
        buf[i] = d;
      } else {
        d = buf[i] * m + d;
        buf[i] = d;
      }
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <bool kDecay, bool kMomentum, bool kFirst>
void update(float* p, const float* g, float* buf, int64_t begin, int64_t end, float wd, float m, float neg_lr) {
  update_loop<kDecay, kMomentum, kFirst>(p, g, buf, begin, end, wd, m, neg_lr);
}

using Update = void (*)(float*, const float*, float*, int64_t, int64_t, float, float, float);

#if defined(__x86_64__) && defined(__GNUC__)
template <bool kDecay, bool kMomentum, bool kFirst>
__attribute__((target("avx2"))) void update_avx2(float* p, const float* g, float* buf, int64_t begin, int64_t end,
                                                 float wd, float m, float neg_lr) {
  update_loop<kDecay, kMomentum, kFirst>(p, g, buf, begin, end, wd, m, neg_lr);
}
bool has_avx2() {
  __builtin_cpu_init();  // this runs among the static initialisers
  return __builtin_cpu_supports("avx2");
}
const bool kAvx2 = has_avx2();
#define DBH_SGD_UPDATE(d, mo, f) (kAvx2 ? update_avx2<d, mo, f> : update<d, mo, f>)
#else
#define DBH_SGD_UPDATE(d, mo, f) (update<d, mo, f>)
#endif

Update pick(bool decay, bool momentum, bool first) {
  if (!momentum) return decay ? DBH_SGD_UPDATE(true, false, false) : DBH_SGD_UPDATE(false, false, false);
  if (first) return decay ? DBH_SGD_UPDATE(true, true, true) : DBH_SGD_UPDATE(false, true, true);
  return decay ? DBH_SGD_UPDATE(true, true, false) : DBH_SGD_UPDATE(false, true, false);
}
#undef DBH_SGD_UPDATE

}  // namespace

bool FusedSGD::fusable() const {
  for (const auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.dampening() != 0 || o.nesterov()) return false;
    for (const auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      if (p.device().type() != torch::kCPU || p.scalar_type() != torch::kFloat32 || g.is_sparse() ||
          !p.is_non_overlapping_and_dense() || !same_layout(p, g)) {
        return false;
      }
      const auto it = state_.find(p.unsafeGetTensorImpl());
      if (it != state_.end() &&
          !same_layout(p, static_cast<const torch::optim::SGDParamState&>(*it->second).momentum_buffer())) {
        return false;
      }
    }
  }
  return true;
}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (!fusable()) {
    torch::optim::SGD::step();
    return loss;
  }
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    const bool momentum = o.momentum() != 0;
    const auto wd = static_cast<float>(o.weight_decay());
    const auto m = static_cast<float>(o.momentum());
    const auto neg_lr = static_cast<float>(-1 * o.lr());
    for (auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      torch::Tensor buf;
      bool first = false;
      if (momentum) {
        auto it = state_.find(p.unsafeGetTensorImpl());
        if (it == state_.end()) {
          buf = torch::empty_like(p, torch::MemoryFormat::Preserve);  // p's strides: it is dense
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(buf);
          state_[p.unsafeGetTensorImpl()] = std::move(state);
          first = true;
        } else {
          buf = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
        }
      }
      const Update fn = pick(o.weight_decay() != 0, momentum, first);
      float* pp = p.data_ptr<float>();
      const float* gp = g.data_ptr<float>();
      float* bp = momentum ? buf.data_ptr<float>() : nullptr;
      at::parallel_for(0, p.numel(), kGrain,
                       [&](int64_t begin, int64_t end) { fn(pp, gp, bp, begin, end, wd, m, neg_lr); });
    }
  }
  return loss;
}

}  // namespace dbh::model

#pragma once

#include <torch/optim/sgd.h>

namespace dbh::model {

/// torch::optim::SGD whose step makes one pass over each parameter on the
/// CPU instead of four.
///
/// Note [One pass of SGD]: LibTorch's SGD step runs four element-wise
/// operations per parameter (d = g + wd·p, buf·= m, buf += d, p −= lr·buf),
/// each a kernel launch and a pass over memory. This step computes the same
/// update in one loop that reads the gradient, the parameter and the momentum
/// buffer once and writes the last two once, vectorised, split over the
/// intra-op threads: for ResNet-18 + FPN's 12.9M parameters on 2 cores of an
/// EPYC VM 8.7 ms instead of LibTorch's 11.5 ms (`BM_SgdStep`, medians of 5;
/// PyTorch's Python SGD took 13.9 ms there), 1.5 % of a 128² training step.
/// Every element is computed alone, so the result does not depend on the
/// thread count. Each operation rounds once (fused_sgd.cc is compiled with
/// -ffp-contract=off): LibTorch's vectorised kernels fuse the multiply-adds
/// of the first and last operation where the CPU has FMA, so a parameter may
/// differ from torch::optim::SGD's in its last bit.
/// The state (SGDParamState's momentum buffer), the options and the archives
/// are SGD's own, so checkpoints of either load in the other.
///
/// The fused loop runs when every parameter with a gradient is a float32 CPU
/// tensor, dense, whose gradient and momentum buffer have its strides, with
/// no dampening and no Nesterov momentum; otherwise the step is SGD::step.
class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  bool fusable() const;
};

}  // namespace dbh::model

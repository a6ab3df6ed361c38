#pragma once

#include <torch/torch.h>

namespace dbh::model {

/// How the approximate binary map B̂ is computed from P and T.
enum class Binarization {
  /// sigmoid(k·(P − T)) in float32: finite value and gradient everywhere.
  kSigmoid,
  /// 1 / (1 + exp(−k·(P − T))), the literal paper form. Its backward is
  /// 0·∞ = NaN once exp overflows (|k(P−T)| > 11.09 in float16). Only
  /// scenarios that inject the `unstable_binarization` fault select it.
  kExp,
};

/// Options for the DB head (spec §3).
struct DbHeadOptions {
  explicit DbHeadOptions(int64_t in_channels) : in_channels_(in_channels) {}
  TORCH_ARG(int64_t, in_channels);
  /// Amplifying factor of the binarization.
  TORCH_ARG(double, k) = 50.0;
  TORCH_ARG(Binarization, binarization) = Binarization::kSigmoid;
  /// Dtype the binarization is evaluated in. float32 by default; the
  /// `unstable_binarization` fault sets float16 to reproduce what explicit
  /// half-precision models do.
  TORCH_ARG(torch::Dtype, binarization_dtype) = torch::kFloat32;
};

/// One branch: `conv` (3×3, no bias) → `bn` → ReLU → `up1` (2×2 deconv,
/// stride 2) → `up1_bn` → ReLU → `up2` (2×2 deconv, stride 2, one channel).
/// Returns logits; the sigmoid is applied by the head.
class DbBranchImpl : public torch::nn::Module {
 public:
  /// `name` is the branch's full module name ("head.prob"), used to report
  /// its layers to the module observer.
  DbBranchImpl(int64_t in_channels, std::string name);

  /// x: [N, C, H/4, W/4] → logits [N, 1, H, W], float32.
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::ConvTranspose2d up1{nullptr};
  torch::nn::BatchNorm2d up1_bn{nullptr};
  torch::nn::ConvTranspose2d up2{nullptr};

 private:
  std::string name_;
};
TORCH_MODULE(DbBranch);

/// What the head produces. Training mode fills every field; evaluation mode
/// fills `prob_logits` and `probability` only.
struct DbHeadOutput {
  torch::Tensor prob_logits;  // [N, 1, H, W] float32, pre-sigmoid P
  torch::Tensor probability;  // [N, 1, H, W] float32 in [0, 1]
  torch::Tensor threshold;    // [N, 1, H, W] float32 in [0, 1]
  torch::Tensor binary;       // [N, 1, H, W] approximate binary map B̂
};

/// Two branches, `prob` and `thresh`, and the differentiable binarization.
class DbHeadImpl : public torch::nn::Module {
 public:
  explicit DbHeadImpl(const DbHeadOptions& options);

  /// x: [N, in_channels, H/4, W/4].
  DbHeadOutput forward(const torch::Tensor& x);

  /// B̂ from P and T (same shape) with the configured form and dtype.
  torch::Tensor binarize(const torch::Tensor& p, const torch::Tensor& t) const;

  DbHeadOptions options;
  DbBranch prob{nullptr};
  DbBranch thresh{nullptr};
};
TORCH_MODULE(DbHead);

/// The two binarization forms, exposed for tests. Both compute in x's dtype.
torch::Tensor binarize_sigmoid(const torch::Tensor& p, const torch::Tensor& t,
                               double k);
torch::Tensor binarize_exp(const torch::Tensor& p, const torch::Tensor& t,
                           double k);

}  // namespace dbh::model

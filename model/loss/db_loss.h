#pragma once

#include <torch/torch.h>

#include "model/dbnet.h"

namespace dbh::model {

/// Training targets of one batch, as produced by the label generator
/// (spec §4). Every map is [N, 1, H, W] float32.
struct DbTargets {
  torch::Tensor gt_shrink;       // {0,1}: inside shrunk text kernels
  torch::Tensor gt_shrink_mask;  // {0,1}: 0 on ignored text
  torch::Tensor gt_thresh;       // [0.3, 0.7] threshold label
  torch::Tensor gt_thresh_mask;  // {0,1}: inside dilated text polygons
};

/// Balanced BCE with hard-negative mining over the whole batch (spec §5.2),
/// computed from logits. With no positive pixel, the `fallback_negatives`
/// hardest negatives are still used, so text-free batches learn to suppress
/// false positives instead of getting no gradient.
/// logits, gt, mask: same shape. Returns a 0-dim float32 tensor.
torch::Tensor balanced_bce_loss(const torch::Tensor& logits,
                                const torch::Tensor& gt,
                                const torch::Tensor& mask,
                                double negative_ratio = 3.0,
                                int64_t fallback_negatives = 100,
                                double eps = 1e-6);

/// 1 − 2·Σ(p·g·m) / (Σ(p·m) + Σ(g·m) + eps) (spec §5.3). No assertion on the
/// bound: round-off may take it marginally outside [0, 1].
torch::Tensor dice_loss(const torch::Tensor& pred, const torch::Tensor& gt,
                        const torch::Tensor& mask, double eps = 1e-6);

/// Σ(|p − g|·m) / (Σm + eps) (spec §5.4); 0 with zero gradient when m ≡ 0.
torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& gt,
                             const torch::Tensor& mask, double eps = 1e-6);

struct DbLossOptions {
  TORCH_ARG(double, bce_weight) = 5.0;
  TORCH_ARG(double, l1_weight) = 10.0;
  TORCH_ARG(double, dice_weight) = 1.0;
  TORCH_ARG(double, negative_ratio) = 3.0;
  TORCH_ARG(int64_t, fallback_negatives) = 100;
  TORCH_ARG(double, eps) = 1e-6;
};

/// The loss parts of one step; every tensor is 0-dim float32.
struct DbLossParts {
  torch::Tensor total;
  torch::Tensor bce;   // unweighted balanced BCE on P
  torch::Tensor l1;    // unweighted masked L1 on T
  torch::Tensor dice;  // unweighted Dice on B̂
};

/// bce_weight·BCE(P) + l1_weight·L1(T) + dice_weight·Dice(B̂), the weights of
/// the released code (5, 10, 1). Runs in float32 even under AMP.
class DbLossImpl : public torch::nn::Module {
 public:
  explicit DbLossImpl(const DbLossOptions& options = {});
  DbLossParts forward(const DbNetOutput& out, const DbTargets& targets);
  DbLossOptions options;
};
TORCH_MODULE(DbLoss);

}  // namespace dbh::model

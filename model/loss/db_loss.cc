#include "model/loss/db_loss.h"

#include <algorithm>

#include "model/nn/autocast.h"

namespace dbh::model {

namespace {
void check_same_shape(const torch::Tensor& a, const torch::Tensor& b,
                      const char* what) {
  TORCH_CHECK(a.sizes() == b.sizes(), "Expected ", what,
              " to have the prediction's shape ", a.sizes(), ", but got ",
              b.sizes());
}
}  // namespace

torch::Tensor balanced_bce_loss(const torch::Tensor& logits,
                                const torch::Tensor& gt,
                                const torch::Tensor& mask,
                                double negative_ratio,
                                int64_t fallback_negatives, double eps) {
  check_same_shape(logits, gt, "gt");
  check_same_shape(logits, mask, "mask");
  const auto logits32 = logits.to(torch::kFloat32);
  const auto valid = mask > 0.5;
  const auto is_pos = (gt > 0.5).logical_and(valid);
  const auto is_neg = (gt <= 0.5).logical_and(valid);
  const auto target = is_pos.to(torch::kFloat32);
  const auto loss = torch::binary_cross_entropy_with_logits(
      logits32, target, /*weight=*/{}, /*pos_weight=*/{},
      at::Reduction::None);
  // One host synchronisation: top-k needs the count as an integer.
  const auto counts = torch::stack({is_pos.sum(), is_neg.sum()}).cpu();
  const int64_t n_pos = counts[0].item<int64_t>();
  const int64_t n_neg_avail = counts[1].item<int64_t>();
  const int64_t n_neg =
      n_pos > 0 ? std::min<int64_t>(n_neg_avail,
                                    static_cast<int64_t>(n_pos * negative_ratio))
                : std::min<int64_t>(n_neg_avail, fallback_negatives);
  auto pos_sum = (loss * target).sum();
  auto neg_sum = torch::zeros({}, loss.options());
  if (n_neg > 0) {
    const auto neg_loss = (loss * is_neg.to(torch::kFloat32)).flatten();
    neg_sum = std::get<0>(neg_loss.topk(n_neg, /*dim=*/0, /*largest=*/true,
                                        /*sorted=*/false))
                  .sum();
  }
  return (pos_sum + neg_sum) / (static_cast<double>(n_pos + n_neg) + eps);
}

torch::Tensor dice_loss(const torch::Tensor& pred, const torch::Tensor& gt,
                        const torch::Tensor& mask, double eps) {
  check_same_shape(pred, gt, "gt");
  check_same_shape(pred, mask, "mask");
  const auto p = pred.to(torch::kFloat32);
  const auto intersection = (p * gt * mask).sum();
  const auto union_ = (p * mask).sum() + (gt * mask).sum() + eps;
  return 1.0 - 2.0 * intersection / union_;
}

torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& gt,
                             const torch::Tensor& mask, double eps) {
  check_same_shape(pred, gt, "gt");
  check_same_shape(pred, mask, "mask");
  const auto p = pred.to(torch::kFloat32);
  return ((p - gt).abs() * mask).sum() / (mask.sum() + eps);
}

DbLossImpl::DbLossImpl(const DbLossOptions& options_) : options(options_) {
  TORCH_CHECK(options.negative_ratio() > 0,
              "Expected a positive negative_ratio, but got ",
              options.negative_ratio());
  TORCH_CHECK(options.bce_weight() >= 0 && options.l1_weight() >= 0 &&
                  options.dice_weight() >= 0,
              "Expected non-negative loss weights, but got bce=",
              options.bce_weight(), " l1=", options.l1_weight(),
              " dice=", options.dice_weight());
}

DbLossParts DbLossImpl::forward(const DbNetOutput& out,
                                const DbTargets& targets) {
  TORCH_CHECK(out.threshold.defined() && out.binary.defined(),
              "Expected training-mode outputs (threshold and binary maps), but "
              "the model ran in evaluation mode");
  AutocastOffGuard fp32;
  DbLossParts parts;
  parts.bce = balanced_bce_loss(out.prob_logits, targets.gt_shrink,
                                targets.gt_shrink_mask,
                                options.negative_ratio(),
                                options.fallback_negatives(), options.eps());
  parts.l1 = masked_l1_loss(out.threshold, targets.gt_thresh,
                            targets.gt_thresh_mask, options.eps());
  parts.dice = dice_loss(out.binary, targets.gt_shrink, targets.gt_shrink_mask,
                         options.eps());
  parts.total = options.bce_weight() * parts.bce +
                options.l1_weight() * parts.l1 +
                options.dice_weight() * parts.dice;
  return parts;
}

}  // namespace dbh::model

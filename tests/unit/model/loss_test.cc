#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/loss/db_loss.h"

namespace dbh::model {
namespace {

torch::Tensor row(std::vector<float> v) {
  return torch::tensor(v).view({1, 1, 1, static_cast<int64_t>(v.size())});
}

double softplus(double x) { return std::log1p(std::exp(x)); }

TEST(BalancedBceTest, HandComputedWithHardNegativeMining) {
  // One positive, five negatives: only the 3 hardest negatives count.
  const auto logits = row({0, 0, 2, -2, -3, -4});
  const auto gt = row({1, 0, 0, 0, 0, 0});
  const auto mask = torch::ones_like(gt);
  const double expected =
      (softplus(-0.0) + softplus(0) + softplus(2) + softplus(-2)) / 4.0;
  const double got = balanced_bce_loss(logits, gt, mask).item<double>();
  EXPECT_NEAR(got, expected, 1e-5);
  EXPECT_NEAR(got, 0.9100, 1e-3);
}

TEST(BalancedBceTest, MaskedPixelsAreIgnored) {
  const auto logits = row({0, 5, 0});
  const auto gt = row({1, 0, 0});
  const auto mask = row({1, 0, 1});  // the confident false positive is masked
  const double expected = (softplus(0) + softplus(0)) / 2.0;
  EXPECT_NEAR(balanced_bce_loss(logits, gt, mask).item<double>(), expected, 1e-5);
}

TEST(BalancedBceTest, NoTextStillGivesAPositiveLossAndGradient) {
  auto logits = torch::full({2, 1, 8, 8}, 1.0, torch::requires_grad());
  const auto gt = torch::zeros({2, 1, 8, 8});
  const auto mask = torch::ones_like(gt);
  const auto loss = balanced_bce_loss(logits, gt, mask);
  EXPECT_GT(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_GT(logits.grad().abs().sum().item<double>(), 0.0);
}

TEST(BalancedBceTest, AllTextUsesPositivesOnly) {
  const auto logits = row({0, 2});
  const auto gt = row({1, 1});
  const auto mask = torch::ones_like(gt);
  EXPECT_NEAR(balanced_bce_loss(logits, gt, mask).item<double>(),
              (softplus(0) + softplus(-2)) / 2.0, 1e-5);
}

TEST(BalancedBceTest, EmptyMaskIsZeroAndFinite) {
  const auto logits = torch::randn({1, 1, 4, 4});
  const auto gt = torch::ones({1, 1, 4, 4});
  const auto loss = balanced_bce_loss(logits, gt, torch::zeros_like(gt));
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_EQ(loss.item<double>(), 0.0);
}

TEST(DiceLossTest, HandComputed) {
  const auto pred = row({1, 0, 1, 0});
  const auto gt = row({1, 0, 0, 0});
  EXPECT_NEAR(dice_loss(pred, gt, torch::ones_like(gt)).item<double>(), 1.0 - 2.0 / 3.0,
              1e-6);
  // Perfect prediction.
  EXPECT_NEAR(dice_loss(gt, gt, torch::ones_like(gt)).item<double>(), 0.0, 1e-6);
}

TEST(DiceLossTest, NoTextAndEmptyMaskAreFiniteAndAtMostOne) {
  const auto pred = torch::rand({1, 1, 4, 4});
  const auto zeros = torch::zeros({1, 1, 4, 4});
  for (const auto& mask : {torch::ones_like(zeros), zeros}) {
    const double v = dice_loss(pred, zeros, mask).item<double>();
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_LE(v, 1.0 + 1e-6);
    EXPECT_GE(v, 0.0);
  }
  EXPECT_NEAR(dice_loss(pred, zeros, zeros).item<double>(), 1.0, 1e-6);
}

TEST(MaskedL1Test, HandComputed) {
  const auto pred = row({0.5, 0.3, 0.9});
  const auto gt = row({0.7, 0.3, 0.3});
  const auto mask = row({1, 1, 0});
  EXPECT_NEAR(masked_l1_loss(pred, gt, mask).item<double>(), 0.1, 1e-6);
}

TEST(MaskedL1Test, EmptyMaskGivesZeroWithoutNaN) {
  auto pred = torch::rand({1, 1, 4, 4}, torch::requires_grad());
  const auto loss = masked_l1_loss(pred, torch::rand({1, 1, 4, 4}), torch::zeros({1, 1, 4, 4}));
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_TRUE(torch::isfinite(pred.grad()).all().item<bool>());
}

TEST(DbLossTest, CombinesWithReleasedCodeWeights) {
  torch::manual_seed(0);
  DbNetOutput out;
  out.prob_logits = torch::randn({2, 1, 8, 8});
  out.probability = torch::sigmoid(out.prob_logits);
  out.threshold = torch::rand({2, 1, 8, 8});
  out.binary = torch::rand({2, 1, 8, 8});
  DbTargets t;
  t.gt_shrink = (torch::rand({2, 1, 8, 8}) > 0.7).to(torch::kFloat32);
  t.gt_shrink_mask = torch::ones({2, 1, 8, 8});
  t.gt_thresh = 0.3 + 0.4 * torch::rand({2, 1, 8, 8});
  t.gt_thresh_mask = (torch::rand({2, 1, 8, 8}) > 0.5).to(torch::kFloat32);
  DbLoss loss;
  const auto parts = loss->forward(out, t);
  EXPECT_NEAR(parts.total.item<double>(),
              5 * parts.bce.item<double>() + 10 * parts.l1.item<double>() +
                  parts.dice.item<double>(),
              1e-5);
  DbLoss custom(DbLossOptions().bce_weight(1).l1_weight(0).dice_weight(0));
  EXPECT_NEAR(custom->forward(out, t).total.item<double>(), parts.bce.item<double>(), 1e-6);
  EXPECT_THROW(DbLoss(DbLossOptions().bce_weight(-1)), c10::Error);
}

TEST(DbLossTest, ShapeMismatchIsAClearError) {
  try {
    dice_loss(torch::rand({1, 1, 4, 4}), torch::rand({1, 1, 4, 5}), torch::ones({1, 1, 4, 4}));
    FAIL() << "expected a shape error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Expected gt to have the prediction's shape"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace dbh::model

// Properties of the differentiable binarization (spec §3.3).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <torch/torch.h>

#include "model/head/db_head.h"

namespace dbh::model {
namespace {

// Gradient of B̂ w.r.t. P for a batch of z = k(P − T) values, in `dtype`.
torch::Tensor grad_wrt_p(const std::vector<float>& z, torch::Dtype dtype, bool exp_form) {
  const double k = 50.0;
  auto p = (torch::tensor(z) / k).to(dtype).detach().requires_grad_(true);
  const auto t = torch::zeros_like(p);
  auto b = exp_form ? binarize_exp(p, t, k) : binarize_sigmoid(p, t, k);
  b.sum().backward();
  return p.grad().to(torch::kFloat32);
}

RC_GTEST_PROP(BinarizationProp, SigmoidFormHasFiniteGradientsUpTo1e4, ()) {
  const auto z = *rc::gen::container<std::vector<float>>(
      *rc::gen::inRange<std::size_t>(1, 64),
      rc::gen::map(rc::gen::inRange(-10000, 10001), [](int v) { return static_cast<float>(v); }));
  for (auto dtype : {torch::kFloat32, torch::kFloat16}) {
    const auto g = grad_wrt_p(z, dtype, /*exp_form=*/false);
    RC_ASSERT(torch::isfinite(g).all().item<bool>());
  }
}

RC_GTEST_PROP(BinarizationProp, FormsAgreeInFloat32ForBoundedInputs, ()) {
  // P, T in [0, 1] → |z| ≤ 50: the exp form does not overflow in float32.
  const auto n = *rc::gen::inRange<int64_t>(1, 32);
  const auto seed = *rc::gen::inRange<int64_t>(0, 1 << 30);
  torch::manual_seed(seed);
  const auto p = torch::rand({n});
  const auto t = torch::rand({n});
  RC_ASSERT(torch::allclose(binarize_sigmoid(p, t, 50), binarize_exp(p, t, 50), 1e-5, 1e-6));
}

TEST(BinarizationTest, ExpFormProducesNonFiniteGradientsInFloat16) {
  // P − T = −0.3, k = 50: exp(15) overflows float16 (max 65504) → 0·∞ = NaN.
  const auto g = grad_wrt_p({-15.0f, -30.0f, -50.0f}, torch::kFloat16, /*exp_form=*/true);
  EXPECT_FALSE(torch::isfinite(g).all().item<bool>()) << g;
  // The stable form on the same inputs stays finite.
  const auto s = grad_wrt_p({-15.0f, -30.0f, -50.0f}, torch::kFloat16, /*exp_form=*/false);
  EXPECT_TRUE(torch::isfinite(s).all().item<bool>()) << s;
}

TEST(BinarizationTest, SpecSelfCheckValues) {
  const auto p = torch::tensor({0.2f});
  const auto t = torch::tensor({0.5f});
  EXPECT_NEAR(binarize_sigmoid(p, t, 50).item<float>(), 3.06e-7, 1e-8);
  EXPECT_FLOAT_EQ(binarize_sigmoid(t, t, 50).item<float>(), 0.5f);
}

TEST(BinarizationTest, HeadSwitchesToTheUnstableFormOnlyWhenAsked) {
  DbHead head(DbHeadOptions(64));
  EXPECT_EQ(head->options.binarization(), Binarization::kSigmoid);
  head->options.binarization(Binarization::kExp).binarization_dtype(torch::kFloat16);
  auto p = torch::zeros({1, 1, 2, 2}, torch::requires_grad());
  const auto t = torch::full({1, 1, 2, 2}, 0.5);
  head->binarize(p, t).sum().backward();
  EXPECT_FALSE(torch::isfinite(p.grad()).all().item<bool>());
}

}  // namespace
}  // namespace dbh::model

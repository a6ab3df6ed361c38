#include "model/head/db_head.h"

#include "model/nn/autocast.h"
#include "model/nn/hooks.h"

namespace dbh::model {

namespace nn = torch::nn;

DbBranchImpl::DbBranchImpl(int64_t in_channels, std::string name) : name_(std::move(name)) {
  TORCH_CHECK(in_channels >= 4 && in_channels % 4 == 0,
              "Expected DB head input channels to be a positive multiple of 4, "
              "but got ", in_channels);
  const int64_t c = in_channels / 4;
  conv = register_module(
      "conv", nn::Conv2d(nn::Conv2dOptions(in_channels, c, 3).padding(1).bias(false)));
  bn = register_module("bn", nn::BatchNorm2d(c));
  up1 = register_module(
      "up1", nn::ConvTranspose2d(nn::ConvTranspose2dOptions(c, c, 2).stride(2)));
  up1_bn = register_module("up1_bn", nn::BatchNorm2d(c));
  up2 = register_module(
      "up2", nn::ConvTranspose2d(nn::ConvTranspose2dOptions(c, 1, 2).stride(2)));
}

torch::Tensor DbBranchImpl::forward(const torch::Tensor& x) {
  const auto y1 = run_module(name_ + ".conv", [&] { return torch::relu(bn(conv(x))); });
  const auto y2 = run_module(name_ + ".up1", [&] { return torch::relu(up1_bn(up1(y1))); });
  // The last layer runs in float32 even under AMP (spec §11 pitfall 2).
  AutocastOffGuard fp32;
  return run_module(name_ + ".up2", [&] { return up2(y2.to(torch::kFloat32)); });
}

torch::Tensor binarize_sigmoid(const torch::Tensor& p, const torch::Tensor& t,
                               double k) {
  return torch::sigmoid((p - t) * k);
}

torch::Tensor binarize_exp(const torch::Tensor& p, const torch::Tensor& t,
                           double k) {
  return torch::reciprocal(1 + torch::exp((p - t) * -k));
}

DbHeadImpl::DbHeadImpl(const DbHeadOptions& options_) : options(options_) {
  TORCH_CHECK(options.k() > 0, "Expected a positive binarization factor k, but got ",
              options.k());
  prob = register_module("prob", DbBranch(options.in_channels(), "head.prob"));
  thresh = register_module("thresh", DbBranch(options.in_channels(), "head.thresh"));
}

torch::Tensor DbHeadImpl::binarize(const torch::Tensor& p,
                                   const torch::Tensor& t) const {
  AutocastOffGuard fp32;
  const auto dtype = options.binarization_dtype();
  const auto pd = p.to(dtype), td = t.to(dtype);
  auto b = options.binarization() == Binarization::kSigmoid
               ? binarize_sigmoid(pd, td, options.k())
               : binarize_exp(pd, td, options.k());
  return b.to(torch::kFloat32);
}

DbHeadOutput DbHeadImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options.in_channels(),
              "Expected head input [N, ", options.in_channels(),
              ", H/4, W/4], but got ", x.sizes());
  DbHeadOutput out;
  out.prob_logits = prob(x);
  // Both branches run under the caller's autocast (their last layer turns it
  // off itself); only what follows is float32.
  const torch::Tensor thresh_logits = is_training() ? thresh(x) : torch::Tensor();
  AutocastOffGuard fp32;
  out.probability = torch::sigmoid(out.prob_logits);
  if (is_training()) {
    out.threshold = torch::sigmoid(thresh_logits);
    out.binary = run_module("head.binarize",
                            [&] { return binarize(out.probability, out.threshold); });
  }
  return out;
}

}  // namespace dbh::model

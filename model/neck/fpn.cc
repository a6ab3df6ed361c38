#include "model/neck/fpn.h"

#include "model/nn/hooks.h"

namespace dbh::model {

torch::Tensor resize_nearest(const torch::Tensor& x, torch::IntArrayRef size) {
  if (x.size(2) == size[0] && x.size(3) == size[1]) return x;
  namespace F = torch::nn::functional;
  return F::interpolate(
      x, F::InterpolateFuncOptions()
             .size(std::vector<int64_t>{size[0], size[1]})
             .mode(torch::kNearest));
}

namespace {
torch::nn::Conv2d plain_conv(int64_t in, int64_t out, int64_t k) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).padding(k / 2).bias(false));
}
}  // namespace

FpnImpl::FpnImpl(const FpnOptions& options_) : options(options_) {
  const auto& in = options.in_channels();
  const int64_t inner = options.inner_channels();
  const int64_t level = options.level_channels();
  TORCH_CHECK(inner > 0 && level > 0,
              "Expected positive FPN channel counts, but got inner=", inner,
              " level=", level);
  lateral2 = register_module("lateral2", plain_conv(in[0], inner, 1));
  lateral3 = register_module("lateral3", plain_conv(in[1], inner, 1));
  lateral4 = register_module("lateral4", plain_conv(in[2], inner, 1));
  lateral5 = register_module("lateral5", plain_conv(in[3], inner, 1));
  smooth2 = register_module("smooth2", plain_conv(inner, level, 3));
  smooth3 = register_module("smooth3", plain_conv(inner, level, 3));
  smooth4 = register_module("smooth4", plain_conv(inner, level, 3));
  smooth5 = register_module("smooth5", plain_conv(inner, level, 3));
  if (options.fusion_conv()) {
    fusion = torch::nn::AnyModule(ConvBnRelu(
        ConvBnReluOptions(4 * level, 4 * level, 3)));
  } else {
    fusion = torch::nn::AnyModule(torch::nn::Identity());
  }
  register_module("fusion", fusion.ptr());
}

torch::Tensor FpnImpl::forward(const ResNetFeatures& f) {
  const auto l5 = run_module("decoder.lateral5", [&] { return lateral5(f.c5); });
  const auto l4 = run_module("decoder.lateral4", [&] { return lateral4(f.c4); });
  const auto l3 = run_module("decoder.lateral3", [&] { return lateral3(f.c3); });
  const auto l2 = run_module("decoder.lateral2", [&] { return lateral2(f.c2); });
  const auto m4 = resize_nearest(l5, f.c4.sizes().slice(2)) + l4;
  const auto m3 = resize_nearest(m4, f.c3.sizes().slice(2)) + l3;
  const auto m2 = resize_nearest(m3, f.c2.sizes().slice(2)) + l2;
  const auto size = m2.sizes().slice(2);
  const auto p5 = run_module("decoder.smooth5", [&] { return smooth5(l5); });
  const auto p4 = run_module("decoder.smooth4", [&] { return smooth4(m4); });
  const auto p3 = run_module("decoder.smooth3", [&] { return smooth3(m3); });
  const auto p2 = run_module("decoder.smooth2", [&] { return smooth2(m2); });
  const auto fused = torch::cat({resize_nearest(p5, size), resize_nearest(p4, size),
                                 resize_nearest(p3, size), p2},
                                /*dim=*/1);
  return run_module("decoder.fusion", [&] { return fusion.forward(fused); });
}

}  // namespace dbh::model

#include "model/neck/pan.h"

#include "model/nn/hooks.h"

namespace dbh::model {

PanImpl::PanImpl(const PanOptions& options_) : options(options_) {
  const auto& in = options.in_channels();
  const int64_t c = options.inner_channels();
  TORCH_CHECK(c > 0 && options.out_channels() > 0,
              "Expected positive PAN channel counts, but got inner=", c,
              " out=", options.out_channels());
  auto cbr = [](int64_t i, int64_t o, int64_t k, int64_t s = 1) {
    return ConvBnRelu(ConvBnReluOptions(i, o, k).stride(s));
  };
  lateral2 = register_module("lateral2", cbr(in[0], c, 1));
  lateral3 = register_module("lateral3", cbr(in[1], c, 1));
  lateral4 = register_module("lateral4", cbr(in[2], c, 1));
  lateral5 = register_module("lateral5", cbr(in[3], c, 1));
  smooth4 = register_module("smooth4", cbr(c, c, 3));
  smooth3 = register_module("smooth3", cbr(c, c, 3));
  smooth2 = register_module("smooth2", cbr(c, c, 3));
  down2 = register_module("down2", cbr(c, c, 3, 2));
  down3 = register_module("down3", cbr(c, c, 3, 2));
  down4 = register_module("down4", cbr(c, c, 3, 2));
  merge3 = register_module("merge3", cbr(c, c, 3));
  merge4 = register_module("merge4", cbr(c, c, 3));
  merge5 = register_module("merge5", cbr(c, c, 3));
  fusion = register_module("fusion", cbr(4 * c, options.out_channels(), 3));
}

torch::Tensor PanImpl::forward(const ResNetFeatures& f) {
  auto m = [](const char* name, auto&& fn) { return run_module(name, fn); };
  // Top-down.
  const auto p5 = m("decoder.lateral5", [&] { return lateral5(f.c5); });
  const auto l4 = m("decoder.lateral4", [&] { return lateral4(f.c4); });
  const auto l3 = m("decoder.lateral3", [&] { return lateral3(f.c3); });
  const auto l2 = m("decoder.lateral2", [&] { return lateral2(f.c2); });
  const auto p4 = m("decoder.smooth4",
                    [&] { return smooth4(resize_nearest(p5, f.c4.sizes().slice(2)) + l4); });
  const auto p3 = m("decoder.smooth3",
                    [&] { return smooth3(resize_nearest(p4, f.c3.sizes().slice(2)) + l3); });
  const auto p2 = m("decoder.smooth2",
                    [&] { return smooth2(resize_nearest(p3, f.c2.sizes().slice(2)) + l2); });
  // Bottom-up: one stride-2 convolution per level. The resize is a no-op for
  // inputs divisible by 32 and only guards odd intermediate sizes.
  const auto n2 = p2;
  const auto n3 = m("decoder.merge3", [&] {
    return merge3(resize_nearest(down2(n2), p3.sizes().slice(2)) + p3);
  });
  const auto n4 = m("decoder.merge4", [&] {
    return merge4(resize_nearest(down3(n3), p4.sizes().slice(2)) + p4);
  });
  const auto n5 = m("decoder.merge5", [&] {
    return merge5(resize_nearest(down4(n4), p5.sizes().slice(2)) + p5);
  });
  const auto size = n2.sizes().slice(2);
  const auto cat = torch::cat(
      {resize_nearest(n5, size), resize_nearest(n4, size), resize_nearest(n3, size), n2},
      /*dim=*/1);
  return m("decoder.fusion", [&] { return fusion(cat); });
}

}  // namespace dbh::model

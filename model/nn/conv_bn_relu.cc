#include "model/nn/conv_bn_relu.h"

namespace dbh::model {

ConvBnReluImpl::ConvBnReluImpl(const ConvBnReluOptions& options_)
    : options(options_) {
  TORCH_CHECK(options.in_channels() > 0 && options.out_channels() > 0,
              "Expected positive channel counts, but got in=",
              options.in_channels(), " out=", options.out_channels());
  TORCH_CHECK(options.kernel_size() > 0 && options.stride() > 0,
              "Expected a positive kernel size and stride, but got kernel=",
              options.kernel_size(), " stride=", options.stride());
  const int64_t padding = options.padding().value_or(options.kernel_size() / 2);
  conv = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(),
                                                         options.out_channels(),
                                                         options.kernel_size())
                                    .stride(options.stride())
                                    .padding(padding)
                                    .bias(false)));
  bn = register_module("bn",
                       torch::nn::BatchNorm2d(options.out_channels()));
}

torch::Tensor ConvBnReluImpl::forward(const torch::Tensor& x) {
  auto y = bn(conv(x));
  return options.relu() ? torch::relu(y) : y;
}

void db_init_(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/true)) {
    if (auto* conv = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight);
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* deconv = m->as<torch::nn::ConvTranspose2d>()) {
      torch::nn::init::kaiming_normal_(deconv->weight);
      if (deconv->bias.defined()) deconv->bias.zero_();
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.fill_(1e-4);
    }
  }
}

}  // namespace dbh::model

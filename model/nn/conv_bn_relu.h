#pragma once

#include <torch/torch.h>

namespace dbh::model {

/// Options for `ConvBnRelu`: a 2-D convolution (no bias) followed by batch
/// normalisation and, optionally, ReLU.
struct ConvBnReluOptions {
  ConvBnReluOptions(int64_t in_channels, int64_t out_channels,
                    int64_t kernel_size)
      : in_channels_(in_channels),
        out_channels_(out_channels),
        kernel_size_(kernel_size) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(int64_t, kernel_size);
  TORCH_ARG(int64_t, stride) = 1;
  /// Defaults to `kernel_size / 2` ("same" padding for odd kernels).
  TORCH_ARG(c10::optional<int64_t>, padding) = c10::nullopt;
  TORCH_ARG(bool, relu) = true;
};

/// conv → bn → relu. Submodules are named `conv` and `bn`.
class ConvBnReluImpl : public torch::nn::Module {
 public:
  explicit ConvBnReluImpl(const ConvBnReluOptions& options);

  /// x: [N, in_channels, H, W] → [N, out_channels, H / stride, W / stride].
  torch::Tensor forward(const torch::Tensor& x);

  ConvBnReluOptions options;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(ConvBnRelu);

/// DB initialisation (spec §2.1/§3.1): Kaiming-normal weights for every
/// convolution and transposed convolution, zero biases, BatchNorm γ = 1 and
/// β = 1e-4. Applied recursively to `module` and all its descendants.
void db_init_(torch::nn::Module& module);

}  // namespace dbh::model

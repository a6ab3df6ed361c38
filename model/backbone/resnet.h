#pragma once

#include <array>

#include <torch/torch.h>

namespace dbh::model {

/// Options for the ResNet encoder (torchvision layout, "pytorch" style: the
/// stride of a Bottleneck sits on its 3×3 convolution).
struct ResNetOptions {
  /// 18, 34 or 50.
  TORCH_ARG(int64_t, depth) = 18;
  TORCH_ARG(int64_t, in_channels) = 3;
};

/// The four stage outputs the DB neck consumes (spec §1.1).
struct ResNetFeatures {
  torch::Tensor c2;  // [N, C2, H/4,  W/4 ]
  torch::Tensor c3;  // [N, C3, H/8,  W/8 ]
  torch::Tensor c4;  // [N, C4, H/16, W/16]
  torch::Tensor c5;  // [N, C5, H/32, W/32]
};

/// ResNet-18/34/50 without the classifier, exporting C2..C5. Submodules carry
/// torchvision's names (`conv1`, `bn1`, `layer1`…`layer4`, blocks `0`, `1`, …
/// with `conv1`, `bn1`, …, `downsample`), so torchvision state dicts load by
/// name.
class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options = {});

  /// x: [N, in_channels, H, W] with H, W multiples of 32.
  ResNetFeatures forward(const torch::Tensor& x);

  /// Channel counts of C2..C5: {64,128,256,512} for 18/34,
  /// {256,512,1024,2048} for 50.
  std::array<int64_t, 4> out_channels() const { return out_channels_; }

  ResNetOptions options;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr},
      layer4{nullptr};

 private:
  std::array<int64_t, 4> out_channels_{};
};
TORCH_MODULE(ResNet);

}  // namespace dbh::model

#pragma once

#include <array>

#include "model/neck/decoder.h"
#include "model/nn/conv_bn_relu.h"

namespace dbh::model {

/// Options for the DB FPN neck (spec §2.1; "SegDetector" neck of the released
/// code, FPNC in MMOCR).
struct FpnOptions {
  explicit FpnOptions(std::array<int64_t, 4> in_channels)
      : in_channels_(in_channels) {}
  /// Channels of C2..C5.
  using Channels = std::array<int64_t, 4>;
  TORCH_ARG(Channels, in_channels);
  TORCH_ARG(int64_t, inner_channels) = 256;
  /// Channels of each smoothed level; the concatenation has 4× as many.
  TORCH_ARG(int64_t, level_channels) = 64;
  /// A 3×3 conv + BN + ReLU after the concatenation (MMOCR's
  /// `conv_after_concat`). When false `fusion` is an identity and the neck is
  /// exactly the paper's.
  TORCH_ARG(bool, fusion_conv) = true;
};

/// Laterals `lateral2`..`lateral5` (1×1, no bias, no BN/ReLU), top-down
/// nearest ×2 upsample-and-add, per-level 3×3 `smooth2`..`smooth5`
/// (inner → level channels), upsampling to stride 4 and concatenation in the
/// order [P5, P4, P3, P2], then `fusion`.
class FpnImpl : public DecoderImpl {
 public:
  explicit FpnImpl(const FpnOptions& options);

  torch::Tensor forward(const ResNetFeatures& f) override;
  int64_t out_channels() const override { return 4 * options.level_channels(); }

  FpnOptions options;
  torch::nn::Conv2d lateral2{nullptr}, lateral3{nullptr}, lateral4{nullptr},
      lateral5{nullptr};
  torch::nn::Conv2d smooth2{nullptr}, smooth3{nullptr}, smooth4{nullptr},
      smooth5{nullptr};
  torch::nn::AnyModule fusion;
};
TORCH_MODULE(Fpn);

}  // namespace dbh::model

#pragma once

#include <array>

#include "model/neck/decoder.h"
#include "model/nn/conv_bn_relu.h"

namespace dbh::model {

/// Options for the PAN-style decoder (spec §2.3, variant 2: PANet path
/// aggregation, the `pan_decoder` of the configurations the seeds' reports
/// were produced with).
struct PanOptions {
  explicit PanOptions(std::array<int64_t, 4> in_channels)
      : in_channels_(in_channels) {}
  using Channels = std::array<int64_t, 4>;
  TORCH_ARG(Channels, in_channels);
  TORCH_ARG(int64_t, inner_channels) = 256;
  TORCH_ARG(int64_t, out_channels) = 256;
};

/// `lateral2`..`lateral5`: 1×1 Conv+BN+ReLU to inner channels.
/// Top-down: P5 = L5; Pi = `smooth{i}`(up2(Pi+1) + Li) for i = 4, 3, 2.
/// Bottom-up (PANet): N2 = P2; Ni = `merge{i}`(`down{i-1}`(Ni-1) + Pi) for
/// i = 3, 4, 5, where `down` is a single 3×3 stride-2 Conv+BN+ReLU, so each
/// bottom-up output lands exactly on the resolution of the level it is fused
/// with (the fork's extra max-pool is not reproduced).
/// N2..N5 are resized to stride 4, concatenated (4 × inner) and squeezed by
/// `fusion` (3×3 Conv+BN+ReLU) to out_channels.
class PanImpl : public DecoderImpl {
 public:
  explicit PanImpl(const PanOptions& options);

  torch::Tensor forward(const ResNetFeatures& f) override;
  int64_t out_channels() const override { return options.out_channels(); }

  PanOptions options;
  ConvBnRelu lateral2{nullptr}, lateral3{nullptr}, lateral4{nullptr},
      lateral5{nullptr};
  ConvBnRelu smooth2{nullptr}, smooth3{nullptr}, smooth4{nullptr};
  ConvBnRelu down2{nullptr}, down3{nullptr}, down4{nullptr};
  ConvBnRelu merge3{nullptr}, merge4{nullptr}, merge5{nullptr};
  ConvBnRelu fusion{nullptr};
};
TORCH_MODULE(Pan);

}  // namespace dbh::model

#pragma once

#include <torch/torch.h>

#include "model/backbone/resnet.h"

namespace dbh::model {

/// A DB neck: turns C2..C5 into one fused feature map at stride 4. Every
/// decoder ends in a module named `fusion`, whose output is the map the head
/// consumes, so faults, monitors and reports can address `decoder.fusion`
/// whichever decoder a scenario selects.
class DecoderImpl : public torch::nn::Module {
 public:
  /// Returns [N, out_channels(), H/4, W/4].
  virtual torch::Tensor forward(const ResNetFeatures& features) = 0;
  virtual int64_t out_channels() const = 0;
};

/// Nearest-neighbour resize of x: [N, C, h, w] to [N, C, size[0], size[1]].
torch::Tensor resize_nearest(const torch::Tensor& x,
                             torch::IntArrayRef size);

}  // namespace dbh::model

#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/backbone/resnet.h"
#include "model/choices.h"
#include "model/head/db_head.h"
#include "model/observed_modules.h"
#include "model/neck/decoder.h"

namespace dbh::model {

/// Options for the whole detector. The head's input channels follow from the
/// decoder and are filled in by the constructor.
struct DbNetOptions {
  TORCH_ARG(ResNetOptions, encoder) = {};
  TORCH_ARG(DecoderKind, decoder) = DecoderKind::kFpn;
  TORCH_ARG(double, k) = 50.0;
  TORCH_ARG(Binarization, binarization) = Binarization::kSigmoid;
  TORCH_ARG(torch::Dtype, binarization_dtype) = torch::kFloat32;
};

using DbNetOutput = DbHeadOutput;

/// DBNet: `encoder` (ResNet) → `decoder` (FPN or PAN, ending in
/// `decoder.fusion`) → `head` (`head.prob.*`, `head.thresh.*`).
class DbNetImpl : public torch::nn::Module {
 public:
  explicit DbNetImpl(const DbNetOptions& options = {});

  /// image: [N, 3, H, W] float, H and W multiples of 32.
  DbNetOutput forward(const torch::Tensor& image);

  /// Loads parameters and buffers by name from a file written by `save_weights`
  /// (or converted from torchvision/[DB] state dicts). Entries whose name is
  /// unknown or whose shape differs are skipped; returns how many were loaded.
  int64_t load_weights(const std::string& path);
  void save_weights(const std::string& path) const;

  /// Switches the binarization (used by the `unstable_binarization` fault).
  void set_binarization(Binarization form, torch::Dtype dtype);

  /// Names of all submodules in registration (= execution) order, e.g.
  /// "encoder.layer3", "decoder.fusion", "head.prob.up2".
  std::vector<std::string> module_names() const;

  DbNetOptions options;
  ResNet encoder{nullptr};
  std::shared_ptr<DecoderImpl> decoder;
  DbHead head{nullptr};
};
TORCH_MODULE(DbNet);

/// Writes `archive` to `path` as OutputArchive::save_to(path) does, except on
/// a write error (a full disk): LibTorch's zip writer would throw, then throw
/// again from its destructor and abort the process. Here a failed write is
/// remembered, the writer finishes, the file is removed, and
/// std::runtime_error names the path and the error. A link at `path` is
/// never written through.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);

}  // namespace dbh::model

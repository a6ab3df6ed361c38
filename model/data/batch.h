#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/loss/db_loss.h"

namespace dbh::model {

/// One training batch, named as in the seeds' batches.
struct Batch {
  torch::Tensor image;  // [N, 3, H, W] float32, normalised
  DbTargets targets;    // four maps, each [N, 1, H, W] float32
  /// Where each sample came from ("img_001.png", "synthetic:17", …), so a
  /// failure can name its samples.
  std::vector<std::string> sample_ids;
  /// Legible words per sample that the annotations promise at this training
  /// size (care texts, finite, at least the label generator's min_text_size
  /// in both directions once clipped to the image), counted from the
  /// annotations, not from the maps: the silent-failure monitors compare it
  /// with the maps the model is trained on. Empty when unknown (random data).
  std::vector<int64_t> words;
  /// [N, B, 4] float32: the clipped axis-aligned boxes (x0, y0, x1, y1, in
  /// pixels, inclusive) of those words, padded with empty boxes (x0 > x1).
  /// Every text kernel of gt_shrink lies inside its word's box (up to a pixel
  /// of rounding). Undefined when unknown.
  torch::Tensor word_boxes;

  int64_t size() const { return image.defined() ? image.size(0) : 0; }
  /// Copies every tensor to `device` (non-blocking from pinned memory).
  Batch to(const torch::Device& device, bool non_blocking = false) const;
  /// A deep copy: every tensor cloned, so that changing one (a fault that
  /// writes into its batch) leaves the other as it was.
  Batch clone() const;
};

/// Random tensors of the right shapes and ranges, like the seeds'
/// `torch.randn` model test: a normal image, a random binary shrink map, full
/// masks and a threshold map in [0.3, 0.7]. Deterministic in `seed`.
Batch synthetic_random_batch(int64_t batch_size, int64_t height, int64_t width,
                             uint64_t seed);

/// A learnable synthetic batch: each image shows a few bright rectangles on a
/// noisy background, and the targets are the DB maps of those rectangles
/// (shrunk kernel, threshold band). Deterministic in `seed`.
Batch synthetic_boxes_batch(int64_t batch_size, int64_t height, int64_t width,
                            uint64_t seed);

}  // namespace dbh::model

#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

#include "model/data/image_decode.h"
#include "model/label/label_maps.h"

namespace dbh::model {

/// A small counter-based random source: every draw is a function of the seed
/// it was built from, so a sample's augmentation depends on (seed, epoch,
/// index) alone, whatever thread or order produces it.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  uint64_t next();
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi);
  /// Uniform integer in [lo, hi].
  int64_t integer(int64_t lo, int64_t hi);

 private:
  uint64_t state_;
};

/// The DB training augmentation (spec §6.1), in order: horizontal flip,
/// rotation about the centre (same canvas), rescale by one factor, a
/// text-preserving random crop scaled to fit `size`×`size` and pasted at the
/// top-left of a zero canvas.
struct AugmentOptions {
  int size = 640;
  double flip_prob = 0.5;
  double max_rotate_deg = 10.0;
  double min_scale = 0.5;
  double max_scale = 3.0;
  double min_crop_side_ratio = 0.1;
  int max_crop_tries = 10;
};

/// An image with its text polygons, in that image's pixel coordinates.
struct AnnotatedImage {
  cv::Mat image;  // BGR, CV_8UC3
  std::vector<TextInstance> texts;
};

/// Applies the augmentation with draws from `rng`. The result is size×size.
AnnotatedImage augment(const AnnotatedImage& in, const AugmentOptions& options, SampleRng& rng);

/// No augmentation: scale to fit size×size (aspect kept) and pad bottom/right.
/// `scale_out` receives the resize factor.
AnnotatedImage letterbox(const AnnotatedImage& in, int size, double* scale_out = nullptr);

}  // namespace dbh::model

#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

#include "model/data/annotation.h"
#include "model/data/batch.h"
#include "model/label/label_maps.h"

namespace dbh::model {

/// Settings of a real dataset on disk.
struct DatasetOptions {
  /// Folder holding `images/` and either `annotations.json` (UFO) or
  /// `icdar/gt_<image stem>.txt` files.
  std::string root;
  /// Square training size (multiple of 32). Images are scaled to fit and
  /// padded bottom/right.
  int64_t size = 640;
  OnInvalid on_invalid = OnInvalid::kError;
  std::vector<std::string> ignore_tags;
  LabelMapOptions labels;
};

/// One preprocessed sample: the network input and its four DB maps.
struct Sample {
  std::string id;       // image file name
  cv::Mat image;        // size × size, CV_32FC3, normalised (RGB, ImageNet stats)
  LabelMaps maps;       // size × size each
  double scale = 1.0;   // resize factor applied to the original image
};

/// A dataset of real images with word polygons. Reading validates every
/// annotation under the `on_invalid` policy; defects found are kept and
/// reported. Throws DataError when the policy is kError and defects were
/// found, or when nothing can be read.
class Dataset {
 public:
  explicit Dataset(DatasetOptions options);

  int64_t size() const { return static_cast<int64_t>(images_.size()); }
  const std::vector<ImageAnnotation>& images() const { return images_; }
  const std::vector<Defect>& defects() const { return defects_; }
  const DatasetOptions& options() const { return options_; }
  /// "UFO JSON" or "ICDAR 2015 txt".
  const std::string& format() const { return format_; }

  /// Loads, resizes, pads, normalises and labels sample `index`. A function of
  /// the index alone, so any sample can be regenerated on its own.
  Sample get(int64_t index) const;

  /// Collates samples into a batch of tensors.
  Batch collate(const std::vector<int64_t>& indices) const;

 private:
  DatasetOptions options_;
  std::string format_;
  std::vector<ImageAnnotation> images_;
  std::vector<Defect> defects_;
};

/// The sample indices of the `batch_size` samples consumed by micro-batch
/// `micro`: samples are drawn epoch by epoch in a permutation that depends
/// only on (seed, epoch).
std::vector<int64_t> batch_indices(int64_t dataset_size, int64_t batch_size,
                                   uint64_t seed, int64_t micro);

/// ImageNet statistics, RGB order, applied to pixels scaled to [0, 1].
inline constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

}  // namespace dbh::model

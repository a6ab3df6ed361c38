#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/mat.hpp>

#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "model/data/annotation.h"
#include "model/data/augment.h"
#include "model/data/batch.h"
#include "model/data/scan.h"
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
  /// Apply the DB training augmentation; otherwise letterbox only.
  bool augment = false;
  AugmentOptions augmentation;
  /// Seed of the augmentation draws (with epoch and sample index).
  uint64_t seed = 0;
  /// Decode every image before training (catches unreadable files up front).
  /// Off, an unreadable image fails when a batch first needs it, as lazily
  /// decoding pipelines do.
  bool preflight = true;
  /// When > 0, the dataset is `synthetic_render`: this many deterministic
  /// rendered text images (render_synthetic_text(seed, index)) instead of a
  /// folder; `root` is ignored.
  int64_t synthetic_samples = 0;
  /// Keep only these indices (in scan order), in this order; empty keeps all.
  std::vector<int64_t> subset;
  /// Apply EXIF orientation when decoding (off: annotations usually refer to
  /// the stored pixels).
  bool apply_exif = false;
};

/// One preprocessed sample: the network input and its four DB maps.
struct Sample {
  std::string id;       // image file name
  cv::Mat image;        // size × size, CV_32FC3, normalised (RGB, ImageNet stats)
  LabelMaps maps;       // size × size each
  double scale = 1.0;   // resize factor applied to the original image
  /// Boxes (x0, y0, x1, y1) of the legible words of trainable size in the
  /// annotation (Batch::words, Batch::word_boxes).
  std::vector<std::array<float, 4>> word_boxes;
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

  /// Loads, augments (or letterboxes), normalises and labels sample `index`
  /// of `epoch`. A function of (seed, epoch, index) alone, so any sample can
  /// be regenerated on its own. Throws DataError naming the file when the
  /// image cannot be decoded.
  Sample get(int64_t index, int64_t epoch = 0) const;

  /// Collates samples into a batch of tensors.
  Batch collate(const std::vector<int64_t>& indices, int64_t epoch = 0) const;

 private:
  DatasetOptions options_;
  std::string format_;
  std::vector<ImageAnnotation> images_;
  std::vector<Defect> defects_;
  std::vector<int64_t> render_index_;  // synthetic_render: the rendered index per sample
};


/// Checks a batch: finite values, images within the normalised range of
/// [0, 1] pixels, maps within [0, 1], masks and the shrink map binary.
/// Returns "" when valid, else a message naming the sample and the check.
std::string validate_batch(const Batch& batch);

struct LoaderOptions {
  int64_t batch_size = 2;
  /// Threads that prepare batches ahead; 0 prepares each batch inline.
  int64_t num_workers = 0;
  /// Batches prepared ahead of the one being consumed (bounded queue).
  int64_t prefetch = 2;
  uint64_t seed = 0;
  /// Run validate_batch on every batch and throw DataError on a bad one.
  bool validate = false;
};

/// Multi-threaded, prefetching batch loader over a Dataset. Batch `micro` is
/// a function of (seed, micro) alone: identical for any number of workers.
class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// The batch for micro-batch `micro` (CPU tensors). Rethrows a loading
  /// error of that batch.
  Batch get(int64_t micro);

  const LoaderOptions& options() const { return options_; }

 private:
  Batch produce(int64_t micro) const;
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int64_t, std::shared_ptr<std::promise<Batch>>> pending_;
  std::map<int64_t, std::shared_future<Batch>> ready_;
  int64_t next_to_schedule_ = 0;
  std::vector<int64_t> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

/// ImageNet statistics, RGB order, applied to pixels scaled to [0, 1].
inline constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

}  // namespace dbh::model

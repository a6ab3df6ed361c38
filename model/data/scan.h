#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/data/annotation.h"

namespace dbh::model {

/// What reading a dataset folder found.
struct ScanResult {
  std::string root;
  /// "UFO JSON", "ICDAR 2015 txt", or "" when no annotations were found.
  std::string format;
  /// annotations.json, or the icdar/ folder.
  std::string annotation_path;
  /// Usable images (under kError: every image read, defects and all).
  std::vector<ImageAnnotation> images;
  std::vector<Defect> defects;
  int64_t images_listed = 0;
  /// Images whose file exists and decodes.
  int64_t images_usable = 0;
  int64_t words = 0;
  int64_t words_ignored = 0;
  /// False when the annotations cannot be read at all (no file, not JSON…).
  bool readable = false;
};

/// The file an annotation's image name refers to: `root`/images/`file`. A
/// UFO key may be any path, so an absolute name is that path and a name with
/// ".." may leave the images folder (or the dataset).
std::string image_path(const std::string& root, const std::string& file);

/// Reads `root` (images/ plus annotations.json or icdar/gt_*.txt), checks
/// every image file (exists, decodes, size) and every word under `policy`.
/// Never throws.
ScanResult scan_dataset(const std::string& root, OnInvalid policy,
                        const std::vector<std::string>& ignore_tags = {},
                        bool check_images = true);

/// The sample indices of the `batch_size` samples consumed by micro-batch
/// `micro`: samples are drawn epoch by epoch in a permutation that depends
/// only on (seed, epoch).
std::vector<int64_t> batch_indices(int64_t dataset_size, int64_t batch_size,
                                   uint64_t seed, int64_t micro);

}  // namespace dbh::model

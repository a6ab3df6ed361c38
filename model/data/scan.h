#pragma once

#include <cstdint>
#include <functional>
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
  /// False when the annotations cannot be read at all (no file, not JSON…)
  /// or not safely: a defect that refuses_dataset() (an image annotated
  /// twice, a name or file that resolves outside the dataset folder), under
  /// every policy. Such defects come first in `defects`.
  bool readable = false;
};

/// Where an annotation's image name leads in the dataset at `root`.
struct ImageRef {
  /// `root`/images/`file`, as messages show it and readers open it. A UFO key
  /// may be any path: an absolute name is that path.
  std::string path;
  /// `path` with links and ".." resolved (std::filesystem::weakly_canonical).
  std::string resolved;
  /// Empty when `path` resolves inside `root`; else what is wrong, as
  /// "expected a file inside the dataset folder <root>, got …".
  std::string problem;
};

/// Resolves image name `file` of the dataset at `root`: the one check of
/// every reader that an image name stays inside its dataset folder as
/// written (whole path components compared, so /data/set2 is not inside
/// /data/set); links in the dataset are followed wherever they lead. Never
/// throws.
ImageRef resolve_image(const std::string& root, const std::string& file);

/// The file image name `file` refers to: resolve_image(root, file).path.
/// Throws DataError (kOutsideDataset) naming `file` when it resolves outside
/// `root`; scan_dataset never offers such a name.
std::string image_path(const std::string& root, const std::string& file);

/// Reads `root` (images/ plus annotations.json or icdar/gt_*.txt), checks
/// every image file (exists, decodes, size) and every word under `policy`.
/// Every annotation file and image name must resolve inside `root`
/// (kOutsideDataset: such an image is neither checked nor kept in `images`,
/// such a file not read), and each image file must be annotated once
/// (kDuplicateImage, naming both places): either makes the scan unreadable.
/// Never throws.
/// `on_progress` (when set) hears (images checked, images listed) after
/// each image.
ScanResult scan_dataset(const std::string& root, OnInvalid policy,
                        const std::vector<std::string>& ignore_tags = {},
                        bool check_images = true,
                        const std::function<void(int64_t, int64_t)>& on_progress = {});

/// The sample indices of the `batch_size` samples consumed by micro-batch
/// `micro`: samples are drawn epoch by epoch in a permutation that depends
/// only on (seed, epoch).
std::vector<int64_t> batch_indices(int64_t dataset_size, int64_t batch_size,
                                   uint64_t seed, int64_t micro);

}  // namespace dbh::model

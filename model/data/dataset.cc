#include "model/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <torch/torch.h>

namespace dbh::model {
namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

torch::Tensor mat_to_tensor(const cv::Mat& m) {
  // HxWxC float32 → [C, H, W].
  TORCH_INTERNAL_ASSERT(m.isContinuous() && m.depth() == CV_32F);
  auto t = torch::from_blob(const_cast<float*>(m.ptr<float>()),
                            {m.rows, m.cols, m.channels()}, torch::kFloat32);
  return t.permute({2, 0, 1}).clone();
}

}  // namespace

Dataset::Dataset(DatasetOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.size > 0 && options_.size % 32 == 0,
              "Expected a training size that is a positive multiple of 32, but got ",
              options_.size);
  const fs::path root(options_.root);
  const fs::path ufo = root / "annotations.json";
  const fs::path icdar = root / "icdar";
  ReadResult read;
  if (fs::exists(ufo)) {
    format_ = "UFO JSON";
    read = read_ufo_json(ufo.string(), options_.ignore_tags);
  } else if (fs::is_directory(icdar)) {
    format_ = "ICDAR 2015 txt";
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(icdar)) {
      if (e.path().extension() == ".txt") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string stem = f.stem().string();
      if (stem.rfind("gt_", 0) == 0) stem = stem.substr(3);
      std::string image_file;
      for (const char* ext : {".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".bmp", ".tif", ".tiff"}) {
        if (fs::exists(root / "images" / (stem + ext))) {
          image_file = stem + ext;
          break;
        }
      }
      if (image_file.empty()) image_file = stem + ".png";
      auto r = read_icdar_txt(f.string(), image_file);
      read.images.insert(read.images.end(), r.images.begin(), r.images.end());
      read.defects.insert(read.defects.end(), r.defects.begin(), r.defects.end());
    }
  } else {
    throw DataError({Defect{DefectKind::kUnreadableFile, options_.root, "", "", 0,
                            options_.root + ": expected annotations.json (UFO) or an icdar/ "
                                            "folder of gt_*.txt files, found neither"}});
  }
  defects_ = read.defects;
  const std::string ann_file = format_ == "UFO JSON" ? ufo.string() : icdar.string();
  for (auto& image : read.images) {
    auto found = check_image(image, (root / "images" / image.file).string(), ann_file);
    const bool unusable = std::any_of(found.begin(), found.end(), [](const Defect& d) {
      return d.kind == DefectKind::kMissingImage || d.kind == DefectKind::kUnreadableImage;
    });
    auto word_defects = validate(image, options_.on_invalid, ann_file);
    found.insert(found.end(), word_defects.begin(), word_defects.end());
    defects_.insert(defects_.end(), found.begin(), found.end());
    if (!unusable || options_.on_invalid == OnInvalid::kError) images_.push_back(std::move(image));
  }
  if (options_.on_invalid == OnInvalid::kError && !defects_.empty()) throw DataError(defects_);
  if (images_.empty()) {
    throw DataError({Defect{DefectKind::kUnreadableFile, ann_file, "", "", 0,
                            ann_file + ": expected at least one usable image, found none"}});
  }
}

Sample Dataset::get(int64_t index) const {
  TORCH_CHECK(index >= 0 && index < size(), "Expected a sample index in [0, ", size(),
              "), but got ", index);
  const auto& ann = images_[static_cast<size_t>(index)];
  const fs::path path = fs::path(options_.root) / "images" / ann.file;
  cv::Mat bgr = cv::imread(path.string(), cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  if (bgr.empty()) {
    throw DataError({Defect{DefectKind::kUnreadableImage, path.string(), ann.file, "", 0,
                            path.string() + ": cannot decode the image"}});
  }
  const int s = static_cast<int>(options_.size);
  const double scale = static_cast<double>(s) / std::max(bgr.rows, bgr.cols);
  const int w = std::max(1, static_cast<int>(std::lround(bgr.cols * scale)));
  const int h = std::max(1, static_cast<int>(std::lround(bgr.rows * scale)));
  cv::Mat resized;
  cv::resize(bgr, resized, cv::Size(w, h), 0, 0, scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  cv::Mat rgb;
  cv::cvtColor(resized, rgb, cv::COLOR_BGR2RGB);
  cv::Mat canvas = cv::Mat::zeros(s, s, CV_32FC3);
  cv::Mat roi = canvas(cv::Rect(0, 0, w, h));
  rgb.convertTo(roi, CV_32FC3, 1.0 / 255.0);
  // Normalise the content; padding becomes the normalised value of black.
  cv::Mat channels[3];
  cv::split(canvas, channels);
  for (int c = 0; c < 3; ++c) channels[c] = (channels[c] - kMean[c]) / kStd[c];
  cv::merge(channels, 3, canvas);

  std::vector<TextInstance> texts;
  const double sx = static_cast<double>(w) / bgr.cols, sy = static_cast<double>(h) / bgr.rows;
  for (const auto& word : ann.words) {
    TextInstance t;
    t.ignore = word.ignore;
    for (const auto& p : word.points) t.polygon.push_back({p.x * sx, p.y * sy});
    texts.push_back(std::move(t));
  }
  Sample sample;
  sample.id = ann.file;
  sample.image = canvas;
  sample.maps = make_label_maps(texts, s, s, options_.labels);
  sample.scale = scale;
  return sample;
}

Batch Dataset::collate(const std::vector<int64_t>& indices) const {
  std::vector<torch::Tensor> images, shrink, shrink_mask, thresh, thresh_mask;
  Batch b;
  for (const int64_t i : indices) {
    const Sample s = get(i);
    images.push_back(mat_to_tensor(s.image));
    shrink.push_back(mat_to_tensor(s.maps.gt_shrink));
    shrink_mask.push_back(mat_to_tensor(s.maps.gt_shrink_mask));
    thresh.push_back(mat_to_tensor(s.maps.gt_thresh));
    thresh_mask.push_back(mat_to_tensor(s.maps.gt_thresh_mask));
    b.sample_ids.push_back(s.id);
  }
  b.image = torch::stack(images);
  b.targets.gt_shrink = torch::stack(shrink);
  b.targets.gt_shrink_mask = torch::stack(shrink_mask);
  b.targets.gt_thresh = torch::stack(thresh);
  b.targets.gt_thresh_mask = torch::stack(thresh_mask);
  return b;
}

std::vector<int64_t> batch_indices(int64_t n, int64_t batch_size, uint64_t seed, int64_t micro) {
  TORCH_CHECK(n > 0 && batch_size > 0, "Expected a non-empty dataset and batch, but got ", n,
              " samples and batch ", batch_size);
  std::vector<int64_t> out;
  int64_t cached_epoch = -1;
  std::vector<int64_t> perm;
  for (int64_t k = 0; k < batch_size; ++k) {
    const int64_t pos = micro * batch_size + k;
    const int64_t epoch = pos / n;
    if (epoch != cached_epoch) {
      perm.resize(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      uint64_t state = seed ^ (0x5DEECE66DULL * static_cast<uint64_t>(epoch + 1));
      for (int64_t i = n - 1; i > 0; --i) {
        const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
        std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
      }
      cached_epoch = epoch;
    }
    out.push_back(perm[static_cast<size_t>(pos % n)]);
  }
  return out;
}

}  // namespace dbh::model

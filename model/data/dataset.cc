#include "model/data/dataset.h"

#include "model/data/scan.h"
#include "model/data/synthetic_render.h"

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

torch::Tensor mat_to_tensor(const cv::Mat& m) {
  // HxWxC float32 → [C, H, W].
  TORCH_INTERNAL_ASSERT(m.isContinuous() && m.depth() == CV_32F);
  auto t = torch::from_blob(const_cast<float*>(m.ptr<float>()),
                            {m.rows, m.cols, m.channels()}, torch::kFloat32);
  return t.permute({2, 0, 1}).clone();
}

// The legible words the annotation promises at the training size: care
// texts with finite vertices whose outline, clipped to the image, spans at
// least `min_size` px in both directions (the label generator's size rule).
// Their clipped boxes, from the annotation, independently of the maps.
std::vector<std::array<float, 4>> trainable_word_boxes(const std::vector<TextInstance>& texts, int width,
                                                       int height, double min_size) {
  std::vector<std::array<float, 4>> boxes;
  for (const auto& t : texts) {
    if (t.ignore || t.polygon.empty()) continue;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    bool finite = true;
    for (const auto& p : t.polygon) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) finite = false;
      const double x = std::clamp(p.x, 0.0, width - 1.0), y = std::clamp(p.y, 0.0, height - 1.0);
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
    if (finite && std::min(x1 - x0, y1 - y0) >= min_size) {
      boxes.push_back({static_cast<float>(x0), static_cast<float>(y0), static_cast<float>(x1), static_cast<float>(y1)});
    }
  }
  return boxes;
}

}  // namespace

Dataset::Dataset(DatasetOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.size > 0 && options_.size % 32 == 0,
              "Expected a training size that is a positive multiple of 32, but got ",
              options_.size);
  if (options_.synthetic_samples > 0) {
    format_ = "synthetic_render";
    std::vector<int64_t> indices = options_.subset;
    if (indices.empty()) {
      for (int64_t i = 0; i < options_.synthetic_samples; ++i) indices.push_back(i);
    }
    for (const int64_t i : indices) {
      TORCH_CHECK(i >= 0 && i < options_.synthetic_samples, "Expected synthetic sample indices in [0, ",
                  options_.synthetic_samples, "), but got ", i);
      ImageAnnotation a;
      a.file = "synthetic_render:" + std::to_string(options_.seed) + ":" + std::to_string(i);
      images_.push_back(a);
      render_index_.push_back(i);
    }
    return;
  }
  ScanResult scan = scan_dataset(options_.root, options_.on_invalid, options_.ignore_tags,
                                 options_.preflight);
  format_ = scan.format;
  defects_ = std::move(scan.defects);
  images_ = std::move(scan.images);
  if (!scan.readable || (options_.on_invalid == OnInvalid::kError && !defects_.empty())) {
    throw DataError(defects_);
  }
  if (!options_.subset.empty()) {
    std::vector<ImageAnnotation> kept;
    for (const int64_t i : options_.subset) {
      if (i < 0 || i >= static_cast<int64_t>(images_.size())) {
        throw DataError({Defect{DefectKind::kUnreadableFile, scan.annotation_path, "", "", 0,
                                scan.annotation_path + ": subset index " + std::to_string(i) +
                                    " is outside the dataset's " + std::to_string(images_.size()) +
                                    " images"}});
      }
      kept.push_back(images_[static_cast<size_t>(i)]);
    }
    images_ = std::move(kept);
  }
  if (images_.empty()) {
    throw DataError({Defect{DefectKind::kUnreadableFile, scan.annotation_path, "", "", 0,
                            scan.annotation_path + ": expected at least one usable image, found none"}});
  }
}

Sample Dataset::get(int64_t index, int64_t epoch) const {
  TORCH_CHECK(index >= 0 && index < size(), "Expected a sample index in [0, ", size(),
              "), but got ", index);
  const auto& ann = images_[static_cast<size_t>(index)];
  AnnotatedImage in;
  if (!render_index_.empty()) {
    RenderOptions render;
    render.width = render.height = static_cast<int>(options_.size);
    in = render_synthetic_text(options_.seed, render_index_[static_cast<size_t>(index)], render);
  } else {
    const std::string path = image_path(options_.root, ann.file);
    DecodeFailure failure;
    in.image = decode_image(path, options_.apply_exif, &failure);
    if (in.image.empty()) {
      throw DataError({Defect{DefectKind::kUnreadableImage, path, ann.file, "", 0,
                              path + ": cannot decode the image (sample " + std::to_string(index) +
                                  "): expected " + failure.expected + ", got " + failure.got}});
    }
    for (const auto& word : ann.words) in.texts.push_back(TextInstance{word.points, word.ignore});
  }
  const int s = static_cast<int>(options_.size);
  double scale = 1.0;
  AnnotatedImage prepared;
  if (options_.augment) {
    AugmentOptions aug = options_.augmentation;
    aug.size = s;
    SampleRng rng(options_.seed, epoch, index);
    prepared = augment(in, aug, rng);
  } else {
    prepared = letterbox(in, s, &scale);
  }
  cv::Mat rgb;
  cv::cvtColor(prepared.image, rgb, cv::COLOR_BGR2RGB);
  cv::Mat canvas;
  rgb.convertTo(canvas, CV_32FC3, 1.0 / 255.0);
  cv::Mat channels[3];
  cv::split(canvas, channels);
  for (int c = 0; c < 3; ++c) channels[c] = (channels[c] - kMean[c]) / kStd[c];
  cv::merge(channels, 3, canvas);

  Sample sample;
  sample.id = ann.file;
  sample.image = canvas;
  sample.maps = make_label_maps(prepared.texts, s, s, options_.labels);
  sample.scale = scale;
  sample.word_boxes = trainable_word_boxes(prepared.texts, s, s, options_.labels.min_text_size);
  return sample;
}

Batch Dataset::collate(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<torch::Tensor> images, shrink, shrink_mask, thresh, thresh_mask;
  std::vector<std::vector<std::array<float, 4>>> boxes;
  Batch b;
  for (const int64_t i : indices) {
    const Sample s = get(i, epoch);
    boxes.push_back(s.word_boxes);
    images.push_back(mat_to_tensor(s.image));
    shrink.push_back(mat_to_tensor(s.maps.gt_shrink));
    shrink_mask.push_back(mat_to_tensor(s.maps.gt_shrink_mask));
    thresh.push_back(mat_to_tensor(s.maps.gt_thresh));
    thresh_mask.push_back(mat_to_tensor(s.maps.gt_thresh_mask));
    b.sample_ids.push_back(s.id);
    b.words.push_back(static_cast<int64_t>(s.word_boxes.size()));
  }
  size_t most = 1;
  for (const auto& v : boxes) most = std::max(most, v.size());
  std::vector<float> flat;  // padded with empty boxes (x0 > x1)
  for (const auto& v : boxes) {
    for (size_t j = 0; j < most; ++j) {
      const std::array<float, 4> box = j < v.size() ? v[j] : std::array<float, 4>{1.0f, -1.0f, -1.0f, -1.0f};
      flat.insert(flat.end(), box.begin(), box.end());
    }
  }
  b.word_boxes = torch::tensor(flat).view({static_cast<int64_t>(boxes.size()), static_cast<int64_t>(most), 4});
  b.image = torch::stack(images);
  b.targets.gt_shrink = torch::stack(shrink);
  b.targets.gt_shrink_mask = torch::stack(shrink_mask);
  b.targets.gt_thresh = torch::stack(thresh);
  b.targets.gt_thresh_mask = torch::stack(thresh_mask);
  return b;
}

}  // namespace dbh::model

namespace dbh::model {

std::string validate_batch(const Batch& b) {
  auto name = [&](int64_t i) {
    return i < static_cast<int64_t>(b.sample_ids.size()) ? b.sample_ids[static_cast<size_t>(i)]
                                                         : "sample " + std::to_string(i);
  };
  float lo = 0, hi = 0;
  for (int c = 0; c < 3; ++c) {
    lo = std::min(lo, (0.0f - kMean[c]) / kStd[c]);
    hi = std::max(hi, (1.0f - kMean[c]) / kStd[c]);
  }
  struct Check {
    const char* what;
    torch::Tensor bad;  // [N] bool
  };
  auto per_sample = [](const torch::Tensor& t) { return t.flatten(1).any(1); };
  const auto& t = b.targets;
  const std::vector<Check> checks = {
      {"image has a non-finite value", per_sample(~torch::isfinite(b.image))},
      {"image outside the normalised range of [0, 1] pixels",
       per_sample((b.image < lo - 1e-3).logical_or(b.image > hi + 1e-3))},
      {"gt_shrink not binary", per_sample((t.gt_shrink != 0).logical_and(t.gt_shrink != 1))},
      {"gt_shrink_mask not binary",
       per_sample((t.gt_shrink_mask != 0).logical_and(t.gt_shrink_mask != 1))},
      {"gt_thresh_mask not binary",
       per_sample((t.gt_thresh_mask != 0).logical_and(t.gt_thresh_mask != 1))},
      {"gt_thresh non-finite or outside [0, 1]",
       per_sample((~torch::isfinite(t.gt_thresh)).logical_or(t.gt_thresh < 0).logical_or(t.gt_thresh > 1))},
  };
  for (const auto& c : checks) {
    const auto idx = c.bad.nonzero();
    if (idx.numel() > 0) return name(idx[0][0].item<int64_t>()) + ": " + c.what;
  }
  return {};
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  TORCH_CHECK(options_.batch_size > 0, "Expected batch_size > 0, but got ", options_.batch_size);
  TORCH_CHECK(options_.num_workers >= 0, "Expected num_workers >= 0, but got ",
              options_.num_workers);
  TORCH_CHECK(options_.prefetch >= 1, "Expected prefetch >= 1, but got ", options_.prefetch);
  for (int64_t i = 0; i < options_.num_workers; ++i) {
    workers_.emplace_back([this] { worker_loop(); });
  }
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

Batch Loader::produce(int64_t micro) const {
  const int64_t n = dataset_->size();
  const auto indices = batch_indices(n, options_.batch_size, options_.seed, micro);
  const int64_t epoch = (micro * options_.batch_size) / n;
  Batch b = dataset_->collate(indices, epoch);
  if (options_.validate) {
    const auto problem = validate_batch(b);
    if (!problem.empty()) {
      throw DataError({Defect{DefectKind::kInvalidBatch, dataset_->options().root, "", "", 0,
                              "batch " + std::to_string(micro) + ": " + problem}});
    }
  }
  return b;
}

void Loader::worker_loop() {
  for (;;) {
    int64_t micro = 0;
    std::shared_ptr<std::promise<Batch>> promise;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      micro = queue_.front();
      queue_.erase(queue_.begin());
      const auto it = pending_.find(micro);
      if (it == pending_.end()) continue;  // dropped: older than the consumer
      promise = it->second;
    }
    try {
      promise->set_value(produce(micro));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }
}

Batch Loader::get(int64_t micro) {
  if (workers_.empty()) return produce(micro);
  std::shared_future<Batch> result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (next_to_schedule_ <= micro) next_to_schedule_ = micro;
    // Keep `prefetch` batches ahead of the one being consumed.
    while (next_to_schedule_ <= micro + options_.prefetch) {
      const int64_t m = next_to_schedule_++;
      if (ready_.count(m)) continue;
      auto promise = std::make_shared<std::promise<Batch>>();
      pending_[m] = promise;
      ready_[m] = promise->get_future().share();
      queue_.push_back(m);
    }
    if (!ready_.count(micro)) {
      auto promise = std::make_shared<std::promise<Batch>>();
      pending_[micro] = promise;
      ready_[micro] = promise->get_future().share();
      queue_.insert(queue_.begin(), micro);
    }
    result = ready_.at(micro);
  }
  cv_.notify_all();
  Batch b = result.get();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.erase(micro);
    pending_.erase(micro);
    // Anything older than `micro` will not be asked for again.
    for (auto it = ready_.begin(); it != ready_.end() && it->first < micro;) {
      pending_.erase(it->first);
      it = ready_.erase(it);
    }
  }
  return b;
}

}  // namespace dbh::model

#include "model/data/batch.h"

#include <algorithm>

namespace dbh::model {

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  Batch out;
  out.image = image.to(device, non_blocking);
  out.targets.gt_shrink = targets.gt_shrink.to(device, non_blocking);
  out.targets.gt_shrink_mask = targets.gt_shrink_mask.to(device, non_blocking);
  out.targets.gt_thresh = targets.gt_thresh.to(device, non_blocking);
  out.targets.gt_thresh_mask = targets.gt_thresh_mask.to(device, non_blocking);
  out.sample_ids = sample_ids;
  out.words = words;
  if (word_boxes.defined()) out.word_boxes = word_boxes.to(device, non_blocking);
  return out;
}

Batch Batch::clone() const {
  Batch out = *this;
  out.image = image.clone();
  out.targets = {targets.gt_shrink.clone(), targets.gt_shrink_mask.clone(), targets.gt_thresh.clone(),
                 targets.gt_thresh_mask.clone()};
  if (word_boxes.defined()) out.word_boxes = word_boxes.clone();
  return out;
}

namespace {
std::vector<std::string> synthetic_ids(const char* kind, uint64_t seed,
                                       int64_t n) {
  std::vector<std::string> ids;
  for (int64_t i = 0; i < n; ++i) {
    ids.push_back(std::string(kind) + ":" + std::to_string(seed) + ":" +
                  std::to_string(i));
  }
  return ids;
}
}  // namespace

Batch synthetic_random_batch(int64_t n, int64_t h, int64_t w, uint64_t seed) {
  TORCH_CHECK(n > 0 && h > 0 && w > 0, "Expected a positive batch shape, but got ",
              n, "x", h, "x", w);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  Batch b;
  b.image = at::randn({n, 3, h, w}, gen, opts);
  b.targets.gt_shrink = (at::rand({n, 1, h, w}, gen, opts) > 0.7).to(torch::kFloat32);
  b.targets.gt_shrink_mask = torch::ones({n, 1, h, w}, opts);
  b.targets.gt_thresh = 0.3 + 0.4 * at::rand({n, 1, h, w}, gen, opts);
  b.targets.gt_thresh_mask = (at::rand({n, 1, h, w}, gen, opts) > 0.5).to(torch::kFloat32);
  b.sample_ids = synthetic_ids("synthetic_random", seed, n);
  return b;
}

Batch synthetic_boxes_batch(int64_t n, int64_t h, int64_t w, uint64_t seed) {
  TORCH_CHECK(n > 0 && h >= 32 && w >= 32,
              "Expected batch > 0 and sides >= 32, but got ", n, "x", h, "x", w);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  Batch b;
  b.image = 0.2 * at::randn({n, 3, h, w}, gen, opts) - 1.0;
  b.targets.gt_shrink = torch::zeros({n, 1, h, w}, opts);
  b.targets.gt_shrink_mask = torch::ones({n, 1, h, w}, opts);
  auto canvas = torch::zeros({n, 1, h, w}, opts);
  b.targets.gt_thresh_mask = torch::zeros({n, 1, h, w}, opts);
  // Pixel grid for distance computations.
  const auto ys = torch::arange(h, opts).view({h, 1}).expand({h, w});
  const auto xs = torch::arange(w, opts).view({1, w}).expand({h, w});
  auto draw = [&](int64_t lo, int64_t hi) {
    return lo + at::randint(hi - lo + 1, {1}, gen).item<int64_t>();
  };
  std::vector<float> boxes_flat;  // at most 3 boxes per sample, padded with empty ones (x0 > x1)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t boxes = draw(1, 3);
    b.words.push_back(boxes);  // every box gets a kernel in gt_shrink
    for (int64_t k = 0; k < boxes; ++k) {
      const int64_t bw = draw(w / 4, w / 2), bh = draw(h / 8, h / 4);
      const int64_t x0 = draw(0, w - bw - 1), y0 = draw(0, h - bh - 1);
      const int64_t x1 = x0 + bw, y1 = y0 + bh;
      boxes_flat.insert(boxes_flat.end(), {static_cast<float>(x0), static_cast<float>(y0), static_cast<float>(x1),
                                           static_cast<float>(y1)});
      b.image[i].slice(1, y0, y1).slice(2, x0, x1).add_(2.0);
      // D = A(1 − r²)/L with r = 0.4 (spec §4.1).
      const double d = static_cast<double>(bw * bh) * (1 - 0.16) /
                       static_cast<double>(2 * (bw + bh));
      const int64_t di = std::max<int64_t>(1, static_cast<int64_t>(d));
      b.targets.gt_shrink[i][0]
          .slice(0, std::min(y0 + di, y1 - 1), std::max(y1 - di, y0 + di + 1))
          .slice(1, std::min(x0 + di, x1 - 1), std::max(x1 - di, x0 + di + 1))
          .fill_(1.0);
      b.targets.gt_thresh_mask[i][0]
          .slice(0, std::max<int64_t>(0, y0 - di), std::min(h, y1 + di))
          .slice(1, std::max<int64_t>(0, x0 - di), std::min(w, x1 + di))
          .fill_(1.0);
      // Distance to the rectangle's border, normalised by D, clipped to 1.
      const auto dx = torch::minimum((xs - x0).abs(), (xs - x1).abs());
      const auto dy = torch::minimum((ys - y0).abs(), (ys - y1).abs());
      const auto inside_x = (xs >= x0).logical_and(xs <= x1);
      const auto inside_y = (ys >= y0).logical_and(ys <= y1);
      auto dist = torch::where(inside_x.logical_and(inside_y),
                               torch::minimum(dx, dy),
                               torch::where(inside_x, dy,
                                            torch::where(inside_y, dx,
                                                         torch::sqrt(dx * dx + dy * dy))));
      auto value = 1.0 - torch::clamp(dist / d, 0.0, 1.0);
      canvas[i][0] = torch::maximum(canvas[i][0], value);
    }
    for (int64_t k = boxes; k < 3; ++k) boxes_flat.insert(boxes_flat.end(), {1.0f, -1.0f, -1.0f, -1.0f});
  }
  b.word_boxes = torch::tensor(boxes_flat).view({n, 3, 4});
  b.targets.gt_thresh = canvas * 0.4 + 0.3;
  b.sample_ids = synthetic_ids("synthetic_boxes", seed, n);
  return b;
}

}  // namespace dbh::model

#include "model/eval/infer.h"

#include <numeric>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <opencv2/imgproc.hpp>

#include "model/data/image_decode.h"
#include "model/data/scan.h"
#include "model/train/determinism.h"

namespace dbh::model {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// HxWxC float32 → [C, H, W], owning its memory.
torch::Tensor mat_to_tensor(const cv::Mat& m) {
  TORCH_INTERNAL_ASSERT(m.isContinuous() && m.depth() == CV_32F);
  auto t = torch::from_blob(const_cast<float*>(m.ptr<float>()),
                            {m.rows, m.cols, m.channels()}, torch::kFloat32);
  return t.permute({2, 0, 1}).clone();
}

std::string sizes_string(torch::IntArrayRef sizes) {
  std::ostringstream s;
  s << sizes;
  return s.str();
}

// Restores a module's training flag when it goes out of scope, so a caller
// that evaluates between training steps keeps training in training mode.
class TrainingModeGuard {
 public:
  explicit TrainingModeGuard(torch::nn::Module& module)
      : module_(module), was_training_(module.is_training()) {}
  ~TrainingModeGuard() { module_.train(was_training_); }
  TrainingModeGuard(const TrainingModeGuard&) = delete;
  TrainingModeGuard& operator=(const TrainingModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

// Every tensor of an archive under its dotted name; nested archives (what
// Module::save writes per submodule) are walked recursively.
void flatten_archive(torch::serialize::InputArchive& archive,
                     const std::string& prefix,
                     std::map<std::string, torch::Tensor>& out) {
  for (const std::string& key : archive.keys()) {
    torch::Tensor tensor;
    if (archive.try_read(key, tensor)) {
      out.emplace(prefix + key, tensor);
      continue;
    }
    torch::serialize::InputArchive child;
    if (archive.try_read(key, child)) flatten_archive(child, prefix + key + ".", out);
  }
}

std::vector<Polygon> polygons_of(const std::vector<Detection>& detections) {
  std::vector<Polygon> out;
  out.reserve(detections.size());
  for (const Detection& d : detections) out.push_back(d.polygon);
  return out;
}

}  // namespace

TestResize test_time_resize(int64_t width, int64_t height, int64_t size,
                            ResizeSide side) {
  TORCH_CHECK(width > 0 && height > 0,
              "Expected a positive image size, but got ", width, "x", height);
  TORCH_CHECK(size > 0 && size % 32 == 0,
              "Expected a test-time size that is a positive multiple of 32, but got ",
              size);
  TestResize r;
  r.width = width;
  r.height = height;
  const int64_t reference =
      side == ResizeSide::kShort ? std::min(width, height) : std::max(width, height);
  r.scale = static_cast<double>(size) / static_cast<double>(reference);
  auto resized = [&](int64_t v) {
    return std::max<int64_t>(1, std::llround(static_cast<double>(v) * r.scale));
  };
  auto padded = [](int64_t v) { return (v + 31) / 32 * 32; };
  r.resized_width = resized(width);
  r.resized_height = resized(height);
  r.input_width = padded(r.resized_width);
  r.input_height = padded(r.resized_height);
  return r;
}

torch::Tensor preprocess_image(const cv::Mat& bgr8, const TestResize& resize) {
  TORCH_CHECK(bgr8.depth() == CV_8U && (bgr8.channels() == 3 || bgr8.channels() == 1),
              "Expected a BGR CV_8UC3 or CV_8UC1 image, but got type ", bgr8.type());
  TORCH_CHECK(bgr8.cols == resize.width && bgr8.rows == resize.height,
              "Expected an image of ", resize.width, "x", resize.height,
              " (the size the resize was computed for), but got ", bgr8.cols, "x",
              bgr8.rows);
  cv::Mat color;
  if (bgr8.channels() == 1) {
    cv::cvtColor(bgr8, color, cv::COLOR_GRAY2BGR);
  } else {
    color = bgr8;
  }
  const int rw = static_cast<int>(resize.resized_width);
  const int rh = static_cast<int>(resize.resized_height);
  cv::Mat canvas = cv::Mat::zeros(static_cast<int>(resize.input_height),
                                  static_cast<int>(resize.input_width), CV_8UC3);
  cv::Mat resized;
  cv::resize(color, resized, cv::Size(rw, rh), 0, 0,
             resize.scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  resized.copyTo(canvas(cv::Rect(0, 0, rw, rh)));
  // The training normalisation, operation for operation (Dataset::get), so
  // the network sees bit-identical pixels for the same resized image.
  cv::Mat rgb;
  cv::cvtColor(canvas, rgb, cv::COLOR_BGR2RGB);
  cv::Mat normalised;
  rgb.convertTo(normalised, CV_32FC3, 1.0 / 255.0);
  cv::Mat channels[3];
  cv::split(normalised, channels);
  for (int c = 0; c < 3; ++c) channels[c] = (channels[c] - kMean[c]) / kStd[c];
  cv::merge(channels, 3, normalised);
  return mat_to_tensor(normalised);
}

torch::Tensor predict_probability(DbNet& model, const torch::Tensor& images,
                                  const torch::Device& device, bool channels_last) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3,
              "Expected images of shape [N, 3, H, W], but got ", images.sizes());
  TORCH_CHECK(images.scalar_type() == torch::kFloat32,
              "Expected float32 images, but got ", images.scalar_type());
  TORCH_CHECK(images.size(2) % 32 == 0 && images.size(3) % 32 == 0,
              "Expected image height and width that are multiples of 32, but got ",
              images.sizes());
  TrainingModeGuard restore(*model);
  model->eval();
  torch::InferenceMode inference;
  torch::Tensor x = images.to(device);
  if (channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  const DbNetOutput out = model->forward(x);
  TORCH_INTERNAL_ASSERT(out.probability.defined());
  return out.probability.to(torch::kCPU).contiguous();
}

namespace {

// The content region of a probability map at network input resolution:
// [resized_height, resized_width] float32, contiguous, on the CPU.
torch::Tensor probability_content(const torch::Tensor& prob, const TestResize& resize) {
  torch::Tensor p = prob;
  if (p.dim() == 3) {
    TORCH_CHECK(p.size(0) == 1, "Expected a probability map of shape [1, H, W], but got ",
                p.sizes());
    p = p[0];
  }
  TORCH_CHECK(p.dim() == 2 && p.size(0) == resize.input_height &&
                  p.size(1) == resize.input_width,
              "Expected a probability map of shape [", resize.input_height, ", ",
              resize.input_width, "], but got ", prob.sizes());
  TORCH_CHECK(p.scalar_type() == torch::kFloat32 && p.device().is_cpu(),
              "Expected a float32 probability map on the CPU, but got ",
              p.scalar_type(), " on ", p.device());
  return p.slice(0, 0, resize.resized_height).slice(1, 0, resize.resized_width).contiguous();
}

}  // namespace

std::vector<Detection> detections_from_probability(const torch::Tensor& prob,
                                                   const TestResize& resize,
                                                   const PostprocessOptions& options) {
  const torch::Tensor content = probability_content(prob, resize);
  const cv::Mat map(static_cast<int>(content.size(0)), static_cast<int>(content.size(1)),
                    CV_32FC1, content.data_ptr<float>());
  return boxes_from_prob_map(map, resize.scale, static_cast<int>(resize.width),
                             static_cast<int>(resize.height), options);
}

ProbabilityStats probability_stats(const torch::Tensor& prob, const TestResize& resize,
                                   double binarize_thresh) {
  const torch::Tensor content = probability_content(prob, resize).to(torch::kFloat64);
  ProbabilityStats s;
  s.mean = content.mean().item<double>();
  s.max = content.max().item<double>();
  s.text_fraction = (content > binarize_thresh).to(torch::kFloat64).mean().item<double>();
  return s;
}

ImageMatch match_image_detailed(const std::vector<Polygon>& gt,
                                const std::vector<bool>& gt_ignore,
                                const std::vector<Polygon>& det, double iou_thresh) {
  if (gt_ignore.size() != gt.size()) {
    throw std::invalid_argument(
        "match_image_detailed: expected one gt_ignore flag per ground truth (" +
        std::to_string(gt.size()) + "), got " + std::to_string(gt_ignore.size()));
  }
  ImageMatch m;
  m.gt_status.assign(gt.size(), MatchStatus::kInvalid);
  m.gt_match.assign(gt.size(), -1);
  m.det_status.assign(det.size(), MatchStatus::kInvalid);
  m.det_match.assign(det.size(), -1);
  std::vector<Polygon> dont_care_gt;
  for (size_t g = 0; g < gt.size(); ++g) {
    if (!is_valid_polygon(gt[g])) continue;
    if (gt_ignore[g]) {
      m.gt_status[g] = MatchStatus::kDontCare;
      dont_care_gt.push_back(gt[g]);
    } else {
      m.gt_status[g] = MatchStatus::kUnmatched;
      ++m.counts.gt;
    }
  }
  // A detection is don't-care exactly when match_image, given only the valid
  // don't-care ground truths, drops it: the same area computation decides.
  const std::vector<bool> all_ignored(dont_care_gt.size(), true);
  for (size_t d = 0; d < det.size(); ++d) {
    if (!is_valid_polygon(det[d])) continue;
    const bool dont_care =
        !dont_care_gt.empty() && match_image(dont_care_gt, all_ignored, {det[d]}).det == 0;
    m.det_status[d] = dont_care ? MatchStatus::kDontCare : MatchStatus::kUnmatched;
    if (!dont_care) ++m.counts.det;
  }
  // Greedy one-to-one, GT-major then detection order (spec §8.1).
  for (size_t g = 0; g < gt.size(); ++g) {
    if (m.gt_status[g] != MatchStatus::kUnmatched) continue;
    for (size_t d = 0; d < det.size(); ++d) {
      if (m.det_status[d] != MatchStatus::kUnmatched) continue;
      if (polygon_iou(gt[g], det[d]) > iou_thresh) {
        m.gt_status[g] = m.det_status[d] = MatchStatus::kMatched;
        m.gt_match[g] = static_cast<int64_t>(d);
        m.det_match[d] = static_cast<int64_t>(g);
        ++m.counts.matched;
        break;
      }
    }
  }
  return m;
}

EvalResult image_metrics(const EvalCounts& counts) {
  EvalResult r;
  r.counts = counts;
  if (counts.gt == 0) {
    r.recall = 1.0;
    r.precision = counts.det == 0 ? 1.0 : 0.0;
  } else {
    r.recall = static_cast<double>(counts.matched) / static_cast<double>(counts.gt);
    r.precision = counts.det == 0 ? 0.0
                                  : static_cast<double>(counts.matched) /
                                        static_cast<double>(counts.det);
  }
  const double sum = r.precision + r.recall;
  r.hmean = sum > 0.0 ? 2.0 * r.precision * r.recall / sum : 0.0;
  return r;
}

DatasetEvaluation evaluate(DbNet& model, const std::string& root,
                           const std::vector<ImageAnnotation>& images,
                           const InferenceOptions& options,
                           const EvaluationProgress& progress) {
  TORCH_CHECK(options.batch_size() > 0, "Expected a positive batch size, but got ",
              options.batch_size());
  TORCH_CHECK(options.size() > 0 && options.size() % 32 == 0,
              "Expected a test-time size that is a positive multiple of 32, but got ",
              options.size());
  const torch::Device device = parse_device(options.device());
  const auto n = static_cast<int64_t>(images.size());

  auto decode = [&](const ImageAnnotation& ann) {
    const std::string path = image_path(root, ann.file);
    DecodeFailure failure;
    cv::Mat image = decode_image(path, options.apply_exif(), &failure);
    if (image.empty()) {
      throw DataError({Defect{DefectKind::kUnreadableImage, path, ann.file, "", 0,
                              path + ": cannot decode the image: expected " +
                                  failure.expected + ", got " + failure.got}});
    }
    return image;
  };

  // Input sizes first (from the annotations; decoded when unknown), so that
  // images of one input size can share a batch.
  std::vector<TestResize> resizes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const ImageAnnotation& ann = images[static_cast<size_t>(i)];
    int64_t w = ann.width, h = ann.height;
    if (w <= 0 || h <= 0) {
      const cv::Mat image = decode(ann);
      w = image.cols;
      h = image.rows;
    }
    resizes[static_cast<size_t>(i)] = test_time_resize(w, h, options.size(), options.side());
  }
  std::vector<std::vector<int64_t>> batches;
  {
    std::vector<std::vector<int64_t>> groups;  // in order of first appearance
    std::map<std::pair<int64_t, int64_t>, size_t> group_of;
    for (int64_t i = 0; i < n; ++i) {
      const TestResize& r = resizes[static_cast<size_t>(i)];
      const auto key = std::make_pair(r.input_height, r.input_width);
      const auto found = group_of.find(key);
      if (found == group_of.end()) {
        group_of.emplace(key, groups.size());
        groups.push_back({i});
      } else {
        groups[found->second].push_back(i);
      }
    }
    for (const auto& group : groups) {
      for (size_t k = 0; k < group.size(); k += static_cast<size_t>(options.batch_size())) {
        const size_t end = std::min(group.size(), k + static_cast<size_t>(options.batch_size()));
        batches.emplace_back(group.begin() + static_cast<std::ptrdiff_t>(k),
                             group.begin() + static_cast<std::ptrdiff_t>(end));
      }
    }
  }

  DatasetEvaluation result;
  result.images.resize(static_cast<size_t>(n));
  int64_t done = 0;
  for (const auto& batch : batches) {
    auto t0 = Clock::now();
    std::vector<torch::Tensor> inputs;
    for (const int64_t i : batch) {
      const ImageAnnotation& ann = images[static_cast<size_t>(i)];
      const TestResize& r = resizes[static_cast<size_t>(i)];
      const cv::Mat image = decode(ann);
      if (image.cols != r.width || image.rows != r.height) {
        const std::string path = image_path(root, ann.file);
        throw DataError({Defect{DefectKind::kImageSizeMismatch, path, ann.file, "", 0,
                                path + ": expected an image of " + std::to_string(r.width) +
                                    "x" + std::to_string(r.height) +
                                    " as annotated, got " + std::to_string(image.cols) + "x" +
                                    std::to_string(image.rows)}});
      }
      inputs.push_back(preprocess_image(image, r));
    }
    result.timing.preprocess_s += seconds_since(t0);
    t0 = Clock::now();
    const torch::Tensor prob = predict_probability(model, torch::stack(inputs), device,
                                                   options.channels_last());
    result.timing.inference_s += seconds_since(t0);
    ++result.timing.batches;
    for (size_t k = 0; k < batch.size(); ++k) {
      const auto i = static_cast<size_t>(batch[k]);
      ImageEvaluation& e = result.images[i];
      e.file = images[i].file;
      e.resize = resizes[i];
      e.probability = probability_stats(prob[static_cast<int64_t>(k)], e.resize,
                                        options.postprocess().binarize_thresh);
      for (const WordAnnotation& word : images[i].words) {
        e.gt.push_back(word.points);
        e.gt_ignore.push_back(word.ignore);
      }
      t0 = Clock::now();
      e.detections = detections_from_probability(prob[static_cast<int64_t>(k)], e.resize,
                                                 options.postprocess());
      result.timing.postprocess_s += seconds_since(t0);
      t0 = Clock::now();
      e.match = match_image_detailed(e.gt, e.gt_ignore, polygons_of(e.detections),
                                     options.iou_thresh());
      result.timing.matching_s += seconds_since(t0);
      e.metrics = image_metrics(e.match.counts);
      ++done;
      if (progress) progress(e, done, n);
    }
  }
  std::vector<EvalCounts> counts;
  counts.reserve(result.images.size());
  for (const ImageEvaluation& e : result.images) counts.push_back(e.match.counts);
  result.overall = summarize(counts);
  return result;
}

double evaluator_self_check(const std::vector<ImageAnnotation>& images) {
  std::vector<EvalCounts> counts;
  counts.reserve(images.size());
  for (const ImageAnnotation& image : images) {
    std::vector<Polygon> gt;
    std::vector<bool> ignore;
    for (const WordAnnotation& word : image.words) {
      gt.push_back(word.points);
      ignore.push_back(word.ignore);
    }
    counts.push_back(match_image(gt, ignore, gt));
  }
  return summarize(counts).hmean;
}

double evaluator_self_check(const Dataset& dataset) {
  return evaluator_self_check(dataset.images());
}

ModelStateReport load_model_state(DbNet& model, const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path, torch::Device(torch::kCPU));
  ModelStateReport report;
  std::map<std::string, torch::Tensor> entries;
  torch::serialize::InputArchive model_archive;
  if (archive.try_read("model", model_archive)) {
    report.format = "checkpoint";
    flatten_archive(model_archive, "", entries);
    torch::Tensor step;
    if (archive.try_read("step", step) && step.numel() == 1) {
      report.step = step.item<int64_t>();
    }
  } else {
    report.format = "weights";
    flatten_archive(archive, "", entries);
  }
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, torch::Tensor& target) {
    const auto found = entries.find(name);
    if (found == entries.end()) {
      report.missing.push_back(name);
      return;
    }
    used.insert(name);
    if (found->second.sizes() != target.sizes()) {
      report.mismatched.push_back(name + ": model " + sizes_string(target.sizes()) +
                                  ", file " + sizes_string(found->second.sizes()));
      return;
    }
    target.copy_(found->second);
    ++report.loaded;
  };
  for (auto& p : model->named_parameters(/*recurse=*/true)) load(p.key(), p.value());
  for (auto& b : model->named_buffers(/*recurse=*/true)) load(b.key(), b.value());
  std::set<std::string> modules;
  for (const auto& child : model->named_children()) modules.insert(child.key());
  for (const auto& entry : entries) {
    if (used.count(entry.first) > 0) continue;
    report.unexpected.push_back(entry.first);
    if (modules.count(entry.first.substr(0, entry.first.find('.'))) > 0) report.unexpected_model.push_back(entry.first);
  }
  return report;
}

std::vector<size_t> worst_images(const DatasetEvaluation& result, size_t k) {
  const auto errors = [](const ImageEvaluation& e) {
    return (e.match.counts.gt - e.match.counts.matched) + (e.match.counts.det - e.match.counts.matched);
  };
  std::vector<size_t> order(result.images.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& ea = result.images[a];
    const auto& eb = result.images[b];
    if (ea.metrics.hmean != eb.metrics.hmean) return ea.metrics.hmean < eb.metrics.hmean;
    return errors(ea) > errors(eb);
  });
  order.resize(std::min(order.size(), k));
  return order;
}

}  // namespace dbh::model

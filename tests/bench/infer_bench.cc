// Test-time inference (forward pass in evaluation mode) at the ICDAR 2015
// test size, and post-processing plus matching per image.
// Results: tests/bench/results/. Run: ./dev bench [--benchmark_filter=...].
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "model/data/scan.h"
#include "model/eval/infer.h"
#include "model/label/label_maps.h"
#include "model/train/determinism.h"
#include "tests/support/paths.h"

namespace dbh::model {
namespace {

// Args: {batch, channels_last}. ResNet-18 + FPN on 1280×720 images resized
// to short side 736 (input 736×1312), all cores.
void BM_Inference(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool channels_last = state.range(1) != 0;
  const auto threads = static_cast<int64_t>(std::thread::hardware_concurrency());
  apply_determinism(DeterminismOptions().seed(0).threads(threads));
  DbNet net(DbNetOptions().encoder(ResNetOptions().depth(18)));
  if (channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  const TestResize r = test_time_resize(1280, 720, 736, ResizeSide::kShort);
  const torch::Tensor images = torch::randn({batch, 3, r.input_height, r.input_width});
  predict_probability(net, images, torch::kCPU, channels_last);  // warm-up: oneDNN primitives
  for (auto _ : state) {
    const torch::Tensor prob = predict_probability(net, images, torch::kCPU, channels_last);
    benchmark::DoNotOptimize(prob.data_ptr<float>());
  }
  state.counters["images/s"] = benchmark::Counter(
      static_cast<double>(batch * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["threads"] = static_cast<double>(threads);
}
BENCHMARK(BM_Inference)
    ->ArgNames({"batch", "channels_last"})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({4, 1})
    ->Args({1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A probability map as a trained model gives it for a fixture image at
// short side 736: the shrunk kernels of its words, blurred to soft edges.
struct PostprocessCase {
  TestResize resize;
  torch::Tensor prob;  // [input_height, input_width]
  std::vector<Polygon> gt;
  std::vector<bool> ignore;
};

PostprocessCase make_case(int64_t index) {
  const ScanResult scan =
      scan_dataset(std::string(DBH_SOURCE_DIR) + "/fixtures/real", OnInvalid::kError);
  const ImageAnnotation& ann = scan.images.at(static_cast<size_t>(index));
  PostprocessCase c;
  c.resize = test_time_resize(ann.width, ann.height, 736, ResizeSide::kShort);
  std::vector<TextInstance> texts;
  for (const auto& w : ann.words) {
    Polygon scaled = w.points;
    for (auto& p : scaled) p = {p.x * c.resize.scale, p.y * c.resize.scale};
    texts.push_back(TextInstance{scaled, w.ignore});
    c.gt.push_back(w.points);
    c.ignore.push_back(w.ignore);
  }
  const LabelMaps maps = make_label_maps(texts, static_cast<int>(c.resize.input_height),
                                         static_cast<int>(c.resize.input_width));
  cv::Mat soft;
  cv::GaussianBlur(maps.gt_shrink, soft, cv::Size(5, 5), 1.5);
  c.prob = torch::from_blob(soft.data, {soft.rows, soft.cols}, torch::kFloat32).clone();
  return c;
}

// Arg: fixture index (0: img_001, 166 words; 4: img_005, 134 words).
void BM_Postprocess(benchmark::State& state) {
  const PostprocessCase c = make_case(state.range(0));
  int64_t boxes = 0;
  for (auto _ : state) {
    const auto dets = detections_from_probability(c.prob, c.resize);
    boxes = static_cast<int64_t>(dets.size());
    benchmark::DoNotOptimize(dets.data());
  }
  state.counters["boxes"] = static_cast<double>(boxes);
}
BENCHMARK(BM_Postprocess)->ArgName("fixture")->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);

void BM_Matching(benchmark::State& state) {
  const PostprocessCase c = make_case(state.range(0));
  std::vector<Polygon> det;
  for (const auto& d : detections_from_probability(c.prob, c.resize)) det.push_back(d.polygon);
  int64_t matched = 0;
  for (auto _ : state) {
    const ImageMatch m = match_image_detailed(c.gt, c.ignore, det);
    matched = m.counts.matched;
    benchmark::DoNotOptimize(m.counts.matched);
  }
  state.counters["gt"] = static_cast<double>(c.gt.size());
  state.counters["det"] = static_cast<double>(det.size());
  state.counters["matched"] = static_cast<double>(matched);
}
BENCHMARK(BM_Matching)->ArgName("fixture")->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dbh::model

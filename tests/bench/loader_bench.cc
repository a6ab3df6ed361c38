// The real data path: decode → DB augmentation → normalise → label maps →
// collate, through Loader at 640², and label-map generation on its own.
// Results: tests/bench/results/. Run: ./dev bench [--benchmark_filter=...].
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "model/data/dataset.h"
#include "model/data/synthetic_render.h"
#include "model/label/label_maps.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;

// Real fixtures when present (relative to the working directory, i.e. the
// repository root under ./dev bench), else a generated one.
constexpr char kRealFixtures[] = "fixtures/real";
// Generated dataset: ICDAR 2015-sized images (1280×720), as PNG.
constexpr int kGeneratedImages = 16;
constexpr int kGeneratedWidth = 1280;
constexpr int kGeneratedHeight = 720;

// A UFO dataset of render_synthetic_text samples in a temporary folder,
// removed at exit.
class GeneratedDataset {
 public:
  GeneratedDataset()
      : root_(fs::temp_directory_path() /
              ("dbh_loader_bench_" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "images");
    RenderOptions render;
    render.width = kGeneratedWidth;
    render.height = kGeneratedHeight;
    std::ostringstream json;
    json << std::setprecision(17) << "{\"images\": {";
    for (int i = 0; i < kGeneratedImages; ++i) {
      const AnnotatedImage sample = render_synthetic_text(/*seed=*/0, i, render);
      char name[32];
      std::snprintf(name, sizeof(name), "synth_%03d.png", i);
      cv::imwrite((root_ / "images" / name).string(), sample.image);
      json << (i ? ", " : "") << "\"" << name << "\": {\"img_w\": " << sample.image.cols
           << ", \"img_h\": " << sample.image.rows << ", \"words\": {";
      for (size_t w = 0; w < sample.texts.size(); ++w) {
        const TextInstance& t = sample.texts[w];
        json << (w ? ", " : "") << "\"" << std::setw(4) << std::setfill('0') << w + 1
             << std::setfill(' ') << "\": {\"transcription\": \""
             << (t.ignore ? "###" : "word") << "\", \"illegibility\": "
             << (t.ignore ? "true" : "false") << ", \"points\": [";
        for (size_t k = 0; k < t.polygon.size(); ++k) {
          json << (k ? ", " : "") << "[" << t.polygon[k].x << ", " << t.polygon[k].y << "]";
        }
        json << "]}";
      }
      json << "}}";
    }
    json << "}}\n";
    std::ofstream(root_ / "annotations.json") << json.str();
  }
  ~GeneratedDataset() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  GeneratedDataset(const GeneratedDataset&) = delete;
  GeneratedDataset& operator=(const GeneratedDataset&) = delete;

  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

struct BenchData {
  std::shared_ptr<const Dataset> dataset;
  std::string name;  // for the benchmark label
};

// The dataset every loader benchmark reads, built (and, when generated,
// written) once: 640² training size with augmentation and label maps.
const BenchData& bench_data() {
  static const BenchData data = [] {
    static std::unique_ptr<GeneratedDataset> generated;
    DatasetOptions options;
    options.size = 640;
    options.augment = true;
    options.on_invalid = OnInvalid::kSkip;
    BenchData d;
    if (fs::exists(fs::path(kRealFixtures) / "annotations.json")) {
      options.root = kRealFixtures;
      d.name = "fixtures/real";
    } else {
      generated = std::make_unique<GeneratedDataset>();
      options.root = generated->root();
      d.name = "synthetic_render " + std::to_string(kGeneratedWidth) + "x" +
               std::to_string(kGeneratedHeight) + " PNG";
    }
    auto dataset = std::make_shared<const Dataset>(options);
    d.name += " (" + std::to_string(dataset->size()) + " images)";
    d.dataset = std::move(dataset);
    return d;
  }();
  return data;
}

// Arg: number of loader worker threads (0: batches prepared inline). Batch 2,
// prefetch 2; the rate is samples consumed by the main thread per wall-clock
// second.
void BM_LoaderThroughput(benchmark::State& state) {
  const BenchData& data = bench_data();
  LoaderOptions options;
  options.batch_size = 2;
  options.num_workers = state.range(0);
  options.prefetch = 2;
  Loader loader(data.dataset, options);
  // Warm-up: consume prefetch + 1 batches so that timing starts in the
  // steady state (workers busy, nothing banked ahead), not with an empty
  // pipeline; otherwise the fill (or a full queue) skews short runs.
  int64_t micro = 0;
  for (; micro <= options.prefetch; ++micro) loader.get(micro);
  for (auto _ : state) {
    Batch batch = loader.get(micro++);
    benchmark::DoNotOptimize(batch.image.data_ptr());
  }
  const auto samples = static_cast<int64_t>(state.iterations()) * options.batch_size;
  state.SetItemsProcessed(samples);
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.SetLabel(data.name);
}
BENCHMARK(BM_LoaderThroughput)
    ->ArgName("workers")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// make_label_maps alone on the polygons of rendered 640² samples (cycled
// over 8 samples, 3–12 words each).
void BM_LabelMaps640(benchmark::State& state) {
  std::vector<std::vector<TextInstance>> texts;
  int64_t words = 0;
  for (int i = 0; i < 8; ++i) {
    texts.push_back(render_synthetic_text(/*seed=*/0, i).texts);  // 640×640
    words += static_cast<int64_t>(texts.back().size());
  }
  size_t next = 0;
  for (auto _ : state) {
    LabelMaps maps = make_label_maps(texts[next], 640, 640);
    benchmark::DoNotOptimize(maps.gt_thresh.data);
    next = (next + 1) % texts.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel("synthetic_render 640x640, " + std::to_string(words) + " words in 8 samples");
}
BENCHMARK(BM_LabelMaps640)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dbh::model

// Harness overhead on the CPU training step, and trial start-up latency.
// BM_StepPlain / BM_StepMonitorsCheap / BM_StepMonitorsLocalise: the same
// DBNet step (ResNet-18 + FPN, batch 2, 128², SGD, synthetic_boxes_batch,
// 2 threads) without listeners, with harness::Monitors in cheap mode, and in
// localise mode (listener + module observer). Run them in one process with
// --benchmark_enable_random_interleaving=true so machine noise hits all three
// alike; the ratios are computed from the medians (tests/bench/results/README.md).
// BM_TrialSpawnToFirstStep: wall time of `dbh run scenarios/base/tiny-cpu.yaml
// train.max_steps=1` as a child process, end to end.
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/monitors/monitors.h"
#include "harness/worker/event_writer.h"
#include "model/nn/hooks.h"
#include "model/train/trainer.h"

extern char** environ;

namespace dbh {
namespace {

constexpr int64_t kThreads = 2;
constexpr int64_t kBatch = 2;
constexpr int64_t kSize = 128;

// mode < 0: no monitors; otherwise a Monitors::Mode.
void run_step_bench(benchmark::State& state, int mode) {
  model::apply_determinism(model::DeterminismOptions().seed(0).threads(kThreads));
  model::Trainer trainer(
      model::DbNet(model::DbNetOptions().encoder(model::ResNetOptions().depth(18))),
      model::TrainOptions().max_steps(1 << 20).device("cpu"));
  harness::EventWriter writer(-1);  // discards events
  std::shared_ptr<harness::Monitors> monitors;
  if (mode >= 0) {
    monitors = std::make_shared<harness::Monitors>(static_cast<harness::Monitors::Mode>(mode),
                                                   writer, 0.0);
    trainer.add_listener(monitors);
    model::set_module_observer(monitors.get());
  }
  const model::Batch batch = model::synthetic_boxes_batch(kBatch, kSize, kSize, 1);
  const model::BatchSource source = [&](int64_t) { return batch; };
  trainer.step(source);  // warm-up: allocator, oneDNN primitive caches
  for (auto _ : state) {
    const auto r = trainer.step(source);
    benchmark::DoNotOptimize(r.loss);
  }
  model::set_module_observer(nullptr);
  state.counters["images/s"] = benchmark::Counter(
      static_cast<double>(kBatch * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_StepPlain(benchmark::State& state) { run_step_bench(state, -1); }
void BM_StepMonitorsCheap(benchmark::State& state) {
  run_step_bench(state, static_cast<int>(harness::Monitors::Mode::kCheap));
}
void BM_StepMonitorsLocalise(benchmark::State& state) {
  run_step_bench(state, static_cast<int>(harness::Monitors::Mode::kLocalise));
}
BENCHMARK(BM_StepPlain)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_StepMonitorsCheap)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_StepMonitorsLocalise)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_TrialSpawnToFirstStep(benchmark::State& state) {
  const std::string binary = DBH_BINARY;
  const std::string scenario = std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml";
  const auto out_dir = std::filesystem::temp_directory_path() / "dbh_bench_trial";
  const std::string out = out_dir.string();
  std::vector<std::string> args = {binary, "run", scenario, "train.max_steps=1",
                                   "--out", out, "--quiet"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto _ : state) {
    std::filesystem::remove_all(out_dir);
    pid_t pid = 0;
    if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      state.SkipWithError("posix_spawn failed");
      break;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 1) {
      state.SkipWithError("dbh run failed");
      break;
    }
  }
  std::filesystem::remove_all(out_dir);
}
BENCHMARK(BM_TrialSpawnToFirstStep)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace
}  // namespace dbh

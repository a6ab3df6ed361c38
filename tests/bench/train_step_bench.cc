// One DBNet training step (forward + backward + optimizer) on the CPU.
// Results: tests/bench/results/. Run: ./dev bench [--benchmark_filter=...].
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <thread>

#include "model/train/trainer.h"

namespace dbh::model {
namespace {

// Args: {encoder depth, square size}. Batch 2, SGD, FPN decoder, all cores.
void BM_TrainStep(benchmark::State& state) {
  const int64_t depth = state.range(0);
  const int64_t size = state.range(1);
  const auto threads = static_cast<int64_t>(std::thread::hardware_concurrency());
  apply_determinism(DeterminismOptions().seed(0).threads(threads));
  Trainer trainer(DbNet(DbNetOptions().encoder(ResNetOptions().depth(depth))),
                  TrainOptions().max_steps(1 << 20).device("cpu"));
  const Batch batch = synthetic_boxes_batch(2, size, size, 1);
  const BatchSource source = [&](int64_t) { return batch; };
  trainer.step(source);  // warm-up: allocator, oneDNN primitive caches
  for (auto _ : state) {
    const auto r = trainer.step(source);
    benchmark::DoNotOptimize(r.loss);
  }
  state.counters["images/s"] =
      benchmark::Counter(static_cast<double>(2 * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["threads"] = static_cast<double>(threads);
}
BENCHMARK(BM_TrainStep)
    ->ArgNames({"resnet", "size"})
    ->Args({18, 64})
    ->Args({18, 128})
    ->Args({18, 256})
    ->Args({50, 128})
    ->Args({50, 256})
    ->Args({18, 640})  // the loader benchmark's size: the trainer's consumption rate
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace dbh::model

BENCHMARK_MAIN();

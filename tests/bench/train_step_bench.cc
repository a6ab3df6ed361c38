// One DBNet training step (forward + backward + optimizer) on the CPU, and
// training throughput on the benchmark device with the FLOPs it achieves.
// Results: tests/bench/results/. Run: ./dev bench [--benchmark_filter=...].
#include <ATen/record_function.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <cstdlib>
#include <string>
#include <thread>

#include "harness/worker/host_allocator.h"
#include "model/train/fused_sgd.h"
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

// --- The optimizer step -------------------------------------------------------
// Note [One pass of SGD] (model/train/fused_sgd.h): the trainer's SGD step
// (momentum 0.9, weight decay 1e-4) over ResNet-18 + FPN's parameters with
// gradients in place, against LibTorch's own SGD. Arg: 1 the trainer's
// FusedSGD, 0 torch::optim::SGD. 2 intra-op threads.
void BM_SgdStep(benchmark::State& state) {
  torch::set_num_threads(2);
  torch::manual_seed(0);
  DbNet net(DbNetOptions().encoder(ResNetOptions().depth(18)));
  std::vector<torch::Tensor> params = net->parameters();
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  const auto o = torch::optim::SGDOptions(0.007).momentum(0.9).weight_decay(1e-4);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (state.range(0) == 1) {
    opt = std::make_unique<FusedSGD>(params, o);
  } else {
    opt = std::make_unique<torch::optim::SGD>(params, o);
  }
  opt->step();  // the momentum buffers exist from here on
  for (auto _ : state) opt->step();
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  state.counters["parameters"] = static_cast<double>(n);
}
BENCHMARK(BM_SgdStep)->ArgName("fused")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- Throughput and achieved FLOP/s ------------------------------------------
// Note [Counted FLOPs]: a step's floating-point work is counted from the
// convolutions and matrix products it runs, observed with RecordFunction
// callbacks (every thread, the autograd engine's included): a convolution
// costs 2 · N · (positions on its non-transposed side) · weight.numel(), its
// backward that again for each of the input and weight gradients it computes,
// a matrix product 2·M·K·N. Elementwise work, normalisation and the loss are
// left out (a few percent of a DBNet step), so achieved TFLOP/s is a slight
// underestimate, comparable with the dense tensor-core peak a vendor quotes.
std::mutex g_flops_mutex;
double g_flops = 0.0;

// 2 · N · positions · weight.numel(), positions being the output's for a
// convolution, the input's for a transposed one (each weight element meets
// each position once).
double conv_flops(const at::Tensor& input, const at::Tensor& weight, bool transposed, c10::IntArrayRef stride,
                  c10::IntArrayRef padding, c10::IntArrayRef dilation) {
  if (!input.defined() || !weight.defined() || input.dim() < 3 || input.dim() != weight.dim()) return 0.0;
  const auto at = [](c10::IntArrayRef v, int64_t i) { return v.size() == 1 ? v[0] : v[static_cast<size_t>(i)]; };
  double p = static_cast<double>(input.size(0));
  for (int64_t d = 2; d < input.dim(); ++d) {
    const int64_t i = d - 2;
    p *= static_cast<double>(transposed ? input.size(d)
                                        : (input.size(d) + 2 * at(padding, i) - at(dilation, i) * (weight.size(d) - 1) - 1) /
                                                  at(stride, i) + 1);
  }
  return 2.0 * p * static_cast<double>(weight.numel());
}

// Inputs are read in the start callback: an operator may consume them.
std::unique_ptr<at::ObserverContext> count_flops(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  const auto in = fn.inputs();
  double f = 0.0;
  if (name == "aten::convolution" && in.size() >= 7 && in[0].isTensor() && in[1].isTensor()) {
    // (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    f = conv_flops(in[0].toTensor(), in[1].toTensor(), in[6].toBool(), in[3].toIntVector(), in[4].toIntVector(),
                   in[5].toIntVector());
  } else if (name == "aten::convolution_backward" && in.size() >= 11 && in[1].isTensor() && in[2].isTensor()) {
    // (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
    //  output_mask): the input and the weight gradient each cost a forward pass.
    const double one = conv_flops(in[1].toTensor(), in[2].toTensor(), in[7].toBool(), in[4].toIntVector(),
                                  in[5].toIntVector(), in[6].toIntVector());
    const auto mask = in[10].toBoolList();
    f = one * ((mask.get(0) ? 1 : 0) + (mask.get(1) ? 1 : 0));
  } else if ((name == "aten::mm" || name == "aten::addmm") && in.size() >= 2) {
    const size_t a = name == "aten::mm" ? 0 : 1;
    if (in[a].isTensor() && in[a + 1].isTensor() && in[a].toTensor().dim() == 2 && in[a + 1].toTensor().dim() == 2) {
      const auto& x = in[a].toTensor();
      f = 2.0 * static_cast<double>(x.size(0)) * static_cast<double>(x.size(1)) *
          static_cast<double>(in[a + 1].toTensor().size(1));
    }
  }
  if (f > 0.0) {
    const std::lock_guard<std::mutex> lock(g_flops_mutex);
    g_flops += f;
  }
  return nullptr;
}

// FLOPs of one call of `step` (Note [Counted FLOPs]).
double counted_flops(const std::function<void()>& step) {
  {
    const std::lock_guard<std::mutex> lock(g_flops_mutex);
    g_flops = 0.0;
  }
  const auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&count_flops)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  step();
  at::removeCallback(handle);
  const std::lock_guard<std::mutex> lock(g_flops_mutex);
  return g_flops;
}

std::string bench_device() {
  const char* d = std::getenv("DBH_BENCH_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}

// Args: {encoder depth, square size, bf16}. Training throughput on the
// benchmark device (DBH_BENCH_DEVICE, default cpu) at DBH_BENCH_BATCH images
// per step (default 8 on CUDA, 2 on the CPU), channels-last, SGD, FPN
// decoder: images/s and achieved TFLOP/s (Note [Counted FLOPs]); the
// fraction of the device's peak is tests/bench/table.py's, from the GPU's name.
void BM_StepThroughput(benchmark::State& state) {
  const int64_t depth = state.range(0);
  const int64_t size = state.range(1);
  const bool bf16 = state.range(2) != 0;
  const std::string device = bench_device();
  if (bf16 && device.rfind("cuda", 0) != 0) {
    state.SkipWithError("bf16 autocast is CUDA-only in dbh's trainer (DBH_BENCH_DEVICE=cuda)");
    return;
  }
  const char* batch_env = std::getenv("DBH_BENCH_BATCH");
  const int64_t batch_size =
      batch_env != nullptr && std::atoll(batch_env) > 0 ? std::atoll(batch_env) : (device == "cpu" ? 2 : 8);
  apply_determinism(DeterminismOptions().seed(0).threads(static_cast<int64_t>(std::thread::hardware_concurrency())));
  Trainer trainer(DbNet(DbNetOptions().encoder(ResNetOptions().depth(depth))),
                  TrainOptions().max_steps(1 << 20).device(device).channels_last(true).precision(
                      bf16 ? Precision::kBf16 : Precision::kFp32));
  const Batch batch = synthetic_boxes_batch(batch_size, size, size, 1);
  const BatchSource source = [&](int64_t) { return batch; };
  for (int i = 0; i < 2; ++i) trainer.step(source);  // warm-up: cuDNN/oneDNN choices, allocator
  const double flops = counted_flops([&] { trainer.step(source); });
  for (auto _ : state) {
    const auto r = trainer.step(source);  // reads the loss back: the step has finished on the device
    benchmark::DoNotOptimize(r.loss);
  }
  state.counters["batch"] = static_cast<double>(batch_size);
  state.counters["GFLOP/step"] = flops / 1e9;
  state.counters["images/s"] =
      benchmark::Counter(static_cast<double>(batch_size * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StepThroughput)
    ->ArgNames({"resnet", "size", "bf16"})
    ->Args({18, 128, 0})  // a quick check of the counting on any machine
    ->Args({18, 640, 0})
    ->Args({18, 640, 1})
    ->Args({50, 640, 0})
    ->Args({50, 640, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace dbh::model

// dbh's steps as dbh runs them: with the caching host allocator (Note
// [Keeping freed host memory]) unless $DBH_HOST_ALLOCATOR=system. The
// reference Python processes keep PyTorch's allocator.
int main(int argc, char** argv) {
  dbh::harness::worker::install_host_allocator();
  const char* choice = std::getenv("DBH_HOST_ALLOCATOR");
  benchmark::AddCustomContext("host_allocator",
                              choice != nullptr && std::string(choice) == "system" ? "system" : "caching");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

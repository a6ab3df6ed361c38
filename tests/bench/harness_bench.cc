// Harness overhead on the CPU training step, and trial start-up latency.
// BM_StepPlain / BM_StepMonitorsCheap / BM_StepMonitorsLocalise: the same
// DBNet step (ResNet-18 + FPN, batch 2, 128² and 640², SGD, synthetic_boxes_batch,
// 2 threads) without listeners, with harness::Monitors in cheap mode, and in
// localise mode (listener + module observer). Run them in one process with
// --benchmark_enable_random_interleaving=true so machine noise hits all three
// alike; the ratios are computed from the medians (tests/bench/results/README.md).
// BM_StepPythonEager: the same step in PyTorch eager with the same weights and
// input. BM_TrialSpawnToFirstStep: worker spawn to its first step_end;
// BM_DbhRunOneStep: a whole one-step `dbh run`, end to end.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "harness/monitors/monitors.h"
#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/trial.h"
#include "tests/support/subprocess.h"
#include "harness/proto/event_writer.h"
#include "model/nn/hooks.h"
#include "model/train/trainer.h"
#include "tests/support/paths.h"

extern char** environ;

namespace dbh {
namespace {

constexpr int64_t kThreads = 2;

// DBH_BENCH_DEVICE=cuda runs the step benchmarks (C++ and Python) on the GPU;
// the default is the CPU.
std::string bench_device() {
  const char* d = std::getenv("DBH_BENCH_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}
constexpr int64_t kBatch = 2;

// mode < 0: no monitors; otherwise a Monitors::Mode, with the silent-failure
// checks on unless `silent` is false.
void run_step_bench(benchmark::State& state, int mode, bool channels_last = true, bool silent = true,
                    int64_t threads = kThreads) {
  model::apply_determinism(model::DeterminismOptions().seed(0).threads(threads));
  model::Trainer trainer(
      model::DbNet(model::DbNetOptions().encoder(model::ResNetOptions().depth(18))),
      model::TrainOptions().max_steps(1 << 20).channels_last(channels_last).device(bench_device()));
  harness::proto::EventWriter writer(-1);  // discards events
  std::unique_ptr<harness::monitors::Monitors> monitors;
  if (mode >= 0) {
    harness::monitors::SilentOptions checks;
    checks.input = checks.labels = checks.predictions = silent;
    monitors = std::make_unique<harness::monitors::Monitors>(static_cast<harness::monitors::Monitors::Mode>(mode),
                                                   writer, 0.0, checks);
    trainer.add_listener(*monitors);
    model::set_module_observer(monitors.get());
  }
  // The batch waits on the device, as dbnet_step.py's does, so that the step
  // compared with PyTorch eager does the same work (on an H200 at 640² the
  // step that copied its 23 MB from pageable host memory each time took 34 ms,
  // eager's, with nothing to copy, 17 ms).
  const model::Batch batch =
      model::synthetic_boxes_batch(kBatch, state.range(0), state.range(0), 1).to(torch::Device(bench_device()));
  const model::BatchSource source = [&](int64_t) { return batch; };
  for (int i = 0; i < 2; ++i) trainer.step(source);  // warm-up: allocator, oneDNN primitive caches, momentum
  // DBH_BENCH_TRACE=DIR: one plain step's op-level trace (chrome://tracing JSON), to compare with the
  // Python reference's (dbnet_step.py writes its own into the same folder).
  if (const char* dir = std::getenv("DBH_BENCH_TRACE"); dir != nullptr && mode < 0) {
    torch::autograd::profiler::RecordProfile trace(std::string(dir) + "/cpp_" + (channels_last ? "cl" : "nchw") +
                                                   "_" + std::to_string(state.range(0)) + ".json");
    trainer.step(source);
  }
  for (auto _ : state) {
    const auto r = trainer.step(source);
    benchmark::DoNotOptimize(r.loss);
  }
  model::set_module_observer(nullptr);
  torch::set_num_threads(static_cast<int>(kThreads));
  state.counters["images/s"] = benchmark::Counter(
      static_cast<double>(kBatch * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_StepPlain(benchmark::State& state) { run_step_bench(state, -1); }
// The plain step with PyTorch's default (NCHW) layout instead of channels-last.
void BM_StepPlainNchw(benchmark::State& state) { run_step_bench(state, -1, false); }
void BM_StepMonitorsCheap(benchmark::State& state) {
  run_step_bench(state, static_cast<int>(harness::monitors::Monitors::Mode::kCheap));
}
// Cheap mode with the finite checks only: the silent-failure checks' share of
// BM_StepMonitorsCheap.
void BM_StepMonitorsCheapFinite(benchmark::State& state) {
  run_step_bench(state, static_cast<int>(harness::monitors::Monitors::Mode::kCheap), true, false);
}
// dbh's default step: the layout and thread count `auto` chose on this
// machine for this step (Note [Measured choices]), which scripts/bench.sh
// measures through `dbh run` at each size and passes as
// DBH_BENCH_AUTO="SIZE:CHANNELS_LAST,THREADS;…" (e.g. "640:0,2;128:1,2"; an
// entry without a size holds for every size). Plain, and with the cheap
// monitors every dbh run has.
struct AutoChoice {
  bool channels_last = false;
  int64_t threads = 0;
};
std::optional<AutoChoice> auto_choice(int64_t size) {
  const char* v = std::getenv("DBH_BENCH_AUTO");
  if (v == nullptr) return std::nullopt;
  std::optional<AutoChoice> any;
  std::stringstream entries(v);
  for (std::string entry; std::getline(entries, entry, ';');) {
    long long at = -1;
    if (const auto colon = entry.find(':'); colon != std::string::npos) {
      at = std::atoll(entry.substr(0, colon).c_str());
      entry = entry.substr(colon + 1);
    }
    int cl = 0;
    long long t = 0;
    if (std::sscanf(entry.c_str(), "%d,%lld", &cl, &t) != 2 || t < 1) continue;
    const AutoChoice c{cl != 0, t};
    if (at == size) return c;
    if (at < 0) any = c;
  }
  return any;
}
void run_default_step_bench(benchmark::State& state, int mode) {
  const auto c = auto_choice(state.range(0));
  if (!c) {
    state.SkipWithError("DBH_BENCH_AUTO is not set: scripts/bench.sh measures dbh's choice and sets it");
    return;
  }
  run_step_bench(state, mode, c->channels_last, true, c->threads);
  state.counters["channels_last"] = c->channels_last ? 1 : 0;
  state.counters["threads"] = static_cast<double>(c->threads);
}
void BM_StepDbhDefault(benchmark::State& state) { run_default_step_bench(state, -1); }
void BM_StepDbhDefaultMonitors(benchmark::State& state) {
  run_default_step_bench(state, static_cast<int>(harness::monitors::Monitors::Mode::kCheap));
}
void BM_StepMonitorsLocalise(benchmark::State& state) {
  run_step_bench(state, static_cast<int>(harness::monitors::Monitors::Mode::kLocalise));
}
// Note [Paired monitor steps]: the cheap monitors cost a few milliseconds of
// a 130–300 ms step at 128², while separate benchmarks of the plain and the
// monitored step differ by 5–12 % from one repetition to the next on a shared
// 2-core machine. So one trainer alternates the two (plain, monitored, then
// monitored, plain, ...), each pair measured back to back on the same
// weights, allocator and caches, and the answer is the median of the pairs'
// ratios. The monitors are switched by a forwarder that also times the host
// time spent inside them (on the CPU, where every op runs synchronously,
// that is their whole cost; on a GPU it is launch time only).
class SwitchedMonitors : public model::TrainerListener, public model::ModuleObserver {
 public:
  explicit SwitchedMonitors(harness::monitors::Monitors& m) : m_(m) {}
  void set_on(bool on) {
    on_ = on;
    model::set_module_observer(on ? this : nullptr);  // off: the one pointer test of a plain step
  }
  double inside_seconds() const { return inside_; }
  void on_enter(const std::string& name) override { timed([&] { m_.on_enter(name); }); }
  void on_output(const std::string& name, torch::Tensor& out) override { timed([&] { m_.on_output(name, out); }); }
  void on_step_begin(int64_t step) override { timed([&] { m_.on_step_begin(step); }); }
  void on_batch(int64_t step, model::Batch& b) override { timed([&] { m_.on_batch(step, b); }); }
  void on_forward(int64_t step, model::DbNetOutput& out) override { timed([&] { m_.on_forward(step, out); }); }
  void on_loss(int64_t step, model::DbLossParts& loss) override { timed([&] { m_.on_loss(step, loss); }); }
  void on_before_optimizer(int64_t step, model::DbNet& net) override {
    timed([&] { m_.on_before_optimizer(step, net); });
  }
  void on_grad_norms(int64_t step, const torch::Tensor& norms) override {
    timed([&] { m_.on_grad_norms(step, norms); });
  }
  void on_step_end(int64_t step, const model::StepResult& r) override { timed([&] { m_.on_step_end(step, r); }); }

 private:
  template <typename Fn>
  void timed(Fn&& fn) {
    if (!on_) return;
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    inside_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  harness::monitors::Monitors& m_;
  bool on_ = false;
  double inside_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The pairs' ratios as counters: `ratio` (their median, the answer) and
// `ratio_q1`/`ratio_q3` (their quartiles, by linear interpolation), so a
// table shows whether the answer stands out of its spread or a slow phase
// of the machine moved some pairs.
void ratio_counters(benchmark::State& state, std::vector<double> ratios) {
  std::sort(ratios.begin(), ratios.end());
  const auto at = [&](double q) {
    if (ratios.empty()) return 0.0;
    const double x = q * static_cast<double>(ratios.size() - 1);
    const size_t i = static_cast<size_t>(x);
    const double f = x - static_cast<double>(i);
    return i + 1 < ratios.size() ? ratios[i] + f * (ratios[i + 1] - ratios[i]) : ratios[i];
  };
  state.counters["ratio"] = median(ratios);
  state.counters["ratio_q1"] = at(0.25);
  state.counters["ratio_q3"] = at(0.75);
}

// dbh's default step (the `auto` choice, DBH_BENCH_AUTO; NCHW × 2 threads
// without it), plain and with the cheap monitors every dbh run has, in pairs
// (Note [Paired monitor steps]). Counters: ratio (median of the pairs'
// monitored ÷ plain), plain_ms and monitored_ms (medians), inside_ms (host time
// inside the monitors per monitored step).
void BM_StepMonitorsPaired(benchmark::State& state) {
  const AutoChoice c = auto_choice(state.range(0)).value_or(AutoChoice{false, kThreads});
  model::apply_determinism(model::DeterminismOptions().seed(0).threads(c.threads));
  model::Trainer trainer(
      model::DbNet(model::DbNetOptions().encoder(model::ResNetOptions().depth(18))),
      model::TrainOptions().max_steps(1 << 20).channels_last(c.channels_last).device(bench_device()));
  harness::proto::EventWriter writer(-1);
  harness::monitors::Monitors monitors(harness::monitors::Monitors::Mode::kCheap, writer, 0.0);
  SwitchedMonitors switched(monitors);
  trainer.add_listener(switched);
  const model::Batch batch =
      model::synthetic_boxes_batch(kBatch, state.range(0), state.range(0), 1).to(torch::Device(bench_device()));
  const model::BatchSource source = [&](int64_t) { return batch; };
  const auto timed_step = [&](bool on) {
    switched.set_on(on);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = trainer.step(source);
    benchmark::DoNotOptimize(r.loss);
    switched.set_on(false);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) {  // warm-up, both ways
    timed_step(false);
    timed_step(true);
  }
  const double inside_before = switched.inside_seconds();
  std::vector<double> plain, monitored, ratios;
  for (auto _ : state) {
    const bool monitored_first = plain.size() % 2 == 1;
    const double a = timed_step(monitored_first);
    const double b = timed_step(!monitored_first);
    const double p = monitored_first ? b : a, m = monitored_first ? a : b;
    plain.push_back(p);
    monitored.push_back(m);
    ratios.push_back(m / p);
  }
  const double n = static_cast<double>(ratios.size());
  ratio_counters(state, ratios);
  state.counters["plain_ms"] = 1e3 * median(plain);
  state.counters["monitored_ms"] = 1e3 * median(monitored);
  state.counters["inside_ms"] = n > 0 ? 1e3 * (switched.inside_seconds() - inside_before) / n : 0.0;
  state.counters["channels_last"] = c.channels_last ? 1 : 0;
  state.counters["threads"] = static_cast<double>(c.threads);
  torch::set_num_threads(static_cast<int>(kThreads));
}
// 64 pairs at 128², 12 at 640² (about 2 minutes), one repetition whatever
// --benchmark_repetitions says: the pairs are the repetitions. At 128² the
// monitors' own work is under 2 % of a step and the pairs' ratios spread by
// ±5 % on a shared 2-core VM, so the median needs the pairs (24 left it
// about 1 % either side of its value from one run to the next).
#define DBH_PAIRED_BENCH(b)           \
  BENCHMARK(b)                        \
      ->ArgName("size")               \
      ->Arg(128)                      \
      ->Unit(benchmark::kMillisecond) \
      ->UseRealTime()                 \
      ->Iterations(64)                \
      ->Repetitions(1);               \
  BENCHMARK(b)->ArgName("size")->Arg(640)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(12)->Repetitions(1)
DBH_PAIRED_BENCH(BM_StepMonitorsPaired);

// The monitors' own per-step work, without the training step around it: the
// finite flags of the batch and loss, the silent-failure reductions when
// arg 1 is 1, and the one read to the host. Single-threaded, so that the
// difference between the two settings is the silent checks' cost, which
// divided by a step's time (BM_StepPlain) is their share of the step.
void BM_MonitorsPerStep(benchmark::State& state) {
  torch::set_num_threads(1);
  harness::proto::EventWriter writer(-1);
  harness::monitors::SilentOptions checks;
  checks.input = checks.labels = checks.predictions = state.range(1) != 0;
  harness::monitors::Monitors monitors(harness::monitors::Monitors::Mode::kCheap, writer, 0.0, checks);
  const int64_t size = state.range(0);
  model::Batch batch = model::synthetic_boxes_batch(kBatch, size, size, 1);
  model::DbNetOutput out;
  out.probability = torch::rand({kBatch, 1, size, size});
  model::DbLossParts loss;
  loss.total = loss.bce = loss.l1 = loss.dice = torch::ones({});
  const torch::Tensor norms = torch::ones({64});
  int64_t step = 0;
  for (auto _ : state) {
    monitors.on_step_begin(step);
    monitors.on_batch(step, batch);
    monitors.on_forward(step, out);
    monitors.on_loss(step, loss);
    monitors.on_grad_norms(step, norms);  // the one read to the host
    ++step;
  }
  torch::set_num_threads(static_cast<int>(kThreads));
}
BENCHMARK(BM_MonitorsPerStep)->ArgNames({"size", "silent"})->ArgsProduct({{128, 640}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)->MinTime(0.5);

// Sizes: 128² (quick, overhead-heavy) and 640², the size DBNet trains at
// (2 s+ per step on 2 cores: 2 timed steps, 3 repetitions).
#define DBH_STEP_BENCH(b)                                                                               \
  BENCHMARK(b)->ArgName("size")->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0); \
  BENCHMARK(b)->ArgName("size")->Arg(640)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2)->Repetitions(3)
DBH_STEP_BENCH(BM_StepPlain);
DBH_STEP_BENCH(BM_StepPlainNchw);
DBH_STEP_BENCH(BM_StepMonitorsCheap);
DBH_STEP_BENCH(BM_StepMonitorsCheapFinite);
DBH_STEP_BENCH(BM_StepMonitorsLocalise);
DBH_STEP_BENCH(BM_StepDbhDefault);
DBH_STEP_BENCH(BM_StepDbhDefaultMonitors);

// --- The same step in PyTorch eager, side by side -------------------------
// The Python reference (tests/bench/python/dbnet_step.py --serve) gets this
// step's initial weights and input from a dump, so both sides compute the
// same numbers: the first step's losses are compared and reported
// ("loss_rel_diff"). Each iteration sends "step" down a pipe and waits for
// the step's reply; the pipe round trip is well under 0.1 ms.

void put_u32(std::ofstream& out, uint32_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }

// Format (little endian): "DBHT1", u32 count, then per tensor: u32 name
// length, name, u32 ndim, i64 dims[ndim], u8 dtype (0 float32, 1 int64), data.
void dump_tensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write("DBHT1", 5);
  put_u32(out, static_cast<uint32_t>(tensors.size()));
  for (const auto& [name, t0] : tensors) {
    const torch::Tensor t = t0.detach().contiguous().cpu();
    put_u32(out, static_cast<uint32_t>(name.size()));
    out.write(name.data(), static_cast<std::streamsize>(name.size()));
    put_u32(out, static_cast<uint32_t>(t.dim()));
    for (int64_t d : t.sizes()) out.write(reinterpret_cast<const char*>(&d), sizeof d);
    const bool is_long = t.scalar_type() == torch::kLong;
    TORCH_CHECK(is_long || t.scalar_type() == torch::kFloat, "Expected float32 or int64 tensors, but got ",
                t.scalar_type(), " for ", name);
    const char dtype = is_long ? 1 : 0;
    out.write(&dtype, 1);
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  }
  if (!out) throw std::runtime_error(path + ": cannot write the tensor dump");
}

class PythonStepper {
 public:
  PythonStepper(const std::string& python, const std::string& script, const std::string& dump,
                const std::string& layout) {
    int in_pipe[2], out_pipe[2];
    if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    std::vector<std::string> args = {python, script, "--serve", dump, bench_device(), layout};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // posix_spawnp: a bare name (DBH_BENCH_PYTHON=python3) is looked up on PATH.
    const int rc = posix_spawnp(&pid_, python.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in_pipe[0]);
    close(out_pipe[1]);
    if (rc != 0) throw std::runtime_error("cannot start " + python);
    to_ = fdopen(in_pipe[1], "w");
    from_ = fdopen(out_pipe[0], "r");
    const std::string ready = line();
    if (ready.rfind("ready", 0) != 0) throw std::runtime_error("python reference: expected 'ready', got '" + ready + "'");
  }
  ~PythonStepper() {
    if (to_ != nullptr) fclose(to_);
    if (from_ != nullptr) fclose(from_);
    int status = 0;
    if (pid_ > 0) waitpid(pid_, &status, 0);
  }
  // One step; returns the loss the reference computed.
  double step() {
    fputs("step\n", to_);
    fflush(to_);
    const std::string reply = line();
    double ms = 0, loss = 0, faults = 0;
    if (std::sscanf(reply.c_str(), "%lf %lf %lf", &ms, &loss, &faults) != 3) {
      throw std::runtime_error("python reference: expected '<ms> <loss> <page faults>', got '" + reply + "'");
    }
    faults_ = faults;
    return loss;
  }
  // The minor page faults of the last step in the reference's process.
  double faults() const { return faults_; }

 private:
  std::string line() {
    char buf[512];
    if (fgets(buf, sizeof buf, from_) == nullptr) throw std::runtime_error("python reference exited");
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  pid_t pid_ = -1;
  double faults_ = 0;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// Minor page faults of this process so far.
double minor_faults() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

// The Python to run the reference with, or "" after skipping `state`.
// DBH_BENCH_PYTHON: a Python with torch other than the project's .venv (the
// GPU machine's own, scripts/gpu-check.sh bench); a bare name is found on
// PATH when it is spawned (the GPU machine's python3).
std::string reference_python(benchmark::State& state) {
  const char* python_env = std::getenv("DBH_BENCH_PYTHON");
  const std::string python = python_env != nullptr && *python_env ? std::string(python_env)
                                                                   : std::string(DBH_SOURCE_DIR) + "/.venv/bin/python";
  if (python.find('/') != std::string::npos && access(python.c_str(), X_OK) != 0) {
    state.SkipWithError((python + " missing: run ./dev setup").c_str());
    return "";
  }
  return python;
}

// The trainer's initial parameters and buffers and `batch`, dumped for the
// reference (removed by the destructor).
class StepDump {
 public:
  StepDump(model::Trainer& trainer, const model::Batch& batch)
      : path_(std::filesystem::temp_directory_path() / ("dbh_bench_py_" + std::to_string(getpid()) + ".bin")) {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& p : trainer.model()->named_parameters()) tensors.emplace_back(p.key(), p.value());
    for (const auto& b : trainer.model()->named_buffers()) tensors.emplace_back(b.key(), b.value());
    tensors.emplace_back("input.image", batch.image);
    tensors.emplace_back("target.gt_shrink", batch.targets.gt_shrink);
    tensors.emplace_back("target.gt_shrink_mask", batch.targets.gt_shrink_mask);
    tensors.emplace_back("target.gt_thresh", batch.targets.gt_thresh);
    tensors.emplace_back("target.gt_thresh_mask", batch.targets.gt_thresh_mask);
    dump_tensors(path_.string(), tensors);
  }
  ~StepDump() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

const std::string kReferenceScript = std::string(DBH_SOURCE_DIR) + "/tests/bench/python/dbnet_step.py";

// layout: "nchw" or "channels_last", both with dbh's thread count, or
// "users": NCHW with PyTorch's own default thread count, as users' scripts
// run.
void BM_StepPythonEager(benchmark::State& state, const std::string& layout) {
  const std::string python = reference_python(state);
  if (python.empty()) return;
  // The C++ side's model and batch, exactly as run_step_bench builds them.
  model::apply_determinism(model::DeterminismOptions().seed(0).threads(kThreads));
  model::Trainer trainer(model::DbNet(model::DbNetOptions().encoder(model::ResNetOptions().depth(18))),
                         model::TrainOptions().max_steps(1 << 20).device(bench_device()));
  const model::Batch batch = model::synthetic_boxes_batch(kBatch, state.range(0), state.range(0), 1);
  const StepDump dump(trainer, batch);
  const model::BatchSource source = [&](int64_t) { return batch; };
  try {
    PythonStepper py(python, kReferenceScript, dump.path(), layout);
    const double cpp_loss = trainer.step(source).loss;  // the same first step on both sides
    const double py_loss = py.step();
    state.counters["loss_rel_diff"] = std::abs(py_loss - cpp_loss) / std::max(1e-12, std::abs(cpp_loss));
    py.step();  // the second warm-up step, as on the C++ side
    for (auto _ : state) benchmark::DoNotOptimize(py.step());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(kBatch * state.iterations()),
                                                   benchmark::Counter::kIsRate);
}

// dbh's default step (the `auto` choice, DBH_BENCH_AUTO; NCHW × 2 threads
// without it) against PyTorch eager, in alternating pairs as Note [Paired
// monitor steps] does for the monitors: one C++ step, one Python step, then
// the other way round, on the same weights and batch; the ratio is the
// median of the pairs' (dbh ÷ eager), every step timed by the wall clock
// here (the pipe's round trip is well under 0.1 ms). Eager runs as users run
// it (NCHW, PyTorch's own threads), or at dbh's layout and threads
// (`same_layout`).
void step_vs_eager_paired(benchmark::State& state, bool same_layout) {
  const std::string python = reference_python(state);
  if (python.empty()) return;
  const AutoChoice c = auto_choice(state.range(0)).value_or(AutoChoice{false, kThreads});
  const std::string eager_layout = !same_layout ? "users" : c.channels_last ? "channels_last" : "nchw";
  model::apply_determinism(model::DeterminismOptions().seed(0).threads(c.threads));
  model::Trainer trainer(
      model::DbNet(model::DbNetOptions().encoder(model::ResNetOptions().depth(18))),
      model::TrainOptions().max_steps(1 << 20).channels_last(c.channels_last).device(bench_device()));
  const model::Batch cpu_batch = model::synthetic_boxes_batch(kBatch, state.range(0), state.range(0), 1);
  const StepDump dump(trainer, cpu_batch);
  const model::Batch batch = cpu_batch.to(torch::Device(bench_device()));
  const model::BatchSource source = [&](int64_t) { return batch; };
  const auto wall = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  try {
    PythonStepper py(python, kReferenceScript, dump.path(), eager_layout);
    const double cpp_loss = trainer.step(source).loss;
    const double py_loss = py.step();
    state.counters["loss_rel_diff"] = std::abs(py_loss - cpp_loss) / std::max(1e-12, std::abs(cpp_loss));
    trainer.step(source);
    py.step();
    std::vector<double> dbh, eager, ratios, dbh_faults, eager_faults;
    for (auto _ : state) {
      const bool eager_first = dbh.size() % 2 == 1;
      double e = 0;
      if (eager_first) e = wall([&] { benchmark::DoNotOptimize(py.step()); });
      const double f0 = minor_faults();
      const double d = wall([&] { benchmark::DoNotOptimize(trainer.step(source).loss); });
      dbh_faults.push_back(minor_faults() - f0);
      if (!eager_first) e = wall([&] { benchmark::DoNotOptimize(py.step()); });
      eager_faults.push_back(py.faults());
      dbh.push_back(d);
      eager.push_back(e);
      ratios.push_back(d / e);
    }
    ratio_counters(state, ratios);
    // Minor page faults per step: memory handed back to the kernel and
    // faulted in again, the cost an allocator's choices show first.
    state.counters["dbh_faults"] = median(dbh_faults);
    state.counters["eager_faults"] = median(eager_faults);
    state.counters["dbh_ms"] = 1e3 * median(dbh);
    state.counters["eager_ms"] = 1e3 * median(eager);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.counters["channels_last"] = c.channels_last ? 1 : 0;
  state.counters["threads"] = static_cast<double>(c.threads);
  torch::set_num_threads(static_cast<int>(kThreads));
}
void BM_StepVsEagerPaired(benchmark::State& state) { step_vs_eager_paired(state, /*same_layout=*/false); }
void BM_StepVsEagerSameLayoutPaired(benchmark::State& state) { step_vs_eager_paired(state, /*same_layout=*/true); }
DBH_PAIRED_BENCH(BM_StepVsEagerPaired);
DBH_PAIRED_BENCH(BM_StepVsEagerSameLayoutPaired);

#define DBH_PY_BENCH(layout)                                                                           \
  BENCHMARK_CAPTURE(BM_StepPythonEager, layout, std::string(#layout))                                  \
      ->ArgName("size")->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);         \
  BENCHMARK_CAPTURE(BM_StepPythonEager, layout, std::string(#layout))                                  \
      ->ArgName("size")->Arg(640)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2)->Repetitions(3)
DBH_PY_BENCH(nchw);
DBH_PY_BENCH(channels_last);
DBH_PY_BENCH(users);

// Trial overhead as the supervisor sees it: from posix_spawn of the worker
// (`dbh __worker`, what every trial of a run, suite or bisection costs) to its
// first step_end event, for tiny-cpu.yaml with one step. Counters split it:
// spawn → hello (process start, loading LibTorch, reading the scenario) and
// hello → first step_end (model, data, first step).
void BM_TrialSpawnToFirstStep(benchmark::State& state) {
  const auto dir = std::filesystem::temp_directory_path() / ("dbh_bench_trial_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const harness::scenario::Scenario s = harness::scenario::load_scenario(std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml",
                                                     {"train.max_steps=1"});
  const std::string resolved = (dir / "scenario.resolved.json").string();
  std::ofstream(resolved) << harness::scenario::resolved_json(s) << "\n";
  double hello_s = 0, first_s = 0;
  for (auto _ : state) {
    using Clock = std::chrono::steady_clock;
    Clock::time_point t0, t_hello, t_first;
    bool seen_hello = false, seen_step = false;
    harness::supervisor::TrialSpec spec;
    spec.argv = {testing::dbh_binary(), "__worker", "--scenario", resolved, "--run-dir", dir.string(), "--trial", "0"};
    spec.run_dir = dir.string();
    spec.on_event = [&](const harness::proto::Event& e) {
      if (e.type == harness::proto::event::kHello && !seen_hello) seen_hello = true, t_hello = Clock::now();
      if (e.type == harness::proto::event::kStepEnd && !seen_step) seen_step = true, t_first = Clock::now();
    };
    t0 = Clock::now();
    const harness::supervisor::TrialResult r = harness::supervisor::run_trial(spec);
    if (!seen_step || r.exit_code != 0) {
      state.SkipWithError(("worker failed: " + r.stderr_tail + r.spawn_error).c_str());
      break;
    }
    const double total = std::chrono::duration<double>(t_first - t0).count();
    state.SetIterationTime(total);
    hello_s += std::chrono::duration<double>(t_hello - t0).count();
    first_s += std::chrono::duration<double>(t_first - t_hello).count();
  }
  const auto n = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["spawn_to_hello_ms"] = 1e3 * hello_s / n;
  state.counters["hello_to_step_ms"] = 1e3 * first_s / n;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_TrialSpawnToFirstStep)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(5);

// The whole `dbh run` of the same one-step scenario, end to end: harness
// start, the trial, analysis and every report file.
void BM_DbhRunOneStep(benchmark::State& state) {
  const std::string binary = testing::dbh_binary();
  const std::string scenario = std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml";
  const auto out_dir = std::filesystem::temp_directory_path() / ("dbh_bench_run_" + std::to_string(getpid()));
  const std::string out = out_dir.string();
  std::vector<std::string> args = {binary, "run", scenario, "train.max_steps=1", "--out", out, "--quiet"};
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
BENCHMARK(BM_DbhRunOneStep)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace
}  // namespace dbh

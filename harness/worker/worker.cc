#include "harness/worker/worker.h"

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <torch/torch.h>

#include "harness/common/cpu.h"
#include "harness/common/error.h"
#include "harness/common/png.h"
#include "harness/common/files.h"
#include "harness/common/hash.h"
#include "harness/common/text.h"
#include "harness/faults/injectors.h"
#include "harness/monitors/monitors.h"
#include "harness/monitors/numerics_monitor.h"
#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/version.h"
#include "harness/proto/event_writer.h"
#include "harness/worker/memory_budget.h"
#include "harness/worker/training.h"
#include "harness/worker/validation.h"
#include "model/data/dataset.h"
#include "model/data/image_decode.h"
#include "model/data/scan.h"
#include "model/eval/infer.h"
#include "model/eval/overlay.h"
#include "model/dbnet.h"
#include "model/train/trainer.h"

namespace dbh::harness::worker {
namespace fs = std::filesystem;

namespace {

// Allocation events kept by the CUDA allocator's history under a memory budget.
constexpr int64_t kMemoryHistoryEntries = 100000;

nlohmann::json memory_json(const std::string& device) { return memory_sample(device); }

std::string backtrace_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    std::string bt = c10->backtrace() ? c10->backtrace()->get() : std::string();
    if (bt.size() > 4000) bt = bt.substr(0, 4000) + "\n…";
    return bt;
  }
  return {};
}

uint64_t parameter_checksum(model::DbNet& net) {
  Fnv1a64 h;
  for (const auto& p : net->parameters()) {
    const auto c = p.detach().to(torch::kCPU).contiguous();
    h.update(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  }
  return h.value();
}

// Writes one overlay per sample of `b` into `dir`: the input as the model
// saw it (de-normalised), the shrunk text kernels in green, the threshold band
// in red, ignored regions greyed and non-finite pixels in magenta. Returns the
// file names.
std::vector<std::string> write_batch_overlays(const model::Batch& b, const fs::path& dir) {
  std::vector<std::string> files;
  if (!b.image.defined()) return files;
  make_directories_no_follow(dir.string());
  torch::NoGradGuard no_grad;
  const auto image = b.image.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const auto get = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kFloat32).contiguous(); };
  const auto shrink = get(b.targets.gt_shrink), mask = get(b.targets.gt_shrink_mask),
             tmask = get(b.targets.gt_thresh_mask);
  const int64_t n = image.size(0), h = image.size(2), w = image.size(3);
  for (int64_t i = 0; i < n && i < 8; ++i) {
    const auto chw = image[i].permute({1, 2, 0}).contiguous();
    cv::Mat normalised(static_cast<int>(h), static_cast<int>(w), CV_32FC3, const_cast<float*>(chw.data_ptr<float>()));
    cv::Mat bad;
    {
      const auto finite = torch::isfinite(chw).all(2).to(torch::kUInt8).contiguous();
      bad = cv::Mat(static_cast<int>(h), static_cast<int>(w), CV_8UC1, finite.data_ptr<uint8_t>()).clone();
    }
    cv::Mat safe = normalised.clone();
    safe.setTo(cv::Scalar(0, 0, 0), bad == 0);
    cv::Mat bgr = model::denormalize_to_bgr8(safe);
    const float* ps = shrink[i][0].data_ptr<float>();
    const float* pm = mask[i][0].data_ptr<float>();
    const float* pt = tmask[i][0].data_ptr<float>();
    for (int y = 0; y < bgr.rows; ++y) {
      for (int x = 0; x < bgr.cols; ++x) {
        const size_t k = static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x);
        auto& px = bgr.at<cv::Vec3b>(y, x);
        if (!bad.at<uint8_t>(y, x) || !std::isfinite(ps[k]) || !std::isfinite(pt[k])) {
          px = cv::Vec3b(255, 0, 255);
          continue;
        }
        if (ps[k] > 0.5f) px = px * 0.5 + cv::Vec3b(0, 255, 0) * 0.5;
        else if (pt[k] > 0.5f) px = px * 0.6 + cv::Vec3b(0, 0, 255) * 0.4;
        if (pm[k] < 0.5f) px = px * 0.5 + cv::Vec3b(128, 128, 128) * 0.5;
      }
    }
    std::string id = i < static_cast<int64_t>(b.sample_ids.size()) ? b.sample_ids[static_cast<size_t>(i)]
                                                                     : "sample" + std::to_string(i);
    for (char& c : id) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    }
    const std::string name = std::to_string(i) + "-" + id + (id.size() > 4 && id.substr(id.size() - 4) == ".png" ? "" : ".png");
    if (write_png((dir / name).string(), bgr)) files.push_back(name);
  }
  return files;
}

}  // namespace

namespace {

// The kind of error event `e` is: a data problem, a device this machine
// does not have (the run is not tried), or anything else.
const char* error_kind_of(const std::exception& e) {
  if (dynamic_cast<const model::DataError*>(&e) != nullptr) return proto::error_kind::kData;
  if (dynamic_cast<const model::DeviceUnavailable*>(&e) != nullptr) return proto::error_kind::kUnavailable;
  if (dynamic_cast<const StateReplayError*>(&e) != nullptr) return proto::error_kind::kHarness;
  return proto::error_kind::kException;
}

// model.weights: a dbh checkpoint or weights file. A file of which nothing
// loads, or one of another encoder depth or width, would train a mostly
// random network under the file's name: the run's error
// (ModelStateReport::fits_as_initial_weights). A partial load (e.g. a
// pretrained encoder only) is allowed and returned as a warning naming what
// keeps its initial values, never left unsaid.
std::string load_initial_weights(model::DbNet& net, const std::string& path) {
  const auto state = model::load_model_state(net, path);
  if (state.exact()) return {};
  if (!state.fits_as_initial_weights()) {
    throw std::runtime_error(std::string(DBH_SCENARIO_KEY(model.weights)) + " " + path +
                             ": expected parameters of the scenario's model (" + state.format +
                             " file), got a file of another model (" + state.summary() + ")");
  }
  return std::string(DBH_SCENARIO_KEY(model.weights)) + " " + path + ": " + state.summary() +
         "; those keep their initial values";
}

}  // namespace

namespace {

// What identifies a check's answer: the files as they are now (size and
// modification time) and what the scenario asks of them.
std::string model_files_key(const scenario::Scenario& s) {
  std::ostringstream key;
  for (const std::string* path : {&s.model.weights, &s.train.resume_from}) key << file_state(*path) << '\0';
  key << s.model.encoder << '\0' << model::to_string(s.model.decoder) << '\0' << s.model.k << '\0' << s.train.max_steps
      << '\0' << s.train.stop_after;
  return key.str();
}

std::optional<scenario::InputFileProblem> check_model_files_uncached(const scenario::Scenario& s);

}  // namespace

// A bisection loads its scenario once per probe: the files are read once.
std::optional<scenario::InputFileProblem> check_model_files(const scenario::Scenario& s) {
  if (s.model.weights.empty() && s.train.resume_from.empty()) return std::nullopt;
  static std::map<std::string, std::optional<scenario::InputFileProblem>> answers;
  const std::string key = model_files_key(s);
  if (const auto it = answers.find(key); it != answers.end()) return it->second;
  auto answer = check_model_files_uncached(s);
  if (answers.size() < 64) answers.emplace(key, answer);
  return answer;
}

scenario::InputChecks input_checks() { return scenario::InputChecks{&check_model_files}; }

namespace {

std::optional<scenario::InputFileProblem> check_model_files_uncached(const scenario::Scenario& s) {
  const std::string model_name =
      "resnet" + std::to_string(s.model.encoder) + " with the " + model::to_string(s.model.decoder) + " decoder";
  // Reads `path` into a fresh model of the scenario; an unreadable file is the problem.
  auto read = [&](const char* key, const std::string& path,
                  model::ModelStateReport& state) -> std::optional<scenario::InputFileProblem> {
    try {
      model::DbNet net(net_options(s));
      state = model::load_model_state(net, path);
      return std::nullopt;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return scenario::InputFileProblem{key, "a checkpoint or weights file written by dbh",
                              quoted_excerpt(what.substr(0, what.find('\n')))};
    }
  };
  model::ModelStateReport state;
  if (!s.model.weights.empty()) {
    if (auto p = read(DBH_SCENARIO_KEY(model.weights), s.model.weights, state)) return p;
    if (!state.fits_as_initial_weights()) {
      return scenario::InputFileProblem{DBH_SCENARIO_KEY(model.weights),
                              "parameters of the scenario's model (" + model_name + ")",
                              "a " + state.format + " file of another model (" + state.summary() + ")"};
    }
  }
  if (!s.train.resume_from.empty()) {
    if (auto p = read(DBH_SCENARIO_KEY(train.resume_from), s.train.resume_from, state)) return p;
    const std::string expected = "a checkpoint of the scenario's model (" + model_name + ")";
    if (state.format != "checkpoint") return scenario::InputFileProblem{DBH_SCENARIO_KEY(train.resume_from), expected, "a weights file (no step or optimizer state to resume)"};
    if (!state.complete()) {
      return scenario::InputFileProblem{DBH_SCENARIO_KEY(train.resume_from), expected,
                              "one of another model (" + state.summary() + ")"};
    }
    if (const auto last = nothing_left_to_train(s, state.step)) {
      return scenario::InputFileProblem{DBH_SCENARIO_KEY(train.resume_from),
                              "a checkpoint before step " + std::to_string(last->step) + " (" + last->key + ")",
                              "one after step " + std::to_string(state.step) + ": nothing is left to train"};
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

proto::Hello hello_event(const scenario::Scenario& s, int64_t trial_index, int64_t threads) {
  proto::Hello hello;
  hello.pid = static_cast<int64_t>(getpid());
  hello.seed = s.train.seed;
  hello.scenario_hash = scenario::scenario_hash(s);
  hello.scenario = s.name;
  hello.trial = trial_index;
  hello.git = kGitRevision;
  hello.dbh_version = kVersion;
  hello.torch_version = TORCH_VERSION;
  hello.device = s.hardware.device;
  hello.threads = threads;
  return hello;
}

monitors::SilentOptions silent_options(const scenario::Scenario& s) {
  monitors::SilentOptions silent;
  silent.input = s.monitors.silent_check("input");
  silent.labels = s.monitors.silent_check("labels");
  silent.predictions = s.monitors.silent_check("predictions");
  silent.collapse_after = s.monitors.collapse_after;
  silent.collapse_steps = s.monitors.collapse_steps;
  silent.collapse_margin = s.monitors.collapse_margin;
  return silent;
}

// train.mode: ops. Basic tensor operations on the device: matmul,
// convolution forward and backward, reductions. No model, no data. Emits
// the steps and `done`; returns the worker's exit status.
int run_ops_check(const scenario::Scenario& s, proto::EventWriter& events) {
  int64_t step = -1;
  try {
    torch::manual_seed(s.train.seed);
    const torch::Device device = model::parse_device(s.hardware.device);
    for (step = 0; step < 3; ++step) {
      events.emit(proto::StepBegin{0, step});
      auto a = torch::randn({256, 256}, device);
      auto x = torch::randn({2, 16, 32, 32}, torch::TensorOptions().device(device).requires_grad(true));
      auto w = torch::randn({32, 16, 3, 3}, torch::TensorOptions().device(device).requires_grad(true));
      auto y = torch::conv2d(x, w, {}, 1, 1).relu().sum() + a.matmul(a).mean();
      y.backward();
      const double v = y.item<double>();
      const bool finite = std::isfinite(v) && torch::isfinite(x.grad()).all().item<bool>() &&
                          torch::isfinite(w.grad()).all().item<bool>();
      if (!finite) throw std::runtime_error("basic tensor ops produced non-finite values on " + device.str());
      proto::StepEnd end;
      end.ops = true;
      end.step = step;
      end.loss = v;
      events.emit(end);
    }
  } catch (const std::exception& e) {
    proto::WorkerError error;
    error.kind = error_kind_of(e);
    error.run = 0;
    error.step = step;
    error.phase = "ops";
    error.message = message_of(e);
    events.emit(error);
    events.emit(proto::Done{"error", {}});
    return 1;
  }
  events.emit(proto::Done{"passed", {}});
  return 0;
}

// The data a worker trains and validates on.
struct TrainingData {
  std::shared_ptr<model::Dataset> dataset;  // null for synthetic data
  ValidationSet validation;                    // no images: no validation
};

// The training dataset at `data_path` (the scenario's, or a fault's
// corrupted copy) and the validation images: data.val.path, or the last
// data.val.holdout samples, which training then never sees. Emits the
// datasets' warnings and the evaluator's self-check.
TrainingData open_training_data(const scenario::Scenario& s, const std::string& data_path, proto::EventWriter& events) {
  TrainingData data;
  if (!s.data.val.path.empty()) {
    std::vector<std::string> warnings;
    data.validation = open_validation_set(s, warnings);
    for (const auto& w : warnings) events.emit(proto::Warning{w});
  }
  if (uses_dataset(s)) {
    model::DatasetOptions d = dataset_options(s, data_path);
    if (s.data.val.holdout > 0) {
      const auto scan = model::scan_dataset(data_path, d.on_invalid, {}, /*check_images=*/false);
      const auto count = static_cast<int64_t>(scan.images.size());
      data.validation.root = data_path;
      data.validation.images.assign(scan.images.end() - std::min(count, s.data.val.holdout), scan.images.end());
      if (d.subset.empty()) {
        for (int64_t i = 0; i + s.data.val.holdout < count; ++i) d.subset.push_back(i);
      }
    }
    data.dataset = std::make_shared<model::Dataset>(d);
    for (const auto& defect : data.dataset->defects()) events.emit(proto::Warning{defect.message});
  }
  if (!data.validation.images.empty()) {
    // The evaluator scores the ground truth itself before it scores the
    // model: anything below 1.0 means its metrics cannot be trusted.
    int64_t words = 0;
    for (const auto& image : data.validation.images) {
      for (const auto& w : image.words) words += w.ignore ? 0 : 1;
    }
    events.emit(proto::EvalCheck{model::evaluator_self_check(data.validation.images),
                                 static_cast<int64_t>(data.validation.images.size()), words});
  }
  return data;
}

// A training worker's state: what its events and error reports name.
struct WorkerState {
  const scenario::Scenario& s;
  const std::string& run_dir;
  proto::EventWriter& events;
  monitors::Monitors& monitors;
  faults::FaultInjector& faults;
  monitors::NumericsMonitor* numerics = nullptr;  // monitors.numerics; null when off
  int64_t run = 0;
  int64_t step = -1;  // the step being trained, -1 between steps
};

proto::StepEnd step_end_event(const WorkerState& w, const model::StepResult& r) {
  proto::StepEnd end;
  end.run = w.run;
  end.step = r.step;
  end.loss = r.loss;
  end.bce = r.bce;
  end.l1 = r.l1;
  end.dice = r.dice;
  end.loss_bits = r.loss_bits;
  end.micro_loss_bits = r.micro_loss_bits;
  end.grad_norm_bits = r.grad_norm_bits;
  end.lr = r.lr;
  end.grad_norm = r.grad_norm;
  end.skipped = r.skipped;
  end.loss_scale = r.loss_scale;
  end.seconds = r.seconds;
  end.samples = r.samples;
  end.memory = memory_json(w.s.hardware.device);
  end.phases = w.monitors.phase_memory();
  end.silent = w.monitors.silent_stats();
  if (w.numerics != nullptr) end.numerics = w.numerics->numbers();
  return end;
}

// The trainer of run `w.run`: seeded and built (Note [One training
// builder]), initial weights loaded, faults attached, resumed from
// train.resume_from.
std::unique_ptr<model::Trainer> start_run(WorkerState& w, model::DbNet& net) {
  const scenario::Scenario& s = w.s;
  if (!s.model.weights.empty()) {
    if (const auto partial = load_initial_weights(net, s.model.weights); !partial.empty()) {
      w.events.emit(proto::Warning{partial});
    }
  }
  w.faults.on_model(net);
  w.faults.on_start();
  auto trainer = std::make_unique<model::Trainer>(net, train_options(s));
  w.faults.set_optimizer(&trainer->optimizer());
  if (!s.train.resume_from.empty()) {
    trainer->load_checkpoint(s.train.resume_from);
    // Note [Nothing left to train].
    if (const auto last = nothing_left_to_train(s, trainer->next_step())) {
      throw std::runtime_error(std::string(DBH_SCENARIO_KEY(train.resume_from)) + " " + s.train.resume_from +
                               ": expected a checkpoint before step " + std::to_string(last->step) + " (" +
                               last->key + "), got one after step " + std::to_string(trainer->next_step()) +
                               ": nothing is left to train");
    }
    w.events.emit(proto::Checkpoint{w.run, trainer->next_step(), s.train.resume_from, /*resumed=*/true});
  }
  trainer->add_listener(w.faults);
  trainer->add_listener(w.monitors);
  if (w.numerics != nullptr) trainer->add_listener(*w.numerics);
  return trainer;
}

// One in-process run, from run_begin to run_end: the steps, with the
// checkpoints and validations their cadence asks for.
void train_one_run(WorkerState& w, const TrainingData& data) {
  const scenario::Scenario& s = w.s;
  w.monitors.set_run(w.run);
  w.faults.set_run(w.run);
  w.events.emit(proto::RunBegin{w.run, memory_json(s.hardware.device)});
  model::DbNet net = make_net(s);
  const std::unique_ptr<model::Trainer> trainer = start_run(w, net);
  std::shared_ptr<model::Loader> loader;
  if (data.dataset) loader = std::make_shared<model::Loader>(data.dataset, loader_options(s));
  model::BatchSource batches = make_batch_source(s, loader);
  // Note [One training session]: the loop dbh train runs too; the worker
  // says each step, checkpoint and validation as events.
  StepHooks hooks;
  hooks.before_step = [&w](int64_t step) {
    w.step = step;
    w.events.emit(proto::StepBegin{w.run, step});
    reset_memory_peaks(w.s.hardware.device);
  };
  hooks.after_step = [&w](const model::StepResult& r) { w.events.emit(step_end_event(w, r)); };
  hooks.checkpointed = [&w](int64_t next, const std::string& path) {
    w.events.emit(proto::Checkpoint{w.run, next, path});
  };
  hooks.validated = [&w](int64_t next, const ValidationResult& v) {
    w.events.emit(v.eval);
    if (v.drew_overlays) {
      proto::EvalOverlays drawn;
      drawn.run = w.run;
      drawn.step = next;
      drawn.files = v.overlays;
      w.events.emit(drawn);
    }
  };
  train_steps(net, *trainer, batches, data.validation, s, SessionSite{w.run, w.run_dir, &w.faults}, hooks);
  w.step = -1;
  std::ostringstream checksum;
  checksum << std::hex << parameter_checksum(net);
  // The loader's threads end before the run's memory is read, and the heap
  // gives back what it holds free (Note [What a run leaves behind]): what
  // the resident memory shows is then what the process still uses.
  batches = nullptr;
  loader.reset();
  malloc_trim(0);
  w.events.emit(proto::RunEnd{w.run, trainer->next_step(), checksum.str(), memory_json(s.hardware.device), {}});
}

// The overlays of the batch the failing step trained on, when they can be
// written (never a failure of their own).
void write_failing_batch_overlays(WorkerState& w) {
  try {
    const auto files = write_batch_overlays(w.monitors.last_batch(), fs::path(w.run_dir) / "overlays");
    if (!files.empty()) w.events.emit(proto::Overlays{w.run, w.step, files});
  } catch (const std::exception&) {
  }
}

// A run the monitors stopped (diverged, or finite but silent): its error
// event and the overlays of the failing batch.
void report_stopped_by_monitors(WorkerState& w, const char* kind, const std::string& message) {
  proto::WorkerError error;
  error.kind = kind;
  error.run = w.run;
  error.step = w.step;
  error.message = message;
  error.module = w.monitors.last_module();
  w.events.emit(error);
  write_failing_batch_overlays(w);
}

// An exception out of training: its error event, the allocator's snapshot
// after memory exhaustion on CUDA, the failing batch's overlays, and the
// teardown a training framework runs after a failure.
void report_training_error(WorkerState& w, const std::exception& e) {
  const scenario::Scenario& s = w.s;
  proto::WorkerError error;
  error.kind = error_kind_of(e);
  error.run = w.run;
  error.step = w.step;
  error.phase = "train";
  error.message = message_of(e);
  error.backtrace = backtrace_of(e);
  error.module = w.monitors.last_module();
  error.memory = memory_json(s.hardware.device);
  error.phases = w.monitors.phase_memory();
  w.events.emit(error);
  // Memory exhaustion on CUDA: the allocator's state and recent history,
  // in the format PyTorch's memory viewer opens.
  const std::string what = message_of(e);
  if (!w.faults.context_poisoned() && s.hardware.device.rfind("cuda", 0) == 0 &&
      (what.find("out of memory") != std::string::npos || what.find("unable to find an engine") != std::string::npos)) {
    const std::string file = (fs::path(w.run_dir) / "snapshot.pickle").string();
    try {
      if (write_memory_snapshot(s.hardware.device, file)) {
        w.events.emit(proto::MemorySnapshot{w.run, w.step, file});
      }
    } catch (const std::exception&) {
    }
  }
  if (!w.faults.context_poisoned()) write_failing_batch_overlays(w);
  // Teardown, as a training framework does after a failure (moving state,
  // syncing the device). A corrupted CUDA context fails here too.
  try {
    w.faults.on_teardown();
  } catch (const std::exception& t) {
    proto::WorkerError teardown;
    teardown.kind = proto::error_kind::kException;
    teardown.run = w.run;
    teardown.step = w.step;
    teardown.phase = "teardown";
    teardown.message = message_of(t);
    teardown.module = w.monitors.last_module();
    w.events.emit(teardown);
  }
}

// Applies hardware.memory_budget. The intra-op thread pool starts before
// the cap: thread stacks count against it, and a pool that cannot start its
// threads hangs instead of failing.
void apply_memory_budget(const scenario::Scenario& s, int64_t threads, proto::EventWriter& events) {
  torch::set_num_threads(static_cast<int>(threads));
  (void)torch::ones({1 << 16}).mul(2).sum().item<float>();
  const auto b = enforce_memory_budget(s.hardware.device, s.hardware.memory_budget);
  events.emit(proto::event::kMemoryBudget, b.to_json());
  // The allocator's recent history, for the snapshot written on OOM.
  record_memory_history(s.hardware.device, kMemoryHistoryEntries);
}

}  // namespace

int worker_main(const std::string& scenario_json, const std::string& run_dir, int events_fd,
                int64_t trial_index) {
  proto::EventWriter events(events_fd);
  scenario::Scenario s;
  try {
    s = scenario::decode_scenario(parse_yaml(scenario_json, "scenario.resolved.json"), "");
  } catch (const std::exception& e) {
    proto::WorkerError error;
    error.kind = proto::error_kind::kHarness;
    error.message = e.what();
    events.emit(error);
    return 3;
  }
  // The supervisor resolves `auto` before the worker starts (Note [Measured
  // choices]); a scenario given to the worker directly falls back to
  // PyTorch's own defaults: every core, NCHW.
  const int64_t threads = training_threads(s);
  events.emit(hello_event(s, trial_index, threads));

  monitors::Monitors monitors(s.monitors.mode, events, s.monitors.loss_spike_factor, silent_options(s));
  monitors.set_memory_probe([device = s.hardware.device] { return memory_sample(device); });
  monitors.set_loss_scaler(s.train.precision == model::Precision::kFp16);
  faults::FaultInjector faults(s.faults, events, s.hardware.device);
  // Monitors outside the injector: they know the module a fault throws from
  // and check the outputs faults replaced.
  // The numbers of monitors.numerics are read after the faults acted.
  monitors::NumericsMonitor numerics(s.monitors.numerics_jitter, trial_index);
  std::vector<model::ModuleObserver*> observers = {&monitors, &faults};
  if (s.monitors.numerics) observers.insert(observers.begin(), &numerics);
  model::ObserverChain chain(observers);
  model::set_module_observer(&chain);

  if (s.hardware.launch_blocking) setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  if (s.train.mode == scenario::TrainMode::kOps) return run_ops_check(s, events);
  WorkerState w{s, run_dir, events, monitors, faults, s.monitors.numerics ? &numerics : nullptr};
  std::string status = "passed";
  try {
    if (s.hardware.memory_budget > 0) apply_memory_budget(s, threads, events);
    // Data: a private corrupted copy when a fault (corrupt_sample) asks for one.
    const TrainingData data = open_training_data(s, faults.on_dataset(s.data.path, s.data.source, run_dir), events);
    for (w.run = 0; w.run < s.repeat.in_process; ++w.run) train_one_run(w, data);
  } catch (const monitors::DivergedError& e) {
    status = "diverged";
    report_stopped_by_monitors(w, proto::error_kind::kDiverged, e.what());
  } catch (const monitors::SilentFailureError& e) {
    // Finite but unable to learn: the monitors' health event says why.
    status = "failed";
    report_stopped_by_monitors(w, proto::error_kind::kSilent, e.what());
  } catch (const std::exception& e) {
    status = "error";
    report_training_error(w, e);
  }
  model::set_module_observer(nullptr);
  events.emit(proto::Done{status, memory_json(s.hardware.device)});
  return status == "passed" ? 0 : 1;
}

}  // namespace dbh::harness::worker

#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harness/scenario/fault_choices.h"
#include "harness/scenario/scenario.h"
#include "harness/proto/event_writer.h"
#include "model/eval/postprocess.h"
#include "model/nn/hooks.h"
#include "model/train/trainer.h"

namespace dbh::harness::faults {

/// Applies a scenario's faults to a training run. Each fault fires according
/// to its schedule (step range, run) and emits `fault_fired` when it does;
/// the report lists every fault with whether it fired.
class FaultInjector : public model::TrainerListener, public model::ModuleObserver {
 public:
  FaultInjector(const std::vector<scenario::FaultConfig>& faults, proto::EventWriter& events,
                const std::string& device);

  void set_run(int64_t run) { run_ = run; }
  void set_optimizer(torch::optim::Optimizer* optimizer) { optimizer_ = optimizer; }
  /// Switches the model before training (unstable_binarization at step 0).
  void on_model(model::DbNet& net);
  /// Before any training: memory_cap / memory_ballast scheduled at step 0.
  void on_start();
  /// Before the dataset at `path` (of data.source `source`) is opened: the
  /// folder to read instead, `path` unless a fault (corrupt_sample) made a
  /// private broken copy of it under `run_dir`.
  std::string on_dataset(const std::string& path, scenario::DataSource source, const std::string& run_dir);
  /// Before the validation after step `step_taken`: a fault
  /// (broken_postprocess) may change the post-processing in `pp`.
  void on_validation(int64_t step_taken, model::PostprocessOptions& pp);
  /// Called when the worker tears down after an error; a sticky CUDA fault
  /// makes it fail as a corrupted context does.
  void on_teardown();
  /// True after a sticky fault, emulated or real: nothing more may touch the device.
  bool context_poisoned() const { return poisoned_ || context_lost_; }

  void on_enter(const std::string& name) override;
  void on_output(const std::string& name, torch::Tensor& output) override;
  void on_step_begin(int64_t step) override;
  void on_batch(int64_t step, model::Batch& batch) override;
  void on_loss(int64_t step, model::DbLossParts& loss) override;
  void on_before_optimizer(int64_t step, model::DbNet& net) override;

  /// The error text CUDA/cuDNN print for `kind`.
  static std::string cuda_error_text(scenario::CudaErrorKind kind);
  /// Whether fault `name` has an entry in the registry (Note [Fault registry]
  /// in injectors.cc); the constructor throws std::logic_error for a fault
  /// without one.
  static bool has_injector(const std::string& name);

 private:
  struct Hooks;  // what one fault does, at the hooks it acts at
  struct DatasetSite {  // what on_dataset's hooks may change
    std::string path;
    scenario::DataSource source;
    std::string run_dir;
  };
  bool fires(size_t i) const;
  void fired(size_t i, const std::string& module, nlohmann::json detail = {});
  void hold_memory(int64_t bytes, bool host);
  bool on_cuda() const;
  /// The `cuda_error` fault: real on a CUDA device where it can be, else the
  /// error's text (Note [Real GPU faults] in harness/gpu/fault_kernels.h).
  [[noreturn]] void raise_cuda_error(size_t i, const std::string& module, scenario::CudaErrorKind kind,
                                     bool sticky);

  std::vector<scenario::FaultConfig> faults_;
  std::vector<const Hooks*> hooks_;  // faults_[i]'s entry
  proto::EventWriter& events_;
  std::string device_;
  int64_t run_ = 0;
  int64_t step_ = -1;
  int64_t micro_ = 0;  // micro-batch of the step being loaded
  bool poisoned_ = false;      // an emulated sticky fault fired
  bool context_lost_ = false;  // a real fault kernel broke the CUDA context
  model::DbNet* net_ = nullptr;
  torch::optim::Optimizer* optimizer_ = nullptr;
  std::vector<torch::Tensor> held_;
  std::vector<std::vector<char>> host_held_;
};

/// Tensors retained across in-process runs by the `leak` fault.
std::vector<torch::Tensor>& leaked_tensors();

/// Sets a memory budget on this process (RLIMIT_DATA on the host).
bool apply_host_memory_cap(int64_t bytes);

}  // namespace dbh::harness::faults

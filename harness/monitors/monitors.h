#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harness/worker/event_writer.h"
#include "model/nn/hooks.h"
#include "model/train/trainer.h"

namespace dbh::harness {

/// Thrown by the monitors to stop a run whose tensors turned non-finite; the
/// health events describing it have been emitted already.
class DivergedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Finite checks on the batch, every named module's forward output, every
/// loss part and every parameter gradient, plus memory, step time and loss
/// spikes.
///
/// Note [Cheap and localise monitors]: in cheap mode each check only queues a
/// device-side `!isfinite(x.sum(float32))` flag (one reduction, no full-size
/// temporary), and gradients are checked through the norms the trainer
/// computes anyway (only a flagged step looks at the gradients one by one);
/// the flags are read with a single synchronisation per step, before the
/// optimizer step (so a non-finite gradient never reaches the weights). The first flagged site in execution
/// order (batch → modules in forward order → loss parts → gradients in
/// backward order) is the one the failure is attributed to. Localise mode
/// synchronises after every check and records the offending tensor's
/// statistics, its first bad index and the statistics of the module output
/// that fed it; it is meant for replays of a failing step.
class Monitors : public model::TrainerListener, public model::ModuleObserver {
 public:
  enum class Mode { kOff, kCheap, kLocalise };
  Monitors(Mode mode, EventWriter& events, double loss_spike_factor);

  void set_run(int64_t run) { run_ = run; }
  const std::string& last_module() const { return last_module_; }
  /// Samples memory at each phase of a step (data, forward, backward,
  /// optimizer) with `probe`.
  void set_memory_probe(std::function<nlohmann::json()> probe) { memory_probe_ = std::move(probe); }
  /// The current step's memory per phase, as far as it got.
  const nlohmann::json& phase_memory() const { return phases_; }
  /// The batch of the current (or last) step, kept by reference.
  const model::Batch& last_batch() const { return last_batch_; }
  void on_forward(int64_t step, model::DbNetOutput& out) override;

  // ModuleObserver
  void on_enter(const std::string& name) override;
  void on_output(const std::string& name, torch::Tensor& output) override;

  // TrainerListener
  void on_step_begin(int64_t step) override;
  void on_batch(int64_t step, model::Batch& batch) override;
  void on_loss(int64_t step, model::DbLossParts& loss) override;
  void on_before_optimizer(int64_t step, model::DbNet& model) override;
  void on_grad_norms(int64_t step, const torch::Tensor& norms) override;
  void on_step_end(int64_t step, const model::StepResult& result) override;

 private:
  struct Site {
    std::string kind;  // input | label | activation | loss | gradient
    std::string name;  // tensor, module or parameter name
    std::string module;
  };
  void check(const Site& site, const torch::Tensor& t);
  void flush(int64_t step);
  nlohmann::json stats(const torch::Tensor& t) const;

  Mode mode_;
  EventWriter& events_;
  double spike_factor_;
  int64_t run_ = 0;
  int64_t step_ = 0;
  std::string last_module_;
  std::vector<Site> sites_;
  std::vector<torch::Tensor> flags_;
  /// Cheap mode: this step's gradients in backward order, checked one by one
  /// only when their norms flag something (the norms are the trainer's, so
  /// the healthy path adds no pass over the gradients).
  std::vector<std::pair<std::string, torch::Tensor>> grads_;
  nlohmann::json last_good_output_;  // localise: stats of the last finite module output
  std::string last_good_module_;
  std::vector<double> losses_;
  double last_heartbeat_ = 0;
  std::function<nlohmann::json()> memory_probe_;
  nlohmann::json phases_ = nlohmann::json::object();
  model::Batch last_batch_;
  void sample(const char* phase);
};

Monitors::Mode monitor_mode_from_string(const std::string& s);

/// Resident set size of this process, and its peak, in bytes.
int64_t current_rss_bytes();
int64_t peak_rss_bytes();

}  // namespace dbh::harness

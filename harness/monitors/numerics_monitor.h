#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "harness/proto/event_types.h"
#include "model/nn/hooks.h"
#include "model/train/trainer.h"

namespace dbh::harness::monitors {

/// monitors.numerics (Note [A numerics reference] in
/// harness/numerics/reference.h): every observed module's mean absolute
/// forward output and the L2 norm of its parameters' gradients at every step,
/// for `step_end.numerics`. The reductions are queued on the device as the
/// step runs and read with one copy at its end; with accumulation a module's
/// output is the last micro-batch's. Installed after the fault injector in
/// the observer chain, so an output a fault changed is the one measured.
class NumericsMonitor : public model::TrainerListener, public model::ModuleObserver {
 public:
  /// monitors.numerics_jitter: in trial `trial` > 0 every observed module's
  /// output gets `jitter` times its mean absolute value times a standard
  /// normal pattern (drawn from a generator seeded by the trial) added, as
  /// rounding that differs in the last digits does at every layer; trial 0
  /// trains unchanged. A pattern, not a constant: batch norm removes an
  /// offset or a scale of its input.
  NumericsMonitor(double jitter = 0, int64_t trial = 0);
  // ModuleObserver
  void on_enter(const std::string&) override {}
  void on_output(const std::string& name, torch::Tensor& output) override;

  // TrainerListener
  void on_step_begin(int64_t step) override;
  void on_before_optimizer(int64_t step, model::DbNet& model) override;
  void on_step_end(int64_t step, const model::StepResult& result) override;

  /// The last step's numbers, in forward order (a module with gradients but
  /// no output seen after them).
  const std::vector<proto::ModuleNumbers>& numbers() const { return numbers_; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> acts_;   // per module: mean |output|, float32 scalar
  std::vector<std::pair<std::string, torch::Tensor>> grads_;  // per module: sum of squared gradients
  std::vector<proto::ModuleNumbers> numbers_;
  double jitter_ = 0;
  at::Generator generator_;
};

}  // namespace dbh::harness::monitors

#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/choices.h"
#include "model/data/batch.h"
#include "model/dbnet.h"
#include "model/loss/db_loss.h"
#include "model/train/determinism.h"

namespace dbh::model {

struct TrainOptions {
  TORCH_ARG(OptimizerKind, optimizer) = OptimizerKind::kSgd;
  /// Base learning rate; the released DB configs use 0.007 with SGD.
  TORCH_ARG(double, lr) = 0.007;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 1e-4;
  /// Poly schedule: lr · (1 − step / max_steps)^power.
  TORCH_ARG(double, poly_power) = 0.9;
  TORCH_ARG(int64_t, max_steps) = 10;
  /// Micro-batches per optimizer step; the loss of each is divided by it.
  TORCH_ARG(int64_t, accumulation) = 1;
  /// Max global gradient norm; 0 disables clipping.
  TORCH_ARG(double, grad_clip) = 0.0;
  TORCH_ARG(Precision, precision) = Precision::kFp32;
  /// Keeps 4-D weights and the input image channels-last (NHWC): oneDNN on
  /// the CPU and cuDNN's tensor-core kernels run faster on it (about 12 %
  /// per step for ResNet-18 on the CPU, tests/bench/results/README.md).
  TORCH_ARG(bool, channels_last) = true;
  TORCH_ARG(std::string, device) = "cpu";
  TORCH_ARG(DeterminismOptions, determinism) = {};
  TORCH_ARG(DbLossOptions, loss) = {};
  /// Initial loss scale for fp16 (PyTorch's GradScaler defaults).
  TORCH_ARG(double, init_scale) = 65536.0;
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

/// Dynamic loss scaling for fp16 training, as torch.amp.GradScaler does:
/// scale the loss, unscale gradients checking for inf/NaN, skip the optimizer
/// step when any was found, and back the scale off (×0.5) or grow it (×2 after
/// `growth_interval` clean steps).
class GradScaler {
 public:
  GradScaler(bool enabled, double init_scale, int64_t growth_interval,
             const torch::Device& device);
  bool enabled() const { return enabled_; }
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Unscales the gradients in place; returns true when all are finite.
  bool unscale(const std::vector<torch::Tensor>& params);
  /// Updates the scale after a step; call once per optimizer step.
  void update();
  double current_scale() const;
  /// State for checkpoints: {scale, growth_tracker}.
  std::vector<torch::Tensor> state() const { return {scale_, growth_tracker_}; }
  void load_state(const std::vector<torch::Tensor>& s);

 private:
  bool enabled_;
  int64_t growth_interval_;
  torch::Tensor scale_;           // [1] float32
  torch::Tensor growth_tracker_;  // [1] int32
  torch::Tensor found_inf_;       // [1] float32
};

/// What one optimizer step produced.
struct StepResult {
  int64_t step = 0;  // 0-based index of the step just taken
  double loss = 0, bce = 0, l1 = 0, dice = 0;  // averaged over micro-batches
  /// Bit pattern of the float32 total loss of the last micro-batch.
  uint32_t loss_bits = 0;
  /// Bit patterns of every micro-batch's float32 total loss, in order.
  std::vector<uint32_t> micro_loss_bits;
  /// Bit pattern of the float32 global gradient norm: differs when the
  /// backward pass does, even where every loss agrees.
  uint32_t grad_norm_bits = 0;
  double lr = 0;          // the rate the optimizer stepped with (after listeners)
  double grad_norm = 0;  // global L2 norm before clipping (after unscaling)
  bool skipped = false;  // optimizer step skipped (fp16 overflow)
  double loss_scale = 1;
  double seconds = 0;
  int64_t samples = 0;
};

/// Observes (and, for fault injection, may modify) each stage of a step.
/// Methods are called in the order declared; the base does nothing.
class TrainerListener {
 public:
  virtual ~TrainerListener() = default;
  virtual void on_step_begin(int64_t step) {}
  virtual void on_batch(int64_t step, Batch& batch) {}
  virtual void on_forward(int64_t step, DbNetOutput& out) {}
  virtual void on_loss(int64_t step, DbLossParts& loss) {}
  virtual void on_before_optimizer(int64_t step, DbNet& model) {}
  /// After on_before_optimizer, before clipping and the optimizer step:
  /// `norms` [P] float32 holds the L2 norm of every defined gradient, in
  /// model->parameters() order (undefined when no gradient is). A norm is
  /// non-finite when its gradient is (or when a huge finite one overflows).
  virtual void on_grad_norms(int64_t step, const torch::Tensor& norms) {}
  virtual void on_step_end(int64_t step, const StepResult& result) {}
};

/// Supplies the micro-batch `micro` (0-based, global over the run) on the CPU.
using BatchSource = std::function<Batch(int64_t micro)>;

/// The DB training loop: SGD or Adam, poly learning rate, accumulation,
/// clipping, AMP on CUDA and checkpoints that resume bit-identically on CPU.
class Trainer {
 public:
  Trainer(DbNet model, const TrainOptions& options);

  /// Takes one optimizer step using `accumulation` micro-batches.
  StepResult step(const BatchSource& source);
  /// Steps until max_steps; returns every step's result.
  std::vector<StepResult> fit(const BatchSource& source);

  /// Writes model, optimizer, loss scaler, step and RNG state atomically
  /// (temporary file + rename).
  void save_checkpoint(const std::string& path) const;
  void load_checkpoint(const std::string& path);

  int64_t next_step() const { return step_; }
  double lr_at(int64_t step) const;
  const torch::Device& device() const { return device_; }
  DbNet& model() { return model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const TrainOptions& options() const { return options_; }
  /// Adds a listener, called in the order added. Not owned: it must outlive
  /// the trainer's steps.
  void add_listener(TrainerListener& listener);

 private:
  /// Channels-last parameters when the options ask for them.
  void apply_memory_format();
  DbNet model_;
  TrainOptions options_;
  torch::Device device_;
  DbLoss loss_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  GradScaler scaler_;
  std::vector<TrainerListener*> listeners_;
  int64_t step_ = 0;
};

}  // namespace dbh::model

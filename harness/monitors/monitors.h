#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harness/common/running_median.h"
#include "harness/monitors/silent_judge.h"
#include "harness/proto/event_writer.h"
#include "harness/scenario/scenario.h"
#include "model/nn/hooks.h"
#include "model/train/trainer.h"

namespace dbh::harness::monitors {

/// Thrown by the monitors to stop a run whose tensors turned non-finite; the
/// health events describing it have been emitted already.
class DivergedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown by the silent-failure monitors to stop a run that stays finite but
/// cannot learn (black input, labels without text, collapsed predictions);
/// the health event describing it has been emitted already.
class SilentFailureError : public std::runtime_error {
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
///
/// Note [Silent-failure monitors]: beside the finite checks, each batch queues
/// a few reductions with no temporary larger than B·(H+W) per sample (B
/// annotated words): per image and channel
/// the mean, minimum and maximum of the input, per sample the positive kernel
/// pixels of gt_shrink inside gt_shrink_mask (a dot product), in all, and
/// inside the annotated word boxes (two small matrix products), and the
/// minimum, maximum and mean of the probability map. They travel with the finite
/// flags in the same single copy to the host (cheap mode), so the step costs
/// no extra synchronisation; localise mode reads them with one more. From
/// them, in execution order: every image of the batch black or saturated once
/// de-normalised (`input_denormalised`); a sample whose annotations promise
/// legible words (Batch::words) with no positive kernel pixel inside the
/// training mask, or with most of its kernel pixels outside the boxes of
/// those words (Batch::word_boxes; a kernel always lies inside its word)
/// (`labels_degenerate`); the probability map entirely near 0
/// or near 1 for K consecutive steps with text to find, after a warm-up
/// (`predictions_collapsed`). Each emits one primary `health` event with its
/// evidence and stops the run with SilentFailureError. A finite failure in
/// the same step takes precedence.
class Monitors : public model::TrainerListener, public model::ModuleObserver {
 public:
  using Mode = scenario::MonitorMode;  // monitors.mode
  Monitors(Mode mode, proto::EventWriter& events, double loss_spike_factor, SilentOptions silent = {});

  void set_run(int64_t run) {
    run_ = run;
    judge_.new_run();  // every in-process run is judged on its own
    skip_streak_ = 0;
  }
  const std::string& last_module() const { return last_module_; }
  /// Samples memory at each phase of a step (data, forward, backward,
  /// optimizer) with `probe`.
  void set_memory_probe(std::function<nlohmann::json()> probe) { memory_probe_ = std::move(probe); }
  /// Training uses a dynamic loss scaler (fp16), so a step whose gradients
  /// overflow is skipped by the scaler, which lowers its scale: that is
  /// normal and not a failure. Only `skip_limit` skipped steps in a row are
  /// (Note [Loss-scaler skips]).
  void set_loss_scaler(bool active, int64_t skip_limit = kScalerSkipLimit) {
    scaler_ = active;
    scaler_skip_limit_ = skip_limit;
  }
  static constexpr int64_t kScalerSkipLimit = proto::kScalerSkipLimit;
  /// The current step's memory per phase, as far as it got.
  const nlohmann::json& phase_memory() const { return phases_; }
  /// The batch of the current (or last) step, kept by reference.
  const model::Batch& last_batch() const { return last_batch_; }
  /// What the silent-failure monitors read in the last step (de-normalised
  /// input mean/min/max, positive kernel pixels inside the training mask,
  /// probability min/max/mean); empty when they are off.
  const nlohmann::json& silent_stats() const { return judge_.stats(); }
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
  /// What a finite check looked at. kAllGradients stands for every gradient
  /// at once (cheap mode's one norm per step), expanded to the gradient sites
  /// when it is flagged.
  enum class SiteKind { kInput, kLabel, kActivation, kLoss, kGradient, kAllGradients };
  /// The kind as a `health` event names it (kAllGradients is "gradient").
  static std::string to_string(SiteKind kind);
  struct Site {
    SiteKind kind = SiteKind::kActivation;
    std::string name;  // tensor, module or parameter name
    std::string module;
  };
  void check(const Site& site, const torch::Tensor& t);
  /// The primary `health` event of a finite check that failed at `site`.
  proto::Health finite_failure(const Site& site, int64_t step, const char* mode) const;
  void flush(int64_t step);
  bool silent_on() const { return mode_ != Mode::kOff && (silent_.input || silent_.labels || silent_.predictions); }
  /// The silent reductions of this step, flattened, in queue order.
  std::vector<torch::Tensor> silent_parts() const;
  /// Judges this step's silent reductions (`values` as read on the host,
  /// laid out as silent_parts); throws SilentFailureError on a finding.
  void judge_silent(int64_t step, const float* values);
  /// Emits `finding` as the primary `health` event and throws SilentFailureError.
  [[noreturn]] void silent_failure(int64_t step, SilentFinding finding);
  nlohmann::json stats(const torch::Tensor& t) const;

  Mode mode_;
  proto::EventWriter& events_;
  double spike_factor_;
  int64_t run_ = 0;
  int64_t step_ = 0;
  std::string last_module_;
  std::vector<Site> sites_;
  /// Cheap mode: one float32 sum per site in sites_, non-finite when the
  /// site is; flush() tests them together.
  std::vector<torch::Tensor> sums_;
  /// Cheap mode: this step's gradients in backward order, checked one by one
  /// only when their norms flag something (the norms are the trainer's, so
  /// the healthy path adds no pass over the gradients).
  std::vector<std::pair<std::string, torch::Tensor>> grads_;
  bool scaler_ = false;
  int64_t scaler_skip_limit_ = kScalerSkipLimit;
  int64_t skip_streak_ = 0;        // skipped steps in a row, ending at the last step
  int64_t skip_streak_start_ = -1;  // the first step of the streak
  nlohmann::json skip_streak_first_;  // the first non-finite gradient of the streak
  void clear_last_good();
  nlohmann::json last_good_output_;  // localise: stats of the last finite module output
  std::string last_good_module_;
  RunningMedian losses_;  // every finite loss so far
  double last_heartbeat_ = 0;
  std::function<nlohmann::json()> memory_probe_;
  nlohmann::json phases_ = nlohmann::json::object();
  model::Batch last_batch_;
  void sample(const char* phase);

  SilentOptions silent_;
  // This step's queued silent reductions, one entry per micro-batch.
  std::vector<torch::Tensor> silent_input_;   // [N, 3, 3]: de-normalised mean, min, max per image and channel
  std::vector<torch::Tensor> silent_labels_;  // [3, N]: kernel pixels inside the training mask, in all, in word boxes
  std::vector<torch::Tensor> silent_probs_;   // [3]: probability min, max, mean
  std::vector<int64_t> words_;                // per sample of the step; -1 when unknown
  std::vector<std::string> ids_;              // per sample of the step
  SilentJudge judge_;                         // judges the silent reductions, step by step
};

/// Resident set size of this process, and its peak, in bytes.
int64_t current_rss_bytes();
int64_t peak_rss_bytes();

}  // namespace dbh::harness::monitors

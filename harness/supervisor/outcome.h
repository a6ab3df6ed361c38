#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/kb/knowledge_base.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness::supervisor {

// Outcome, its names and outcome_from_string are declared with the
// scenario's expectation (scenario/scenario.h), which names one.

/// Whether the outcome is a failure of the training (lit's isFailure).
bool is_failure(scenario::Outcome o);

/// What went wrong and where, from what the monitors and the event stream
/// observed (never from the fault schedule).
struct Failure {
  std::string klass;                  // knowledge-base class, "" when passed
  std::optional<int64_t> step;
  std::optional<int64_t> run;
  std::string module;
  std::string message;
  std::vector<std::string> evidence;  // human-readable facts that decided it
  std::vector<std::string> secondary;  // later errors (e.g. teardown)
};

/// Whether failure class `klass` means memory ran out: the host's, the
/// device's, or cuDNN's workspace (no engine fits).
bool is_memory_exhaustion(const std::string& klass);

/// The class of a finite loss that exploded (Note [A loss that explodes has
/// diverged], harness/supervisor/passed_run.cc).
inline constexpr const char* kLossExploded = "loss_exploded";

/// Whether failure class `klass` is a divergence of the training's numbers:
/// a non-finite activation, gradient or loss, or a finite loss that
/// exploded (Note [A loss that explodes has diverged]). Non-finite inputs
/// and labels are the data's, not the training's.
bool is_divergence(const std::string& klass);

struct FaultRecord {
  std::string name;
  int64_t index = 0;
  bool fired = false;
  std::vector<int64_t> steps;
  std::string module;
  /// GPU faults: raised by the hardware (a kernel, the allocator) or only
  /// their error text (Note [Real GPU faults]); unset for other faults.
  std::optional<bool> real;
  std::string hardware_error;  // e.g. "cudaErrorLaunchFailure"
};

struct StepRecord {
  int64_t run = 0;
  int64_t step = 0;
  double loss = 0, lr = 0, seconds = 0;
  /// DBNet's loss parts and the gradient norm, when the worker measured them
  /// (an external worker may not: unset, never 0).
  std::optional<double> bce, l1, dice, grad_norm;
  uint32_t loss_bits = 0;
  std::vector<uint32_t> micro_loss_bits;  // every micro-batch's loss, in order
  std::optional<uint32_t> grad_norm_bits;
  int64_t rss_bytes = 0;
  int64_t peak_bytes = 0;  // step peak: CUDA allocated peak, else max RSS over the phases
  /// Memory per phase (data, forward, backward, optimizer): kept for a
  /// trial's first kMaxDetailedSteps steps; empty otherwise.
  nlohmann::json phases;
  bool skipped = false;    // the fp16 loss scaler skipped the optimizer step (overflowed gradients)
  double loss_scale = 1;   // the scale its gradients were computed at
  /// monitors.numerics: every observed module's numbers in forward order
  /// (kept for a trial's first kMaxDetailedSteps steps; empty otherwise).
  std::vector<proto::ModuleNumbers> modules;
};
inline constexpr size_t kMaxDetailedSteps = 2000;

/// One validation during training (an `eval` event).
struct EvalRecord {
  int64_t run = 0;
  int64_t step = 0;  // optimizer steps taken before the evaluation
  double precision = 0, recall = 0, hmean = 0;
  int64_t gt = 0, det = 0, matched = 0, images = 0;
  /// Mean over images of the probability map's mean and text fraction.
  double prob_mean = 0, text_fraction = 0;
  double seconds = 0;
  /// Detections the reference post-processing settings give on the same
  /// maps, when the scenario's settings differ from them; −1 otherwise.
  int64_t det_reference = -1;
  /// Note [A worker's own validation metrics]: whether the evaluation named
  /// an h-mean (dbh's own worker always does), and an external worker's own
  /// metrics by its names (at most 64, names cut to 200 bytes).
  bool has_hmean = true;
  std::vector<std::pair<std::string, double>> metrics;
};

/// A trial's result turned into values.
struct TrialAnalysis {
  scenario::Outcome outcome = scenario::Outcome::kUnresolved;
  Failure failure;
  int64_t steps_completed = 0;
  int64_t ops_steps = 0;  // of them, steps of `train.mode: ops` (a `step_end` with `ops`): no training
  int64_t peak_memory_bytes = 0;
  /// Whether any memory figure the worker reported was a count
  /// (peak_memory_bytes is then a measurement, else unknown).
  bool memory_known = false;
  /// Whether the worker reported CUDA allocator memory (a run that used a
  /// GPU); peak_memory_bytes is then the larger of that peak and host RSS.
  bool cuda_memory_seen = false;
  /// The largest peak of one step (the CUDA allocator's on a GPU, the
  /// process's on a CPU): what `dbh qualify` fits to a budget.
  int64_t max_step_peak_bytes = 0;
  bool done_seen = false;
  int term_signal = 0;
  int exit_code = -1;
  double seconds = 0;
  std::vector<StepRecord> steps;
  std::vector<FaultRecord> faults;  // every scheduled fault, fired or not
  std::vector<std::string> run_checksums;
  /// At each run's end (Note [An unknown is no zero]: nullopt where the
  /// worker's figure was absent or no count).
  std::vector<std::optional<int64_t>> run_end_rss;
  std::vector<std::optional<int64_t>> run_end_cuda_allocated;  // CUDA only: allocator memory at each run's end
  std::vector<std::optional<int64_t>> run_end_cuda_reserved;
  std::vector<std::optional<int64_t>> run_begin_rss;
  /// Note [What a run leaves behind]: open files, threads and child
  /// processes at each run's end, when the worker reported them.
  std::vector<std::optional<int64_t>> run_end_open_files, run_end_threads, run_end_children;
  std::string scenario_hash;
  /// An external worker's `hello`: what it is, and its own stack (Python,
  /// torch, CUDA, cuDNN, Lightning, device), which the report shows.
  std::string worker;
  nlohmann::json worker_environment;
  /// What `hello` says the training ran with: `torch` (its version),
  /// `device`, `threads` (bounded strings), for a numerics reference's machine.
  nlohmann::json worker_facts = nlohmann::json::object();
  /// How this process computed (Note [Real differences measure the noise]):
  /// "as configured", "one intra-op thread", …; "" when no variant was asked.
  std::string numerics_variant;
  /// Note [A warm worker]: the process was forked from a warm worker; else
  /// why a trial that could have been started cold ("" when it could not).
  bool forked = false;
  std::string cold_reason;
  /// The monitors' primary finding (a `health` event), when there was one.
  nlohmann::json primary_health;
  /// Memory when the worker reported its error, and the phases it reached.
  nlohmann::json memory_at_failure;
  /// How the memory budget was enforced (the `memory_budget` event).
  nlohmann::json budget;
  /// Overlays of the failing batch written by the worker (file names under
  /// the trial's overlays/ folder).
  std::vector<std::string> overlays;
  /// The worker's `warning` events (e.g. weights that loaded partly), in order.
  std::vector<std::string> warnings;
  std::string memory_snapshot;  // CUDA allocator snapshot written on OOM ("" = none)
  /// Every thread's stack when the watchdog stopped the worker (Note [Stacks of a
  /// hung worker]): the tool, and the threads running dbh code (or the first).
  std::string stacks_tool;
  std::string stacks_excerpt;
  /// Validations during training, in order, and the evaluator self-check
  /// (h-mean of the ground truth scored as predictions; 1.0 when sound).
  std::vector<EvalRecord> evals;
  std::optional<double> evaluator_self_check;
  /// Scorable words of the validation set, when the worker said.
  std::optional<int64_t> validation_words;
  /// Overlays of the last validation's worst images (paths in the trial folder).
  std::vector<std::string> eval_overlays;
  /// The settings the supervisor measured for `auto` (Note [Measured
  /// choices]): resolve_measured_choices()'s record; null when none.
  nlohmann::json tuning;
  /// Sample ids per step, from `batch` events.
  std::vector<std::pair<int64_t, std::vector<std::string>>> batches;
  /// Note [Samples as the loader reads them]: what an external worker's
  /// dataset wrapper reported (`dataset`, `sample_read`): the training set's
  /// size, every index its loader read (sorted, each once; at most
  /// kMaxSamplesRead), names it gave (cut to kMaxSampleNameBytes, at most
  /// kMaxSamplesRead), and the first read that raised.
  std::optional<int64_t> dataset_size;
  std::vector<int64_t> samples_read;
  std::map<int64_t, std::string> sample_names;
  std::optional<int64_t> failed_sample;
  std::string failed_sample_error;
};

/// Bounds on what `sample_read` events may make the supervisor keep.
inline constexpr size_t kMaxSamplesRead = size_t{1} << 19;
/// Note [A claimed size is a claim]: the most samples a worker's dataset may
/// say it holds (a `dataset` event's size, a `sample_read` index) for dbh to
/// believe it; a larger claim leaves the size unknown (and says so), so no
/// index list is ever allocated from a number a worker made up.
inline constexpr int64_t kMaxDatasetSamples = int64_t{1} << 24;
inline constexpr size_t kMaxSampleNameBytes = 256;

/// Marks `a` skipped, not run on this machine for `why` (a device it lacks),
/// with the override that runs it on this machine's CPU.
void mark_not_run_here(TrialAnalysis& a, const scenario::Scenario& s, const std::string& why);

/// The steps of run 0 whose optimizer step the fp16 loss scaler skipped
/// (Note [Loss-scaler skips]: a few are its normal work), in order.
std::vector<int64_t> scaler_skipped_steps(const TrialAnalysis& a);
/// What the report says of those steps after "Loss scaler (fp16):" ("" when
/// there are none).
std::string scaler_skips_text(const TrialAnalysis& a);

struct ClassifyOptions {
  /// Ignore `fault_fired` events when attributing (they still count as fired
  /// in the fault list). Attribution never reads them; this proves it.
  bool withhold_fault_records = false;
  /// Growth across in-process runs above this is a leak.
  int64_t leak_threshold_bytes = 32 * 1024 * 1024;
};

class EventDigester;  // harness/supervisor/event_digest.h

/// A trial's verdict: how its process ended (`result`) and what its events
/// said (`events`, fed as they arrived), judged against the scenario.
TrialAnalysis classify(const TrialResult& result, const EventDigester& events, const scenario::Scenario& scenario,
                       const kb::KnowledgeBase& kb, const ClassifyOptions& options = {});

std::string signal_name(int sig);

/// Note [An injected failure says so]: the faults of `a` that fired, as the
/// words every output puts beside its failure ("the fault nan_gradient at
/// step 2 in head"; an emulated GPU fault adds that dbh raised the error's
/// text and no GPU kernel failed), joined by "; "; "" when none fired. A
/// failure a scenario planted is never read as the training's own, and an
/// emulated CUDA error never as what a GPU did.
std::string injected_faults(const TrialAnalysis& a);

/// What peak_memory_bytes measured, in words: "host RSS", or on a run that
/// used a GPU "the larger of the CUDA allocator peak and host RSS" (never a
/// CUDA label on a run that never reached a GPU: a skipped one).
std::string peak_memory_kind(const TrialAnalysis& a);

/// Whether a GPU fault of `a` fired emulated (its error text raised by dbh,
/// Note [Real GPU faults]): what followed says nothing about a GPU.
bool emulated_gpu_fault(const TrialAnalysis& a);

}  // namespace dbh::harness::supervisor

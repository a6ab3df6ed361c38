#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/events.h"

namespace dbh::harness::proto {

// One struct per event, with its codec: `to_json` gives the event's fields
// (without "type" and "t", which encode_event adds) and `<name>_from` reads
// them back from a decoded Event. The keys are spelled here and nowhere else.
//
// Reading is lenient, as a reader of a newer or damaged worker's stream must
// be: a missing, null or mistyped field keeps the struct's default, and fields
// a struct does not know are ignored (Health keeps them in `extra`). Optional
// fields (std::optional, or a null json) are written only when set, so every
// event keeps exactly the keys it had before it was typed.

/// `hello`: the worker's first event.
struct Hello {
  static constexpr const char* kType = event::kHello;
  int64_t schema_version = kEventSchemaVersion;
  int64_t pid = 0;
  uint64_t seed = 0;
  std::string scenario_hash, scenario;
  int64_t trial = 0;
  std::string git, dbh_version, torch_version, device;
  int64_t threads = 0;
  /// An external worker (docs/worker-protocol.md): its name and version, the
  /// capabilities it serves and the dotted names of its model's modules.
  /// Written when set; the built-in worker writes none of them.
  std::optional<std::string> worker;
  std::optional<std::vector<std::string>> capabilities;
  std::optional<std::vector<std::string>> modules;
  /// An external worker's own stack (written when not null): `python`,
  /// `torch`, `cuda`, `cudnn`, `lightning`, `device`, `device_name`; the
  /// report's Environment shows it instead of dbh's LibTorch.
  nlohmann::json environment;
  /// An external worker's own composed configuration (written when not
  /// null): an object of the user's dotted keys and their values, as the
  /// training read them (`dbh scenario from-command --external` maps dbh's
  /// keys to them by what they hold).
  nlohmann::json config;
  /// An external worker's command-line parser (written when not null): a
  /// list of {dest, strings, kind, nargs}, kind one of `value`, `on`, `off`,
  /// `positional` (docs/worker-protocol.md, "The command's syntax").
  nlohmann::json options;
};
nlohmann::json to_json(const Hello& e);
Hello hello_from(const Event& e);

/// Note [One flattening of a worker's configuration]: `hello`'s `config`
/// may be flat (`{"optim.lr": 0.1}`, the adapter's) or nested (`{"optim":
/// {"lr": 0.1}}`, a worker's own); dbh reads it one way everywhere, so that
/// the keys from-command maps and the keys a trial confirms (Note [Keys a
/// worker confirms]) are the same keys: nested objects as dotted keys (a key
/// reached both ways is kept both times, in order), scalars and lists whose
/// text is at most kMaxConfigValueBytes kept as sent (keys and values are
/// never escaped here: that is for output), null and longer values left out.
/// At most kMaxConfigKeys entries; `cut` says that more were left out.
inline constexpr size_t kMaxConfigKeys = 4096;
inline constexpr size_t kMaxConfigKeyBytes = 200;
inline constexpr size_t kMaxConfigValueBytes = 1000;
struct FlatConfig {
  std::vector<std::pair<std::string, nlohmann::json>> entries;
  bool cut = false;
  /// Every value held under `key`, in order (a flat and a nested spelling may
  /// both hold it).
  std::vector<const nlohmann::json*> find(const std::string& key) const;
};
FlatConfig flatten_config(const nlohmann::json& config);

/// `run_begin`: an in-process run starts.
struct RunBegin {
  static constexpr const char* kType = event::kRunBegin;
  int64_t run = 0;
  nlohmann::json memory;  // memory_json() of the worker: rss_bytes, peak_rss_bytes, cuda_*
};
nlohmann::json to_json(const RunBegin& e);
RunBegin run_begin_from(const Event& e);

/// `step_begin`: written before the step, so a crash is pinned to it.
struct StepBegin {
  static constexpr const char* kType = event::kStepBegin;
  int64_t run = 0, step = 0;
};
nlohmann::json to_json(const StepBegin& e);
StepBegin step_begin_from(const Event& e);

/// One observed module's numbers at a step (`step_end.numerics`, written
/// with monitors.numerics: Note [A numerics reference] in
/// harness/numerics/reference.h): the mean absolute value of its forward
/// output and the L2 norm of its parameters' gradients, each left out when
/// not measured (a module without parameters has no gradient).
struct ModuleNumbers {
  std::string module;
  std::optional<double> act, grad;
};
/// At most this many modules of one step are read; names are cut at
/// kMaxModuleNameBytes.
inline constexpr size_t kMaxNumericsModules = 512;
inline constexpr size_t kMaxModuleNameBytes = 200;

/// `step_end`: a step taken and its readings.
struct StepEnd {
  static constexpr const char* kType = event::kStepEnd;
  int64_t run = 0, step = 0;
  double loss = 0, seconds = 0;
  /// An `ops` mode step (no model): only run, step, loss and seconds are
  /// written (no `loss_bits`); the fields below are a trainer's.
  bool ops = false;
  /// DBNet's loss parts and the gradient norm: written when the worker
  /// measured them (dbh's worker always; an external worker's loss need not
  /// have the parts, and a value it did not measure is left out, never 0).
  std::optional<double> bce, l1, dice, grad_norm;
  std::optional<uint32_t> grad_norm_bits;
  double lr = 0;
  uint32_t loss_bits = 0;                 // float32 bit pattern of the last micro-batch's loss
  std::vector<uint32_t> micro_loss_bits;  // every micro-batch's, in order
  bool skipped = false;  // optimizer step skipped (fp16 overflow)
  double loss_scale = 1;
  int64_t samples = 0;
  nlohmann::json memory;  // memory_json(): rss_bytes, peak_rss_bytes, cuda_peak_allocated_bytes, …
  nlohmann::json phases;  // memory per phase (data, forward, backward, optimizer)
  nlohmann::json silent;  // the silent-failure monitors' statistics
  /// monitors.numerics: every observed module's numbers, in forward order
  /// (empty: not measured).
  std::vector<ModuleNumbers> numerics;
};
nlohmann::json to_json(const StepEnd& e);
StepEnd step_end_from(const Event& e);

/// `batch`: the sample ids a step trains on.
struct BatchSamples {
  static constexpr const char* kType = event::kBatch;
  int64_t run = 0, step = 0;
  std::vector<std::string> samples;
};
nlohmann::json to_json(const BatchSamples& e);
BatchSamples batch_from(const Event& e);

/// `dataset`: the training set an external worker's loader reads (the
/// adapter's dataset wrapper), by its size. Its indices are the worker's own
/// (Note [Samples as the loader reads them], bisect/bisect_data.cc).
struct DatasetInfo {
  static constexpr const char* kType = event::kDataset;
  int64_t size = 0;
};
nlohmann::json to_json(const DatasetInfo& e);
DatasetInfo dataset_info_from(const Event& e);

/// `sample_read`: one sample the training's loader read (in its worker
/// processes too), by its index in the worker's dataset; `error` when the
/// read raised, `name` when the worker can name the sample (a file).
struct SampleRead {
  static constexpr const char* kType = event::kSampleRead;
  int64_t index = -1;
  std::optional<std::string> name;
  std::optional<std::string> error;
};
nlohmann::json to_json(const SampleRead& e);
SampleRead sample_read_from(const Event& e);

/// `fault_fired`: an injected fault acted.
struct FaultFired {
  static constexpr const char* kType = event::kFaultFired;
  std::string fault;
  int64_t index = -1;  // in the scenario's fault list
  int64_t run = 0, step = -1;
  std::string module;     // written when not empty
  nlohmann::json detail;  // written when not null; `real`, `cuda_error` for GPU faults
};
nlohmann::json to_json(const FaultFired& e);
FaultFired fault_fired_from(const Event& e);

/// Note [Loss-scaler skips]: with fp16 a step whose gradients overflow is the
/// loss scaler's to skip (a `health` event of check `loss_scaler`, not
/// primary, and a `step_end` with `skipped`); this many skipped steps in a row
/// are a divergence, reported from the first. dbh's worker (monitors.h) and
/// the Python adapter (SCALER_SKIP_LIMIT) judge by it.
inline constexpr int64_t kScalerSkipLimit = 8;

/// `health`: a monitor's finding. `primary` marks the one that decides the
/// outcome; check-specific fields (`input_module`, `skipped_in_a_row`,
/// `median`, `prob_min`, …) travel in `extra`.
struct Health {
  static constexpr const char* kType = event::kHealth;
  int64_t run = 0, step = 0;
  std::string check, kind, site;
  std::optional<std::string> module, mode, message;
  std::optional<bool> primary;
  std::optional<std::vector<std::string>> evidence;
  nlohmann::json stats;            // the tensor's statistics (localise mode); written when not null
  nlohmann::json nonfinite_sites;  // non-finite sites per kind; written when not null
  nlohmann::json extra = nlohmann::json::object();  // every other field
};
nlohmann::json to_json(const Health& e);
Health health_from(const Event& e);

/// `heartbeat`: progress inside a long step.
struct Heartbeat {
  static constexpr const char* kType = event::kHeartbeat;
  int64_t run = 0, step = 0;
  std::string module;
};
nlohmann::json to_json(const Heartbeat& e);
Heartbeat heartbeat_from(const Event& e);

/// `checkpoint`: a checkpoint written (or, `resumed`, read).
struct Checkpoint {
  static constexpr const char* kType = event::kCheckpoint;
  int64_t run = 0, step = 0;
  std::string path;
  bool resumed = false;  // written when true
};
nlohmann::json to_json(const Checkpoint& e);
Checkpoint checkpoint_from(const Event& e);

/// Note [Checkpoint names]: a checkpoint of run `run` is
/// `checkpoint-r<run>-s<step>.pt`, `step` the step a resume continues at
/// (docs/worker-protocol.md): the worker, the Python adapter and `dbh
/// train`'s periodic checkpoints write it, bisection finds its replays'
/// starting points by it.
std::string checkpoint_file_name(int64_t run, int64_t step);
/// `state-s<step>.pt`: the parameters and buffers at the start of step
/// `step` (Note [The same state, step by step], harness/numerics/reference.h),
/// saved with monitors.numerics_save_states, replayed with
/// monitors.numerics_replay.
std::string state_file_name(int64_t step);
struct CheckpointName {
  int64_t run = 0, step = 0;
};
/// The run and step a file name (no folder) says; nullopt for another name.
std::optional<CheckpointName> parse_checkpoint_file_name(const std::string& name);

/// `eval`: one validation during training.
struct Eval {
  static constexpr const char* kType = event::kEval;
  int64_t run = 0, step = 0;
  /// dbh's three metrics; written when set (always by dbh's own worker; by
  /// an external worker when one of its metrics is named so).
  std::optional<double> precision, recall, hmean;
  int64_t gt = 0, det = 0, matched = 0, images = 0;
  double prob_mean = 0, text_fraction = 0;  // means over images of the probability map
  double seconds = 0;
  /// Detections of the reference post-processing settings, when the
  /// scenario's differ and found nothing; written when set.
  std::optional<int64_t> det_reference;
  /// An external worker's own validation metrics by its own names (written
  /// when not null): an object of names and finite numbers (Note [A worker's
  /// own validation metrics] in harness/supervisor/outcome.cc).
  nlohmann::json metrics;
};
nlohmann::json to_json(const Eval& e);
Eval eval_from(const Event& e);

/// `eval_check`: the evaluator scoring the ground truth itself (1.0 = sound).
struct EvalCheck {
  static constexpr const char* kType = event::kEvalCheck;
  double hmean = 0;
  int64_t images = 0;
  /// Scorable (not don't-care) ground-truth words of the validation set; the
  /// self-check means nothing without one. Written when known.
  std::optional<int64_t> words;
};
nlohmann::json to_json(const EvalCheck& e);
EvalCheck eval_check_from(const Event& e);

/// `eval_overlays` (the worst validation images drawn) and `overlays` (the
/// failing batch drawn): files relative to the run folder.
struct Overlays {
  static constexpr const char* kType = event::kOverlays;
  int64_t run = 0, step = 0;
  std::vector<std::string> files;
};
struct EvalOverlays : Overlays {
  static constexpr const char* kType = event::kEvalOverlays;
};
nlohmann::json to_json(const Overlays& e);
Overlays overlays_from(const Event& e);  // either type

/// `run_end`: an in-process run finished.
struct RunEnd {
  static constexpr const char* kType = event::kRunEnd;
  int64_t run = 0, steps = 0;
  std::string checksum;   // of the parameters, hex
  nlohmann::json memory;  // memory_json()
  /// What else a run may leave behind (written when not null; an external
  /// worker's): `open_files`, `threads`, `children` of the process.
  nlohmann::json resources;
};
nlohmann::json to_json(const RunEnd& e);
RunEnd run_end_from(const Event& e);

/// `warning`: something the run survives (a skipped sample, …).
struct Warning {
  static constexpr const char* kType = event::kWarning;
  std::string message;
};
nlohmann::json to_json(const Warning& e);
Warning warning_from(const Event& e);

/// The kinds of `error` events.
namespace error_kind {
inline constexpr const char* kHarness = "harness";  // a bad resolved scenario: no run, no step
inline constexpr const char* kDiverged = "diverged";
inline constexpr const char* kSilent = "silent";  // finite but not learning
inline constexpr const char* kData = "data";
inline constexpr const char* kException = "exception";
// The machine lacks what the run needs (its device): not tried, not failed.
inline constexpr const char* kUnavailable = "unavailable";
}  // namespace error_kind

/// `error`: what stopped the run. `kind` is one of error_kind; a harness
/// error (bad resolved scenario) has no run or step.
struct WorkerError {
  static constexpr const char* kType = event::kError;
  std::string kind, message;
  std::optional<int64_t> run, step;  // step −1: before training
  std::optional<std::string> phase, backtrace, module;
  nlohmann::json memory, phases;  // written when not null
};
nlohmann::json to_json(const WorkerError& e);
WorkerError error_from(const Event& e);

/// `memory_snapshot`: the CUDA allocator's snapshot written on OOM.
struct MemorySnapshot {
  static constexpr const char* kType = event::kMemorySnapshot;
  int64_t run = 0, step = 0;
  std::string file;
};
nlohmann::json to_json(const MemorySnapshot& e);
MemorySnapshot memory_snapshot_from(const Event& e);

/// `done`: the worker's last event.
/// `tuning_progress`: the measuring worker timed one more step (warm-up
/// included) of the `total` its measurement takes (Note [No silent minute]).
struct TuningProgress {
  static constexpr const char* kType = event::kTuningProgress;
  int64_t done = 0, total = 0;
};
nlohmann::json to_json(const TuningProgress& e);
TuningProgress tuning_progress_from(const Event& e);

/// `tuning`: the measuring worker's result (`dbh __tune`, Note [Measured
/// choices] in supervisor/tuning.h): each candidate setting and its timed
/// training steps, or why nothing could be measured.
struct Tuning {
  static constexpr const char* kType = event::kTuning;
  struct Candidate {
    bool channels_last = false;
    int64_t threads = 0;
    std::vector<double> seconds;  // one per timed step, in the order taken
  };
  std::string device, precision;
  int64_t size = 0, batch = 0;
  std::vector<Candidate> candidates;
  /// Cores other processes kept busy beyond those the candidates left free,
  /// on average while timed (Note [A measurement to trust], tuning.h).
  std::optional<double> others_cores;
  /// Set when the worker stopped after its first warm-up step because the
  /// least measurement (every candidate warmed up and timed once) would
  /// take longer than its budget (Note [A measurement's budget], tuning.h):
  /// that step's seconds. `candidates` then carry no timings.
  std::optional<double> over_budget_step_seconds;
  /// Set with `over_budget_step_seconds` when the worker stopped before any
  /// full step: that step's seconds were then estimated, by pixels, from a
  /// warm batch-1 step at this size (Note [A measurement's budget]).
  std::optional<int64_t> over_budget_probe_size;
  std::optional<std::string> error;
};
nlohmann::json to_json(const Tuning& e);
Tuning tuning_from(const Event& e);

struct Done {
  static constexpr const char* kType = event::kDone;
  std::string status;     // passed, diverged, failed, error
  nlohmann::json memory;  // written when not null
};
nlohmann::json to_json(const Done& e);
Done done_from(const Event& e);

/// One encoded line of a typed event (tests and tools; the worker goes
/// through EventWriter::emit).
template <typename E>
std::string encode(const E& e, double t) {
  return encode_event(E::kType, to_json(e), t);
}

}  // namespace dbh::harness::proto

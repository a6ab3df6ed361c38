#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "harness/common/value.h"
#include "model/choices.h"

namespace dbh::harness::scenario {

// Note [Fixed choices are enums]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A key with a fixed set of values is held as an enum from the moment it is
// decoded: the model's choices as the model declares them (model/choices.h),
// the harness's here. Its schema row (scenario/schema.cc, one_of) takes the
// enum's names in the enum's order, so reading, the resolved JSON and the
// docs write the names, and code compares enum values, never strings. An
// expectation's outcome is the supervisor's Outcome, declared here.

/// The training loop, or basic tensor operations on the device only (the
/// first rung of `dbh diagnose`).
enum class TrainMode { kTrain, kOps };
/// "train", "ops".
const std::vector<std::string>& train_mode_names();
const std::string& to_string(TrainMode mode);

/// The non-finite checks: flags synchronised once per step, module by module
/// with statistics, or none.
enum class MonitorMode { kCheap, kLocalise, kOff };
/// "cheap", "localise", "off".
const std::vector<std::string>& monitor_mode_names();
const std::string& to_string(MonitorMode mode);

/// Note [Real differences measure the noise] (harness/numerics/reference.h):
/// what a process of a numerics run changes about how the training computes,
/// never what it computes: as configured, one intra-op thread, another CPU
/// instruction set (ATEN_CPU_CAPABILITY), cuDNN's other choice of
/// algorithms; `by_process` gives process k of a repeat the k-th of
/// numerics_variants_for_processes() (the supervisor applies it).
enum class NumericsVariant { kAsIs, kOneThread, kInstructionSet, kCudnnAlgorithms, kByProcess };
/// "as_is", "one_thread", "instruction_set", "cudnn_algorithms", "by_process".
const std::vector<std::string>& numerics_variant_names();
const std::string& to_string(NumericsVariant v);

struct ModelConfig {
  int64_t encoder = 18;            // ResNet depth
  model::DecoderKind decoder = model::DecoderKind::kFpn;
  double k = 50.0;
  std::string weights;             // optional initial weights file
};

/// Where training data comes from (`data.source`): a dataset folder, or
/// images dbh makes (random pixels, boxes of text-like strokes, rendered
/// words).
enum class DataSource { kReal, kSyntheticRandom, kSyntheticBoxes, kSyntheticRender };
/// The names scenario files write, in the enum's order.
const std::vector<std::string>& data_source_names();
/// "real", "synthetic_random", "synthetic_boxes" or "synthetic_render".
const std::string& to_string(DataSource source);

struct DataConfig {
  DataSource source = DataSource::kSyntheticBoxes;
  std::string path;                // dataset folder for `real`
  int64_t batch_size = 2;
  int64_t size = 128;              // square, multiple of 32
  int64_t num_workers = 0;
  bool augment = false;
  model::OnInvalid on_invalid = model::OnInvalid::kError;
  bool validate = true;            // per-batch validation hook
  bool preflight = true;           // decode every image before training
  int64_t samples = 64;            // synthetic_render: rendered images in the dataset
  /// Train on these dataset indices only (bisect data); empty = all.
  std::vector<int64_t> subset;
  bool fixed_batch = false;  // Note [The first batch, repeated]: train on the first batch at every step
  /// Validation during training (train.eval_every): a real dataset, or the
  /// last `holdout` samples of the training dataset, held out of training.
  struct Validation {
    std::string path;            // dataset folder; "" = none
    int64_t holdout = 0;         // last N training samples; 0 = none
    int64_t size = 736;          // test-time size of the chosen side (multiple of 32)
    model::ResizeSide side = model::ResizeSide::kShort;  // which side becomes `size`
    int64_t batch_size = 1;
    double binarize_thresh = 0.3;
    double box_thresh = 0.7;
    double unclip_ratio = 1.5;
    int64_t overlays = 4;        // overlays of the worst images at the last evaluation
    bool enabled() const { return !path.empty() || holdout > 0; }
  } val;
};

struct TrainConfig {
  int64_t max_steps = 5;
  model::OptimizerKind optimizer = model::OptimizerKind::kSgd;
  double lr = 0.007;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  double poly_power = 0.9;
  int64_t accumulation = 1;
  double grad_clip = 0.0;
  model::Precision precision = model::Precision::kFp32;
  /// NHWC weights and input image; nullopt = auto, measured once per machine
  /// and setup (Note [Measured choices], supervisor/tuning.h).
  std::optional<bool> channels_last;
  uint64_t seed = 42;
  /// Intra-op threads: kAutoThreads = measured like channels_last, 0 = all
  /// cores, N.
  int64_t threads = kAutoThreads;
  static constexpr int64_t kAutoThreads = -1;
  int64_t checkpoint_every = 0;
  std::string resume_from;         // checkpoint to resume from (replays)
  /// Stop after this many steps (0 = max_steps) without changing the
  /// schedule, which still runs to max_steps (bisect steps).
  int64_t stop_after = 0;
  /// The step training stops after: stop_after when set, else max_steps.
  /// Every count of "steps to run" reads this one value.
  int64_t last_step() const { return stop_after > 0 && stop_after < max_steps ? stop_after : max_steps; }
  TrainMode mode = TrainMode::kTrain;
  /// Evaluate on data.val every K optimizer steps and after the last one
  /// (0 = never).
  int64_t eval_every = 0;
};

struct HardwareConfig {
  std::string device = "cpu";
  bool cudnn_enabled = true;
  bool cudnn_benchmark = false;
  bool cudnn_deterministic = false;
  bool allow_tf32 = false;
  int64_t memory_budget = 0;       // bytes; 0 = none
  std::string profile;             // hardware profile name
  bool launch_blocking = false;    // CUDA_LAUNCH_BLOCKING=1 in the worker
};

struct MonitorConfig {
  MonitorMode mode = MonitorMode::kCheap;
  double loss_spike_factor = 0.0;  // 0 = off
  /// Note [A loss that explodes has diverged]: a finite loss above this
  /// multiple of its run's first step's loss fails the run as diverged
  /// (`loss_exploded`); 0 = off.
  double loss_explosion_factor = 1000.0;
  /// Validation h-mean falling below this fraction of its best value
  /// (reached at >= 0.1) is a collapse; 0 = off.
  double hmean_collapse_ratio = 0.5;
  /// This many evaluations in a row with h-mean 0, the last one at the end of
  /// the run, is a failure; 0 = off.
  int64_t hmean_zero_after = 0;
  /// Silent-failure checks that are on (docs/scenarios.md, "Silent failures"): `input`
  /// (black or saturated), `labels` (without text, or off the words),
  /// `predictions` (collapsed), `learning` (loss not decreasing). `silent:
  /// true` (the default) turns all on, `false` none, a list those named;
  /// none runs with mode off.
  std::vector<std::string> silent = {"input", "labels", "predictions", "learning"};
  /// Every observed module's numbers at every step (`step_end.numerics`):
  /// what a numerics reference records and compares (Note [A numerics
  /// reference]). One more read from the device per step.
  bool numerics = false;
  /// With `numerics`: in trial k > 0 every observed module's output moves by
  /// this, relative, in a normal pattern of its own (trial 0 trains
  /// unchanged): a synthetic difference, for seeing how far one grows in this
  /// training (NumericsMonitor). Off by default: a numerics reference's noise
  /// comes from real differences (numerics_variant).
  double numerics_jitter = 0;
  /// How this process computes (Note [Real differences measure the noise]).
  NumericsVariant numerics_variant = NumericsVariant::kAsIs;
  /// Note [The same state, step by step]: save the parameters and buffers
  /// at the start of every step as `state-s<k>.pt` in the trial folder
  /// (run 0 only), for a numerics reference.
  bool numerics_save_states = false;
  /// Note [The same state, step by step]: a folder of `state-s<k>.pt`; at the
  /// start of every step k with one, the model's parameters and buffers are
  /// replaced by it, so each step computes from the recording's state.
  std::string numerics_replay;
  bool silent_check(const std::string& check) const {
    return mode != MonitorMode::kOff && std::find(silent.begin(), silent.end(), check) != silent.end();
  }
  /// Predictions collapsed: after `collapse_after` warm-up steps, the
  /// probability map entirely below `collapse_margin` (or entirely above
  /// 1 − collapse_margin) for `collapse_steps` consecutive steps whose labels
  /// hold text.
  int64_t collapse_after = 10;
  int64_t collapse_steps = 5;
  double collapse_margin = 0.02;
  /// Loss not decreasing: over the first `learning_window` steps of a run,
  /// the mean loss of the second half must lie below the first half's by at
  /// least `learning_min_drop` (relative). -1 (`auto`): min(50, max_steps/2)
  /// for runs of at least 40 steps that start from scratch (no
  /// model.weights, no train.resume_from), else off; 0: off. A run with
  /// fewer steps than the window is not judged.
  int64_t learning_window = kAutoLearningWindow;
  static constexpr int64_t kAutoLearningWindow = -1;
  double learning_min_drop = 0.05;
};

/// One parameter of a fault as decoded: its text as the scenario wrote it
/// (or its default), which the resolved JSON and an external worker receive,
/// and its value as the parameter's type (scenario/fault_catalog.h,
/// ParamType) reads it: an integer or a byte size as int64_t, a number as
/// double, a flag as bool, a string or module name as the text.
struct FaultParam {
  std::string text;
  std::variant<int64_t, double, bool, std::string> value;
};

/// One scheduled fault with its parameters (defaults filled in), decoded
/// once: a getter returns the typed value, and asking for a parameter as
/// another type than its own is a logic_error (a fault's code and its
/// catalog entry disagree), not a silent zero.
struct FaultConfig {
  std::string name;
  int64_t at_step = 0;
  int64_t until_step = 0;
  int64_t run = -1;
  std::map<std::string, FaultParam> params;
  Location loc;
  /// A parameter the fault does not set (no default, not written) reads as
  /// 0, 0.0, false or ""; a name its catalog entry does not declare (a
  /// misspelt "factr") is a logic_error, never 0.
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  int64_t get_bytes(const std::string& key) const { return get_int(key); }
  /// The parameter's text as written, of any type ("" when not set).
  const std::string& get(const std::string& key) const;
  /// The module the fault names; "" when it names none (or has no `module`).
  const std::string& module() const;
  bool fires_at(int64_t step, int64_t run_index) const;
};

struct RepeatConfig {
  int64_t in_process = 1;
  int64_t processes = 1;
};

/// Which program trains (docs/worker-protocol.md): dbh's own worker, or the
/// user's training command speaking the worker protocol (the Python adapter).
/// How the user's command takes a key of its configuration that
/// worker.written_as does not spell otherwise (Note [A command's own syntax]
/// in command_syntax.h): Hydra's `key=value` words, options `--key value`
/// (argparse, jsonargparse and LightningCLI's `--model.lr 0.1`), or
/// `key=value` words after one option (worker.syntax_option: PaddleOCR's
/// `-o`, mmocr's `--cfg-options`), or keys of the YAML/JSON file a word of
/// the command names (worker.syntax_option `@N`: MhLiao/DB's experiment
/// file), set in a copy.
enum class CommandSyntax { kKeyValue, kFlags, kOption, kFile };
/// "key_value", "flags", "option", "file".
const std::vector<std::string>& command_syntax_names();
const std::string& to_string(CommandSyntax syntax);

struct WorkerConfig {
  /// The user's command as an argv list; empty = dbh's built-in worker.
  std::vector<std::string> command;
  /// How the command takes a key (worker.syntax, worker.syntax_option).
  CommandSyntax syntax = CommandSyntax::kKeyValue;
  std::string syntax_option;
  /// A key of the user's configuration -> how the command writes it, where
  /// the syntax alone does not say (an option's strings, a switch, a word
  /// of the command, a key of a config file the command names): parsed by
  /// parse_argument_place (command_syntax.h).
  std::map<std::string, std::string> written_as;
  /// Its working directory; "" = the folder of the scenario file.
  std::string cwd;
  /// Variables added to its environment.
  std::map<std::string, std::string> env;
  /// dbh key -> the key of the user's configuration it reaches the command
  /// as (`key=value`, Hydra's override form); "" = not passed. Entries here
  /// replace or extend the Lightning/Hydra alias table's (worker_contract.h).
  std::map<std::string, std::string> keys;
  /// Keys of the user's own configuration that dbh does not know, set by an
  /// override (`arch.width=64`), passed to the command as `key=value` after
  /// dbh's keys (Note [The user's own names] in load.cc).
  std::map<std::string, std::string> overrides;
  bool external() const { return !command.empty(); }
};

struct LimitsConfig {
  double deadline_s = 600;
  double silence_s = 120;
  double grace_s = 5;
};

/// How a trial ended, as lit and ctest name results (supervisor/outcome.h
/// classifies a trial; a scenario's `expect.outcome` names one).
enum class Outcome {
  kPassed,
  kFailed,            // the worker reported an error and stopped
  kCrashed,           // ended by a signal
  kTimedOut,          // killed at the wall-clock deadline
  kHung,              // killed by the silence watchdog
  kDiverged,          // monitors found non-finite tensors
  kNondeterministic,  // repeated processes disagree
  kLeaked,            // memory grew across in-process runs
  kSkipped,
  kUnresolved,  // the harness could not tell (its own bug)
};
/// "passed", "failed", …, "unresolved": the enum's names, in its order.
const std::vector<std::string>& outcome_names();
const std::string& to_string(Outcome o);
std::optional<Outcome> outcome_from_string(const std::string& s);

/// What a scenario expects; unset fields are not checked.
struct Expectation {
  Outcome outcome = Outcome::kPassed;
  std::optional<std::string> failure_class;
  std::optional<int64_t> step;
  std::optional<std::string> module;
  std::optional<bool> deterministic;
  std::optional<int64_t> max_peak_memory;
  std::optional<bool> data_dependent;
  /// The last validation's h-mean is at least this.
  std::optional<double> min_hmean;
  /// The loss fell by at least this fraction: the mean of the last fifth of
  /// the steps against the mean of the first fifth.
  std::optional<double> loss_drop;
};

/// Note [Probes on a cluster] (probe/cluster.h): where `--executor slurm`
/// runs this scenario's probes and qualify's trials, so that "will it train
/// on the 12 GB card?" names the 12 GB card's partition once, in the
/// scenario. The command line's --partition, --gpu-type and --time-limit
/// win; a local run reads none of them.
struct ClusterConfig {
  std::string partition;   // "" = the cluster's default
  std::string gpu_type;    // one GPU of this type per probe; "" = none asked for
  std::string time_limit;  // Slurm's forms (is_slurm_time); "" = the partition's
};

/// Whether `text` is a Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH,
/// D-HH:MM or D-HH:MM:SS (or "UNLIMITED").
bool is_slurm_time(const std::string& text);
/// Whether `text` can name a partition or GPU type: no spaces, commas,
/// colons or '=' (srun would read them as more than one name).
bool is_slurm_name(const std::string& text);

struct Scenario {
  std::string name;
  std::string description;
  std::string file;                 // the top-level file ("" for overrides only)
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  HardwareConfig hardware;
  MonitorConfig monitors;
  std::vector<FaultConfig> faults;
  RepeatConfig repeat;
  LimitsConfig limits;
  WorkerConfig worker;
  ClusterConfig cluster;
  Expectation expect;
  /// Control trials: override sets run beside the scenario (e.g. the same
  /// training on synthetic data) whose outcomes the report compares.
  std::vector<std::vector<std::string>> controls;
  std::vector<std::string> overrides;  // as given on the command line
  /// The scenario file and every file it includes, as load_scenario read them.
  std::vector<std::string> files;
  /// The fully resolved tree (includes merged, overrides applied, defaults
  /// filled in), saved with every result.
  Value resolved;
};

/// What a check of a scenario's model files found wrong: the key and what was
/// expected and found, as a ScenarioError says them.
struct InputFileProblem {
  std::string key;
  std::string expected;
  std::string got;
};

/// Checks of a scenario's inputs that only a layer above the scenario can
/// make: the harness core cannot read a checkpoint into a model, so the
/// caller that can passes the check in (worker/worker.h: input_checks()).
struct InputChecks {
  /// Whether the model files (model.weights, train.resume_from) fit the
  /// scenario's model and schedule; null: not checked.
  std::function<std::optional<InputFileProblem>(const Scenario&)> model_files;
};

/// The scenario file `path` and every file it includes, read but not
/// validated. Throws ScenarioError where the files or includes are bad.
std::vector<std::string> scenario_files(const std::string& path);

/// Whether the user override `text` (any form load_scenario accepts: a
/// dotted key, a Lightning/Hydra alias, `+key`, a map value) sets the dotted
/// `key`, e.g. "seed_everything=2" and "train={seed: 2}" set train.seed.
bool override_sets(const std::string& text, const std::string& key);

/// The overrides as load_scenario applies them to the scenario file `path`
/// (the user's own keys into worker.overrides, worker.keys' names and the
/// Lightning/Hydra aliases into dbh's keys): the part of the merged tree they
/// changed, so that a file of `include: path` and this layer is the scenario
/// with its overrides (diagnose's repro.yaml). Throws ScenarioError as
/// load_scenario does for a bad file or override.
Value override_layer(const std::string& path, const std::vector<std::string>& overrides);

/// Every file and folder `s` reads: its scenario files (s.files), datasets,
/// weights and checkpoint. dbh never writes into or over one of them.
std::vector<std::string> input_paths(const Scenario& s);

/// The dataset folders `s` reads (data.path, data.val.path; those set), which
/// no output or cache folder may lie in (check_outside_datasets).
std::vector<std::string> dataset_folders(const Scenario& s);

// Note [Decode, then check]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Reading a scenario is two steps. decode_scenario turns a merged tree into
// a Scenario: every key's type and bounds, defaults, the relations between
// keys, fault placements as far as the scenario alone says; it reads no
// file the scenario names. check_scenario_inputs then checks what the
// scenario reads: folders and files exist and are regular files, the
// dataset's annotations are usable and hold the sample indices the scenario
// names, checkpoints are checkpoints, and whatever the caller passes in
// (InputChecks). load_scenario does both, for commands reading a user's
// files; a child process (the worker, the measuring worker) receives a
// scenario its supervisor checked and decodes it only, so no dataset is
// scanned once per process.

/// Loads `path` (following `include:` lists, relative to the including file),
/// applies `overrides`, decodes it and checks its inputs with `checks`
/// (Note [Decode, then check]). Throws ScenarioError "file:line:col: key:
/// expected …, got …" (with "did you mean" for near-miss keys).
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {},
                       const InputChecks& checks = {});

/// The scenario an already merged tree describes, read from nothing else
/// (Note [Decode, then check]); `file` names it in messages and anchors its
/// relative paths. Throws ScenarioError.
Scenario decode_scenario(const Value& tree, const std::string& file);

/// Checks the inputs of `s`, decoded from `tree` (whose locations the errors
/// name): the files and folders it reads, the dataset's usability and size,
/// then `checks`. Throws ScenarioError.
void check_scenario_inputs(const Scenario& s, const Value& tree, const InputChecks& checks = {});

/// The resolved scenario as canonical JSON, and its stable 16-hex-digit hash.
std::string resolved_json(const Scenario& s);
std::string scenario_hash(const Scenario& s);

/// Parses sizes such as "512MiB", "12GB", "1.5GiB", "4096".
std::optional<int64_t> parse_bytes(const std::string& text);
std::string format_bytes(int64_t bytes);

/// Failure classes an expectation may name: the shipped knowledge base's,
/// plus "exception"; empty when no knowledge base is found.
std::vector<std::string> known_failure_classes();

/// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace dbh::harness::scenario

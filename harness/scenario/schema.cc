#include "harness/scenario/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "harness/common/error.h"
#include "harness/common/text.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Decimal only, as parse_int: strtod would also take hex ("0x1p3" = 8),
// leading blanks and the locale's decimal separator.
bool parse_double(const std::string& s, double* out) {
  const size_t from = !s.empty() && s[0] == '+' ? 1 : 0;
  if (s.size() <= from || (from == 1 && s[1] == '-')) return false;
  const auto r = std::from_chars(s.data() + from, s.data() + s.size(), *out, std::chars_format::general);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(*out);
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on") {
    *out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off") {
    *out = false;
    return true;
  }
  return false;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;
  for (const auto& k : known) {
    const size_t d = edit_distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best.empty() ? "" : " (did you mean \"" + best + "\"?)";
}

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? sep : "") + words[i];
  return out;
}

void fail(const Location& loc, const std::string& key, const std::string& expected, const std::string& got) {
  throw ScenarioError(loc.str() + ": " + key + ": expected " + expected + ", got " + got);
}

void fail_empty(const Value& x, const std::string& key, const std::string& expected) {
  fail(x.key_loc.line > 0 ? x.key_loc : x.loc, key, expected, "an empty value (remove the key to keep its default)");
}

std::string override_text(const std::string& key, const std::string& value) {
  return key + "=" + value;
}

namespace {

// The key "a.b.c" sets the member s.a.b.c of Scenario: the key's name and its
// field come from one spelling, the name checked as everywhere else a key is
// named (DBH_SCENARIO_KEY).
#define DBH_KEY(path) DBH_SCENARIO_KEY(path), [](Scenario& s) { return &s.path; }

template <typename T>
KeySpec make(const char* key, KeyType type, KeyField<T> field, const char* help) {
  KeySpec k;
  k.key = key;
  k.type = type;
  k.field = field;
  k.help = help;
  return k;
}

KeySpec integer(const char* key, KeyField<int64_t> field, int64_t lo, int64_t hi, const char* help) {
  KeySpec k = make(key, KeyType::kInt, field, help);
  k.lo = lo;
  k.hi = hi;
  return k;
}

KeySpec integer(const char* key, KeyField<uint64_t> field, int64_t lo, int64_t hi, const char* help) {
  KeySpec k = make(key, KeyType::kInt, field, help);
  k.lo = lo;
  k.hi = hi;
  return k;
}

// An integer in [lo, the value of `hi_key`].
KeySpec integer_up_to(const char* key, KeyField<int64_t> field, int64_t lo, const char* hi_key, const char* help) {
  KeySpec k = make(key, KeyType::kInt, field, help);
  k.lo = lo;
  k.hi_key = hi_key;
  return k;
}

KeySpec number(const char* key, KeyField<double> field, double min, double max, const char* help) {
  KeySpec k = make(key, KeyType::kNumber, field, help);
  k.min = min;
  k.max = max;
  return k;
}

// A number > min (rather than >= min) and <= max.
KeySpec number_above(const char* key, KeyField<double> field, double min, double max, const char* help) {
  KeySpec k = number(key, field, min, max, help);
  k.min_open = true;
  return k;
}

KeySpec boolean(const char* key, KeyField<bool> field, const char* help) {
  return make(key, KeyType::kBool, field, help);
}

// A key read only from a dataset, which a run on synthetic data does not read.
KeySpec real_data_only(KeySpec k) {
  k.real_data_only = true;
  return k;
}

// A key that configures CUDA or cuDNN, which a CPU run does not use.
KeySpec cuda_only(KeySpec k) {
  k.cuda_only = true;
  return k;
}

KeySpec text(const char* key, KeyField<std::string> field, const char* help) {
  return make(key, KeyType::kString, field, help);
}

// A fixed-choice key (Note [Fixed choices are enums]): `field` (a DBH_KEY
// lambda) returns the address of an enum member; `names` are the enum's
// values as written, in the enum's order.
template <typename Field>
KeySpec one_of(const char* key, Field field, const std::vector<std::string>& names, const char* help) {
  using T = std::remove_pointer_t<std::invoke_result_t<Field, Scenario&>>;
  static_assert(std::is_enum_v<T>, "a fixed-choice key's member is an enum");
  KeySpec k = make(key, KeyType::kEnum, KeyField<T>(field), help);
  k.allowed = names;
  return k;
}

KeySpec bytes(const char* key, KeyField<int64_t> field, const char* help) {
  return make(key, KeyType::kBytes, field, help);
}

KeySpec path(const char* key, KeyField<std::string> field, const char* help) {
  return make(key, KeyType::kPath, field, help);
}

KeySpec auto_bool(const char* key, KeyField<std::optional<bool>> field, const char* help) {
  return make(key, KeyType::kAutoBool, field, help);
}

KeySpec auto_int(const char* key, KeyField<int64_t> field, int64_t auto_value, int64_t lo, int64_t hi,
                 const char* expected, const char* help) {
  KeySpec k = make(key, KeyType::kAutoInt, field, help);
  k.auto_value = auto_value;
  k.lo = lo;
  k.hi = hi;
  k.expected = expected;
  return k;
}

KeySpec encoder(const char* key, KeyField<int64_t> field, std::vector<std::string> allowed, const char* help) {
  KeySpec k = make(key, KeyType::kEncoder, field, help);
  k.allowed = std::move(allowed);
  return k;
}

KeySpec checks(const char* key, KeyField<std::vector<std::string>> field, std::vector<std::string> allowed,
               const char* help) {
  KeySpec k = make(key, KeyType::kChecks, field, help);
  k.allowed = std::move(allowed);
  return k;
}

KeySpec indices(const char* key, KeyField<std::vector<int64_t>> field, const char* help) {
  return make(key, KeyType::kIndices, field, help);
}

KeySpec args(const char* key, KeyField<std::vector<std::string>> field, const char* help) {
  return make(key, KeyType::kArgs, field, help);
}

KeySpec string_map(const char* key, KeyField<std::map<std::string, std::string>> field, const char* help) {
  return make(key, KeyType::kStringMap, field, help);
}

std::vector<KeySpec> build_table() {
  constexpr int64_t kMax = INT64_MAX;
  return {
      encoder(DBH_KEY(model.encoder), {"resnet18", "resnet34", "resnet50"},
              "ResNet encoder, with torchvision's module names."),
      one_of(DBH_KEY(model.decoder), model::decoder_kind_names(),
             "The DB paper's FPN, or PANet-style path aggregation (docs/model.md)."),
      number_above(DBH_KEY(model.k), 0.0, 1e6, "Amplification of the approximate binarization sigmoid(k·(P − T))."),
      path(DBH_KEY(model.weights),
           "Initial weights: a LibTorch weights file or dbh checkpoint; empty = random initialisation."),

      one_of(DBH_KEY(data.source), data_source_names(),
             "Training data: the dataset folder `data.path`, random noise, drawn boxes or rendered words."),
      real_data_only(
          path(DBH_KEY(data.path), "Dataset folder (`annotations.json` and its images) when `data.source` is `real`.")),
      integer(DBH_KEY(data.batch_size), 1, 4096, "Images per micro-batch."),
      integer(DBH_KEY(data.size), 32, 8192, "Side of the square training images; a multiple of 32."),
      integer(DBH_KEY(data.num_workers), 0, 256, "Threads that prepare batches ahead; 0 prepares each inline."),
      boolean(DBH_KEY(data.augment), "DB's training augmentation; otherwise letterbox only."),
      one_of(DBH_KEY(data.on_invalid), model::on_invalid_names(),
             "An invalid annotation stops the run, drops its word, or is clamped (words still invalid are "
             "dropped)."),
      boolean(DBH_KEY(data.validate), "Check every batch (finite, in range, binary masks) before it trains."),
      boolean(DBH_KEY(data.preflight), "Decode every image of the dataset before training."),
      indices(DBH_KEY(data.subset), "Train on these dataset indices only (`dbh bisect data`); empty = all."),
      boolean(DBH_KEY(data.fixed_batch),
              "Train on the first batch at every step, as Lightning's `overfit_batches=1` (`dbh diagnose`'s "
              "fixed-batch rung: can the model fit one batch?)."),
      integer(DBH_KEY(data.samples), 1, 1000000, "Images of a `synthetic_render` dataset."),
      path(DBH_KEY(data.val.path), "Validation dataset folder; empty = none."),
      integer(DBH_KEY(data.val.holdout), 0, 1000000,
              "Validate on the last N samples of the `real` training dataset, held out of training; 0 = none."),
      integer(DBH_KEY(data.val.size), 32, 8192,
              "Validation: the size the chosen side is resized to; a multiple of 32."),
      one_of(DBH_KEY(data.val.side), model::resize_side_names(),
             "Validation: the side of each image resized to `size`."),
      integer(DBH_KEY(data.val.batch_size), 1, 1024, "Validation images per batch."),
      number(DBH_KEY(data.val.binarize_thresh), 0.0, 1.0, "Validation post-processing: threshold of the text map."),
      number(DBH_KEY(data.val.box_thresh), 0.0, 1.0, "Validation post-processing: least mean score of a box."),
      number(DBH_KEY(data.val.unclip_ratio), 0.0, 100.0, "Validation post-processing: how far boxes are expanded."),
      integer(DBH_KEY(data.val.overlays), 0, 1000, "Overlays of the worst images written at the last evaluation."),

      integer(DBH_KEY(train.max_steps), 1, 100000000, "Optimizer steps of a run; the schedule's length."),
      one_of(DBH_KEY(train.optimizer), model::optimizer_kind_names(), "Optimizer."),
      number_above(DBH_KEY(train.lr), 0.0, 1e6, "Initial learning rate, decayed by the poly schedule."),
      number(DBH_KEY(train.momentum), 0.0, 1.0, "SGD momentum."),
      number(DBH_KEY(train.weight_decay), 0.0, 1.0, "Weight decay."),
      number(DBH_KEY(train.poly_power), 0.0, 100.0, "Power of the poly learning-rate schedule."),
      integer(DBH_KEY(train.accumulation), 1, 4096, "Micro-batches per optimizer step."),
      number(DBH_KEY(train.grad_clip), 0.0, 1e12, "Clip the gradient norm to this; 0 = no clipping."),
      one_of(DBH_KEY(train.precision), model::precision_names(),
             "fp16 and bf16 (AMP) run on CUDA only (a `worker.command` training decides for itself)."),
      auto_bool(DBH_KEY(train.channels_last),
                "NHWC weights and input; `auto` is measured once per machine and setup (docs/model.md)."),
      integer(DBH_KEY(train.seed), 0, kMax, "Seed of every random choice of the run."),
      auto_int(DBH_KEY(train.threads), TrainConfig::kAutoThreads, 1, 1024,
               "auto, 0 (all cores) or a number of threads up to 1024",
               "Intra-op threads; `auto` is measured like `train.channels_last`."),
      integer(DBH_KEY(train.checkpoint_every), 0, kMax, "Write a checkpoint every K steps; 0 = never."),
      path(DBH_KEY(train.resume_from), "Checkpoint to resume from (its step, optimizer and RNG state); empty = none."),
      integer_up_to(DBH_KEY(train.stop_after), 0, "train.max_steps",
                    "Stop after this many steps, the schedule unchanged (`dbh bisect steps`); 0 = `max_steps`."),
      one_of(DBH_KEY(train.mode), train_mode_names(),
             "The training loop, or basic tensor operations on the device only (`dbh diagnose`)."),
      integer(DBH_KEY(train.eval_every), 0, kMax,
              "Evaluate on `data.val` every K steps and after the last; 0 = never. An external worker validates on "
              "its own data at its own cadence (`worker.keys` maps this key to it) and reports `eval` events."),

      text(DBH_KEY(hardware.device), "`cpu`, `cuda` or `cuda:N` (N a device index 0-63)."),
      cuda_only(boolean(DBH_KEY(hardware.cudnn_enabled), "Use cuDNN.")),
      cuda_only(boolean(DBH_KEY(hardware.cudnn_benchmark), "Let cuDNN time and pick convolution algorithms.")),
      cuda_only(boolean(DBH_KEY(hardware.cudnn_deterministic), "Deterministic cuDNN algorithms only.")),
      cuda_only(boolean(DBH_KEY(hardware.allow_tf32), "TF32 matrix multiplications and convolutions.")),
      bytes(DBH_KEY(hardware.memory_budget),
            "Memory the worker may use on its device; 0 = none, or the profile's memory."),
      text(DBH_KEY(hardware.profile),
           "Hardware profile (`dbh list profiles`) whose memory is the budget; empty = none."),
      cuda_only(boolean(DBH_KEY(hardware.launch_blocking), "Run the worker with `CUDA_LAUNCH_BLOCKING=1`.")),

      one_of(DBH_KEY(monitors.mode), monitor_mode_names(),
             "Non-finite checks: flags synchronised once per step, module by module with statistics, or none."),
      number(DBH_KEY(monitors.loss_spike_factor), 0.0, 1e12,
             "Report a loss above this multiple of the median loss so far; 0 = off."),
      number(DBH_KEY(monitors.loss_explosion_factor), 0.0, 1e12,
             "A finite loss above this multiple of its run's first step's loss has diverged (`loss_exploded`); "
             "0 = off."),
      number(DBH_KEY(monitors.hmean_collapse_ratio), 0.0, 1.0,
             "Validation h-mean below this fraction of its best (once at least 0.1) is a collapse; 0 = off."),
      integer(DBH_KEY(monitors.hmean_zero_after), 0, 1000000,
              "This many evaluations in a row with h-mean 0, up to the end of the run, fail it; 0 = off."),
      checks(DBH_KEY(monitors.silent), {"input", "labels", "predictions", "learning"},
             "Silent-failure checks that are on (docs/scenarios.md, \"Silent failures\"): `true` all, `false` none."),
      boolean(DBH_KEY(monitors.numerics),
              "Report every module's mean absolute output and gradient norm at every step (`dbh repeat --record`, "
              "`dbh qualify --reference`)."),
      number(DBH_KEY(monitors.numerics_jitter), 0.0, 1.0,
             "With `monitors.numerics`: in trial k > 0 every module's output moves by this, relative, in a normal "
             "pattern of its own (trial 0 unchanged): a synthetic difference, to see how far one grows; 0 = off "
             "(a numerics reference measures its noise from `monitors.numerics_variant`)."),
      one_of(DBH_KEY(monitors.numerics_variant), numerics_variant_names(),
             "How this process computes, to measure the noise from differences that really occur: as configured, "
             "one intra-op thread, another CPU instruction set (`ATEN_CPU_CAPABILITY`), cuDNN's other choice of "
             "algorithms (dbh's worker on CUDA); `by_process`: process k of `repeat.processes` the k-th of "
             "as_is, one_thread, instruction_set (cudnn_algorithms for the third on CUDA)."),
      boolean(DBH_KEY(monitors.numerics_save_states),
              "Save the parameters at the start of every step (`state-s<k>.pt` in the trial folder, run 0): what "
              "`dbh repeat --record` keeps for step-by-step replays."),
      path(DBH_KEY(monitors.numerics_replay),
           "A folder of `state-s<k>.pt`: every step with one starts from it, so the step computes from the "
           "recording's state (`dbh qualify --reference`); empty = none."),
      integer(DBH_KEY(monitors.collapse_after), 0, 100000000, "Predictions collapsed: warm-up steps before the check."),
      integer(DBH_KEY(monitors.collapse_steps), 1, 100000000,
              "Predictions collapsed: consecutive steps with text the map must stay collapsed; through the "
              "adapter also the run's first steps whose target map must all be empty for `labels_degenerate`."),
      number_above(DBH_KEY(monitors.collapse_margin), 0.0, 0.5,
                   "Predictions collapsed: the map lies entirely below this, or above 1 minus it."),
      auto_int(DBH_KEY(monitors.learning_window), MonitorConfig::kAutoLearningWindow, 4, 100000000,
               "auto, 0 (off) or a number of steps >= 4",
               "Not learning: steps judged; `auto` = min(50, max_steps/2) for runs of 40+ steps from scratch, else "
               "off."),
      number(DBH_KEY(monitors.learning_min_drop), 0.0, 1.0,
             "Not learning: the least relative drop of the mean loss from the window's first half to its second "
             "(raised to twice the drop's standard error, measured from the step-to-step spread, on a noisy loss)."),

      integer(DBH_KEY(repeat.in_process), 1, 1000, "Runs one after another in each worker process."),
      integer(DBH_KEY(repeat.processes), 1, 1000, "Worker processes, one after another."),

      number_above(DBH_KEY(limits.deadline_s), 0.0, 1e7, "Seconds a trial may take in all."),
      number_above(DBH_KEY(limits.silence_s), 0.0, 1e7, "Seconds without an event after which a worker is hung."),
      number(DBH_KEY(limits.grace_s), 0.0, 3600.0, "Seconds between TERM and KILL when a worker is stopped."),

      args(DBH_KEY(worker.command),
           "Your training command as a list (`[python, train.py, trainer.max_steps=10]`), speaking "
           "docs/worker-protocol.md; `[]` = dbh's built-in DBNet worker."),
      one_of(DBH_KEY(worker.syntax), command_syntax_names(),
             "How your command takes a key of its configuration: `key_value` (Hydra's `key=value`), `flags` "
             "(`--key value`: argparse, LightningCLI's `--model.lr 0.1`), `option` (`key=value` after "
             "`worker.syntax_option`: PaddleOCR's `-o`, mmocr's `--cfg-options`), `file` (a key of the YAML or JSON "
             "file the command's word `worker.syntax_option` names, `@N`, set in a copy). `worker.written_as` spells "
             "a key otherwise."),
      text(DBH_KEY(worker.syntax_option),
           "`worker.syntax: option`: the option before the `key=value` words (`-o`, `--cfg-options`); `file`: the "
           "command's word that names the file (`@2`)."),
      string_map(DBH_KEY(worker.written_as),
                 "Your configuration's key → how your command writes it, where `worker.syntax` does not: "
                 "`--batch-size|-b` (an option, its strings), `on:--amp` / `off:--no-shuffle` (a switch present "
                 "when the value is true / false), `@2` (the command's word 2, a positional argument), "
                 "`@1:optimizer.lr` (that key of the YAML or JSON file word 1 names: dbh passes a copy, your file "
                 "is never changed). `dbh scenario from-command --external` writes it."),
      path(DBH_KEY(worker.cwd), "The command's working directory; empty = the folder of the scenario file."),
      string_map(DBH_KEY(worker.env),
                 "Variables added to the command's environment (variable names; the `DBH_` names are dbh's)."),
      string_map(DBH_KEY(worker.keys),
                 "dbh key (of this table) → your configuration's key it is passed as (one word, in `worker.syntax` "
                 "or as `worker.written_as` spells it); `\"\"` = not passed; unset entries come from the "
                 "Lightning/Hydra alias table (docs/own-training.md)."),
      string_map(DBH_KEY(worker.overrides),
                 "Keys of your own configuration, passed to the command as dbh's keys are (`worker.syntax`); an "
                 "override of a key outside dbh's sections (`arch.width=64`) lands here."),

      text(DBH_KEY(cluster.partition),
           "`--executor slurm`: the partition that runs the probes and qualify's trials (the card this scenario "
           "asks about); `--partition` wins; empty = the cluster's default."),
      text(DBH_KEY(cluster.gpu_type),
           "`--executor slurm`: one GPU of this type per probe (`--gres=gpu:TYPE:1`); `--gpu-type` wins; empty = "
           "none asked for."),
      text(DBH_KEY(cluster.time_limit),
           "`--executor slurm`: each probe's time limit in Slurm's forms (MM, HH:MM:SS, D-HH, ...); `--time-limit` "
           "wins; empty = the partition's."),
  };
}

#undef DBH_KEY

template <typename T>
T& member(const KeySpec& k, Scenario& s) {
  return *std::get<KeyField<T>>(k.field)(s);
}

template <typename T>
const T& member(const KeySpec& k, const Scenario& s) {
  // The field only takes the member's address; nothing is written through it.
  return *std::get<KeyField<T>>(k.field)(const_cast<Scenario&>(s));
}

// A kEnum key's value as written: the name of its enum member's value (the
// value's index in `allowed`).
std::string enum_text(const KeySpec& k, const Scenario& s) {
  return std::visit(
      [&](auto field) -> std::string {
        using T = std::remove_pointer_t<decltype(field(std::declval<Scenario&>()))>;
        if constexpr (std::is_enum_v<T>) {
          return k.allowed.at(static_cast<size_t>(*field(const_cast<Scenario&>(s))));
        } else {
          throw std::logic_error(k.key + ": a fixed-choice key whose member is not an enum");
        }
      },
      k.field);
}

// Sets a kEnum key to its allowed value `index`.
void set_enum(const KeySpec& k, Scenario& s, size_t index) {
  std::visit(
      [&](auto field) {
        using T = std::remove_pointer_t<decltype(field(s))>;
        if constexpr (std::is_enum_v<T>) {
          *field(s) = static_cast<T>(index);
        } else {
          throw std::logic_error(k.key + ": a fixed-choice key whose member is not an enum");
        }
      },
      k.field);
}

std::string parent_of(const std::string& key) { return key.substr(0, key.rfind('.')); }
std::string name_of(const std::string& key) { return key.substr(key.rfind('.') + 1); }

std::string int_range(int64_t lo, const std::string& hi) {
  return "an integer in [" + std::to_string(lo) + ", " + hi + "]";
}

std::string int_range(int64_t lo, int64_t hi) {
  return int_range(lo, hi == INT64_MAX ? std::string("∞") : std::to_string(hi));
}

// "a, b or c".
std::string either(const std::vector<std::string>& words) {
  if (words.size() < 2) return join(words);
  return join(std::vector<std::string>(words.begin(), words.end() - 1)) + " or " + words.back();
}

// A relative path is relative to the scenario file that wrote it (the current
// directory for command-line overrides), so scenarios work from any working
// directory.
std::string resolve_path(const std::string& value, const Value& v) {
  if (value.empty() || fs::path(value).is_absolute()) return value;
  const std::string& file = v.loc.file;
  if (file.empty() || file.rfind("<override", 0) == 0 || file == "scenario.resolved.json") {
    return fs::absolute(value).lexically_normal().string();
  }
  return fs::absolute(fs::path(file).parent_path() / value).lexically_normal().string();
}

// The readers of read_key, one per key type: each checks `x` and sets
// k's member of `s`, or fails naming the key, the place and what was
// expected.
void read_int(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  const int64_t hi = k.hi_key.empty() ? k.hi : member<int64_t>(*find_scenario_key(k.hi_key), s);
  int64_t v = 0;
  if (!x.is_scalar() || !parse_int(x.scalar, &v) || v < k.lo || v > hi) {
    fail(x.loc, key, int_range(k.lo, hi), x.describe());
  }
  if (std::holds_alternative<KeyField<uint64_t>>(k.field)) {
    member<uint64_t>(k, s) = static_cast<uint64_t>(v);
  } else {
    member<int64_t>(k, s) = v;
  }
}

void read_number(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  double v = 0;
  if (!x.is_scalar() || !parse_double(x.scalar, &v) || v < k.min || (k.min_open && v == k.min) || v > k.max) {
    fail(x.loc, key, key_form(k), x.describe());
  }
  member<double>(k, s) = v;
}

void read_bool(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  bool v = false;
  if (!x.is_scalar() || !parse_bool(x.scalar, &v)) fail(x.loc, key, key_form(k), x.describe());
  member<bool>(k, s) = v;
}

void read_string(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_scalar()) fail(x.loc, key, "a string", x.describe());
  member<std::string>(k, s) = k.type == KeyType::kPath ? resolve_path(x.scalar, x) : x.scalar;
}

void read_enum(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_scalar()) fail(x.loc, key, key_form(k), x.describe());
  const auto it = std::find(k.allowed.begin(), k.allowed.end(), x.scalar);
  if (it == k.allowed.end()) fail(x.loc, key, key_form(k), x.describe() + did_you_mean(x.scalar, k.allowed));
  set_enum(k, s, static_cast<size_t>(it - k.allowed.begin()));
}

void read_bytes(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_scalar()) fail(x.loc, key, "a size such as 512MiB", x.describe());
  const auto b = parse_bytes(x.scalar);
  if (!b) fail(x.loc, key, key_form(k), x.describe());
  member<int64_t>(k, s) = *b;
}

void read_auto_bool(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  auto& m = member<std::optional<bool>>(k, s);
  if (x.is_scalar() && x.scalar == "auto") {
    m = std::nullopt;
    return;
  }
  bool v = false;
  if (!x.is_scalar() || !parse_bool(x.scalar, &v)) fail(x.loc, key, key_form(k), x.describe());
  m = v;
}

void read_auto_int(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  auto& m = member<int64_t>(k, s);
  if (x.is_scalar() && x.scalar == "auto") {
    m = k.auto_value;
    return;
  }
  int64_t v = 0;
  if (!x.is_scalar() || !parse_int(x.scalar, &v) || (v != 0 && (v < k.lo || v > k.hi))) {
    fail(x.loc, key, key_form(k), x.describe());
  }
  m = v;
}

void read_encoder(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_scalar()) fail(x.loc, key, key_form(k), x.describe());
  // "resnet50" or the bare depth "50".
  const std::string depth = x.scalar.rfind("resnet", 0) == 0 ? x.scalar.substr(6) : x.scalar;
  int64_t d = 0;
  if (!parse_int(depth, &d) ||
      std::find(k.allowed.begin(), k.allowed.end(), "resnet" + std::to_string(d)) == k.allowed.end()) {
    fail(x.loc, key, key_form(k), x.describe());
  }
  member<int64_t>(k, s) = d;
}

void read_checks(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  auto& m = member<std::vector<std::string>>(k, s);
  bool all = false;
  if (x.is_scalar() && parse_bool(x.scalar, &all)) {
    m = all ? k.allowed : std::vector<std::string>{};
    return;
  }
  if (!x.is_seq()) fail(x.loc, key, key_form(k), x.describe());
  m.clear();
  for (const auto& item : x.seq) {
    if (!item.is_scalar() || std::find(k.allowed.begin(), k.allowed.end(), item.scalar) == k.allowed.end()) {
      fail(item.loc, key, "one of " + join(k.allowed),
           item.describe() + (item.is_scalar() ? did_you_mean(item.scalar, k.allowed) : ""));
    }
    m.push_back(item.scalar);
  }
}

void read_args(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_seq()) fail(x.loc, key, key_form(k), x.describe());
  auto& m = member<std::vector<std::string>>(k, s);
  m.clear();
  for (const auto& item : x.seq) {
    if (!item.is_scalar() || item.scalar.empty() || item.scalar.find('\0') != std::string::npos) {
      fail(item.loc, key, "a non-empty string", item.describe());
    }
    m.push_back(item.scalar);
  }
}

void read_string_map(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_map()) fail(x.loc, key, key_form(k), x.describe());
  auto& m = member<std::map<std::string, std::string>>(k, s);
  m.clear();
  for (const auto& [name, item] : x.map) {
    if (!item.is_scalar()) fail(item.loc, key + "." + name, "a string", item.describe());
    m[name] = item.scalar;
  }
}

void read_indices(const KeySpec& k, const Value& x, Scenario& s) {
  const std::string& key = k.key;
  if (!x.is_seq()) fail(x.loc, key, key_form(k), x.describe());
  auto& m = member<std::vector<int64_t>>(k, s);
  m.clear();
  for (const auto& item : x.seq) {
    int64_t v = 0;
    if (!item.is_scalar() || !parse_int(item.scalar, &v) || v < 0) {
      fail(item.loc, key, "non-negative sample indices", item.describe());
    }
    m.push_back(v);
  }
}

// Checks `x` (written, not null) as `k` says and sets k's member of `s`:
// one reader per key type.
void read_key(const KeySpec& k, const Value& x, Scenario& s) {
  switch (k.type) {
    case KeyType::kInt:
      return read_int(k, x, s);
    case KeyType::kNumber:
      return read_number(k, x, s);
    case KeyType::kBool:
      return read_bool(k, x, s);
    case KeyType::kString:
    case KeyType::kPath:
      return read_string(k, x, s);
    case KeyType::kEnum:
      return read_enum(k, x, s);
    case KeyType::kBytes:
      return read_bytes(k, x, s);
    case KeyType::kAutoBool:
      return read_auto_bool(k, x, s);
    case KeyType::kAutoInt:
      return read_auto_int(k, x, s);
    case KeyType::kEncoder:
      return read_encoder(k, x, s);
    case KeyType::kChecks:
      return read_checks(k, x, s);
    case KeyType::kArgs:
      return read_args(k, x, s);
    case KeyType::kStringMap:
      return read_string_map(k, x, s);
    case KeyType::kIndices:
      return read_indices(k, x, s);
  }
}

// A Markdown table cell: one line, `|` escaped.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : one_line(text)) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

const std::vector<KeySpec>& scenario_keys() {
  static const std::vector<KeySpec> kKeys = build_table();
  return kKeys;
}

const KeySpec* find_scenario_key(const std::string& key) {
  for (const KeySpec& k : scenario_keys()) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::vector<std::string> section_keys(const std::string& section) {
  const std::string prefix = section + ".";
  std::vector<std::string> out;
  for (const KeySpec& k : scenario_keys()) {
    if (k.key.rfind(prefix, 0) != 0) continue;
    const std::string rest = k.key.substr(prefix.size());
    const std::string name = rest.substr(0, rest.find('.'));  // a key, or a subsection's name
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

void read_section(const Value* v, const std::string& section, Scenario& s) {
  if (v != nullptr && v->is_null()) fail_empty(*v, section, "a map of its keys");
  if (v != nullptr && !v->is_map()) fail(v->loc, section, "a map", v->describe());
  const bool written = v != nullptr && v->is_map();
  const std::vector<std::string> known = section_keys(section);
  for (const KeySpec& k : scenario_keys()) {
    if (parent_of(k.key) != section) continue;
    const Value* x = written ? v->find(name_of(k.key)) : nullptr;
    if (x == nullptr) continue;
    if (x->is_null()) fail_empty(*x, k.key, key_form(k));
    read_key(k, *x, s);
  }
  for (const std::string& name : known) {
    if (find_scenario_key(section + "." + name) == nullptr) {
      read_section(written ? v->find(name) : nullptr, section + "." + name, s);
    }
  }
  if (!written) return;
  // Unknown keys are errors, with a suggestion among the known ones.
  for (const auto& [name, x] : v->map) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw ScenarioError(x.key_loc.str() + ": " + section + "." + name + ": expected one of " + join(known) +
                          ", got an unknown key" + did_you_mean(name, known));
    }
  }
}

nlohmann::ordered_json key_json(const KeySpec& k, const Scenario& s) {
  using J = nlohmann::ordered_json;
  switch (k.type) {
    case KeyType::kInt:
      if (std::holds_alternative<KeyField<uint64_t>>(k.field)) return member<uint64_t>(k, s);
      return member<int64_t>(k, s);
    case KeyType::kNumber:
      return member<double>(k, s);
    case KeyType::kBool:
      return member<bool>(k, s);
    case KeyType::kString:
    case KeyType::kPath:
      return member<std::string>(k, s);
    case KeyType::kEnum:
      return enum_text(k, s);
    case KeyType::kBytes:
      return std::to_string(member<int64_t>(k, s));
    case KeyType::kAutoBool: {
      const auto& v = member<std::optional<bool>>(k, s);
      return v ? J(*v) : J("auto");
    }
    case KeyType::kAutoInt: {
      const int64_t v = member<int64_t>(k, s);
      return v == k.auto_value ? J("auto") : J(v);
    }
    case KeyType::kEncoder:
      return "resnet" + std::to_string(member<int64_t>(k, s));
    case KeyType::kChecks:
      return member<std::vector<std::string>>(k, s);
    case KeyType::kIndices:
      return member<std::vector<int64_t>>(k, s);
    case KeyType::kArgs:
      return member<std::vector<std::string>>(k, s);
    case KeyType::kStringMap: {
      J m = J::object();
      for (const auto& [name, v] : member<std::map<std::string, std::string>>(k, s)) m[name] = v;
      return m;
    }
  }
  return nullptr;
}

nlohmann::ordered_json section_json(const std::string& section, const Scenario& s) {
  const std::string prefix = section + ".";
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const KeySpec& k : scenario_keys()) {
    if (k.key.rfind(prefix, 0) != 0) continue;
    nlohmann::ordered_json* at = &j;
    std::string rest = k.key.substr(prefix.size());
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      at = &(*at)[rest.substr(0, dot)];
      rest = rest.substr(dot + 1);
    }
    (*at)[rest] = key_json(k, s);
  }
  return j;
}

std::string default_text(const KeySpec& k) {
  static const Scenario kDefaults;
  const nlohmann::ordered_json j = key_json(k, kDefaults);
  const auto text = [](const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  if (j.is_array()) {
    std::vector<std::string> items;
    for (const auto& v : j) items.push_back(text(v));
    return "[" + join(items) + "]";
  }
  if (j.is_object()) return j.empty() ? "{}" : j.dump();
  if (j.is_string() && j.get<std::string>().empty()) return "\"\"";
  return text(j);
}

std::string key_form(const KeySpec& k) {
  switch (k.type) {
    case KeyType::kInt:
      return k.hi_key.empty() ? int_range(k.lo, k.hi) : int_range(k.lo, k.hi_key);
    case KeyType::kNumber: {
      std::ostringstream e;
      e << "a number " << (k.min_open ? "> " : ">= ") << k.min << " and <= " << k.max;
      return e.str();
    }
    case KeyType::kBool:
      return "true or false";
    case KeyType::kString:
      return "a string";
    case KeyType::kEnum:
      return "one of " + join(k.allowed);
    case KeyType::kBytes:
      return "a size such as 512MiB or 12GB";
    case KeyType::kPath:
      return "a path, relative to the file that writes it";
    case KeyType::kAutoBool:
      return "auto, true or false";
    case KeyType::kAutoInt:
      return k.expected;
    case KeyType::kEncoder:
      return either(k.allowed);
    case KeyType::kChecks:
      return "true, false or a list of checks (" + join(k.allowed) + ")";
    case KeyType::kIndices:
      return "a list of sample indices";
    case KeyType::kArgs:
      return "a list of strings";
    case KeyType::kStringMap:
      return "a map of names to strings";
  }
  return "";
}

std::string scenario_keys_markdown() {
  std::ostringstream md;
  md << "# Scenario keys\n\n"
        "Every key a scenario sets under `model`, `data`, `train`, `hardware`, `monitors`, `repeat`, `limits`,\n"
        "`worker` and `cluster`: "
        "how it is written, its default and what it does. A key a scenario does not write keeps its default;\n"
        "a key written with nothing after it (`max_steps:`, `~`, `null`) is refused rather than read as its\n"
        "default. `key.path=value` overrides set the same keys. `faults` (`dbh list faults`), `expect` and\n"
        "`controls` are described in docs/scenarios.md; an expectation written\n"
        "`null` (`expect.step=null`) is unset.\n\n"
        "Booleans are also written `yes`/`no` or `on`/`off`; sizes take the units B, KB, MB, GB, TB, KiB, MiB,\n"
        "GiB and TiB (K, M and G are KiB, MiB and GiB). Relative paths are relative to the file that writes them\n"
        "(the working directory for overrides).\n\n"
        "This page is the output of `dbh scenario keys`, generated from the table in\n"
        "`harness/scenario/schema.cc`; a unit test fails when the two differ.\n";
  std::string section;
  for (const KeySpec& k : scenario_keys()) {
    const std::string top = k.key.substr(0, k.key.find('.'));
    if (top != section) {
      section = top;
      md << "\n## " << top << "\n\n"
         << "| Key | Written as | Default | Meaning |\n"
         << "|---|---|---|---|\n";
    }
    md << "| " << cell(markdown_code(k.key)) << " | " << cell(key_form(k)) << " | "
       << cell(markdown_code(default_text(k))) << " | " << cell(k.help)
       << (k.cuda_only ? cell(" CUDA only: a CPU run says it does not test it.") : std::string())
       << (k.real_data_only ? cell(" Read only from a dataset: a run on synthetic data says it does not read it.")
                            : std::string())
       << " |\n";
  }
  return md.str();
}

namespace {

// The keys `flag` marks that `s` sets away from their default, each as its
// override.
std::vector<std::string> flagged_settings(const Scenario& s, bool KeySpec::*flag) {
  std::vector<std::string> out;
  const Scenario defaults;
  for (const KeySpec& k : scenario_keys()) {
    if (!(k.*flag)) continue;
    const auto value = key_json(k, s);
    if (value == key_json(k, defaults)) continue;
    out.push_back(override_text(k.key, value.is_string() ? value.get<std::string>() : value.dump()));
  }
  return out;
}

}  // namespace

std::vector<std::string> cuda_only_settings_on_cpu(const Scenario& s) {
  if (s.hardware.device.rfind("cuda", 0) == 0) return {};
  return flagged_settings(s, &KeySpec::cuda_only);
}

std::vector<std::string> real_data_settings_unread(const Scenario& s) {
  if (s.data.source == DataSource::kReal || s.worker.external()) return {};
  return flagged_settings(s, &KeySpec::real_data_only);
}

}  // namespace dbh::harness::scenario

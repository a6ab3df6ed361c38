// The dbh command line.

#include <cmath>
#include <cerrno>
#include <cstring>

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <map>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <fstream>
#include <sstream>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <tuple>

#include <CLI/CLI.hpp>

#include "harness/cli/data_command.h"
#include "harness/bisect/bisect_command.h"
#include "harness/qualify/qualify_command.h"
#include "harness/diagnose/diagnose_command.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/common/files.h"
#include "harness/common/value.h"
#include "harness/kb/knowledge_base.h"
#include "harness/cli/env_command.h"
#include "harness/cli/run_command.h"
#include "harness/cli/scenario_command.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"
#include "model/data/image_decode.h"
#include "harness/worker/host_allocator.h"
#include "harness/worker/tune.h"
#include "harness/worker/worker.h"
#include "harness/cli/train_command.h"
#include "harness/cli/tune_command.h"
#include "harness/cli/list_command.h"
#include "harness/cli/merge_command.h"
#include "harness/cli/eval_command.h"
#include "harness/version.h"

// What a command says when this machine's memory ran out before it finished.
constexpr const char* kOutOfMemory =
    "ran out of memory: the input is too large for this machine (a smaller --size, --batch-size or fewer "
    "images fit); nothing was kept";

namespace {

namespace fs = std::filesystem;
namespace h = dbh::harness;

// Note [The command table]: each command of the binary is a row: a function
// that adds its subcommand, options and help to the command line and returns
// how to run it once parsed (its options live in the closure). `main` parses,
// checks the arguments every command shares (empty values, UTF-8, finite
// numbers, writable output places), runs the parsed row, and turns what
// escapes it into an exit status. A new command is a new row.
struct Command {
  CLI::App* app = nullptr;   // owned by the parent CLI::App
  std::function<int()> run;  // called when `app` was parsed
};

// A command's words: key.path=value overrides and the rest, each in order.
void split_words(const std::vector<std::string>& args, std::vector<std::string>* plain,
                 std::vector<std::string>* overrides) {
  for (const auto& a : args) (h::is_override(a) ? overrides : plain)->push_back(a);
}

// The one scenario file of `command`; a second plain word is refused.
void one_scenario(const char* command, const std::vector<std::string>& args, std::string* scenario,
                  std::vector<std::string>* overrides) {
  std::vector<std::string> plain;
  split_words(args, &plain, overrides);
  if (plain.size() > 1) {
    throw h::UsageError("dbh " + std::string(command) + ": unexpected argument \"" + plain[1] + "\"");
  }
  if (!plain.empty()) *scenario = plain.front();
}

// A command's options and its positional words.
template <class Options>
struct OptionsAndWords {
  Options options;
  std::vector<std::string> args;
};

Command add_env(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("env", "Print LibTorch/CUDA/cuDNN/OpenCV versions, device, CPU, RAM, OS and kernel");
  cmd->add_flag("--json", *json, "Print JSON");
  return {cmd, [json] { return h::run_env_command(*json); }};
}

Command add_train(CLI::App& app) {
  struct State {
    h::TrainCommandOptions t;
    std::map<std::string, std::string> values;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("train", "Train DBNet for a few steps, without a scenario");
  // Note [One training builder]: each value flag sets a scenario key, checked
  // by the scenario schema (values are read as text here).
  for (const auto& f : h::train_flags()) {
    cmd->add_option(f.flag, s->values[f.flag], f.help + " (" + f.key + ")");
  }
  cmd->add_flag("--augment,!--no-augment", s->t.augment,
                "DB training augmentation on real data (on by default, as the reference trains; "
                "--no-augment letterboxes only)");
  cmd->add_flag("--validate-batches", s->t.validate_batches,
                "Check every batch (finite, in range, binary masks) before training on it");
  cmd->add_flag("--allow-partial", s->t.allow_partial,
                "Train even when --weights holds only part of the model (a pretrained encoder): the "
                "others keep their initial values (listed). Tensors of another shape are always refused");
  cmd->add_option("--out", s->t.out, "Output folder (default reports/runs/train-<time>)");
  cmd->add_flag("-q,--quiet", s->t.quiet, "Print only the summary");
  return {cmd, [s, cmd] {
            for (const auto& f : h::train_flags()) {
              if (cmd->count(f.flag) > 0) s->t.given.emplace_back(f.flag, s->values[f.flag]);
            }
            return h::run_train_command(s->t);
          }};
}

Command add_eval(CLI::App& app) {
  auto ev = std::make_shared<h::EvalCommandOptions>();
  auto* cmd = app.add_subcommand(
      "eval", "Score a checkpoint on a dataset (ICDAR 2015 P/R/H), with overlays of the worst images. "
              "Exit 0 when the evaluation ran, 2 bad input");
  cmd->add_option("--weights", ev->weights, "dbh checkpoint (checkpoint-*.pt) or weights file")->required();
  cmd->add_option("--data", ev->data, "Dataset folder (images/ + annotations.json or icdar/)")->required();
  cmd->add_option("--out", ev->out, "Output folder (default reports/runs/eval-<time>)");
  cmd->add_option("--encoder", ev->encoder, "Encoder the weights were trained with")
      ->check(CLI::IsMember({"resnet18", "resnet34", "resnet50", "18", "34", "50"}))->capture_default_str();
  cmd->add_option("--decoder", ev->decoder, "Decoder the weights were trained with")
      ->check(CLI::IsMember({"fpn", "pan"}))->capture_default_str();
  cmd->add_option("--size", ev->size, "Test-time size of the --side side (multiple of 32)")->capture_default_str();
  cmd->add_option("--side", ev->side, "Side resized to --size (aspect kept, padded to multiples of 32)")
      ->check(CLI::IsMember({"short", "long"}))->capture_default_str();
  cmd->add_option("--batch-size", ev->batch_size, "Images per forward pass (images of one input size)")
      ->capture_default_str();
  cmd->add_option("--thresh", ev->binarize_thresh, "Probability threshold of the text bitmap")->capture_default_str();
  cmd->add_option("--box-thresh", ev->box_thresh, "Minimum mean probability of a box")->capture_default_str();
  cmd->add_option("--unclip-ratio", ev->unclip_ratio, "Unclip ratio r'")->capture_default_str();
  cmd->add_option("--max-candidates", ev->max_candidates, "Contours considered per image")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--iou-thresh", ev->iou_thresh, "IoU a match must exceed")->capture_default_str();
  cmd->add_option("--on-invalid", ev->on_invalid, "What to do with invalid annotations")
      ->check(CLI::IsMember({"error", "skip", "clip"}))->capture_default_str();
  cmd->add_option("--threads", ev->threads, "Intra-op threads; 0 = all cores")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--device", ev->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--overlays", ev->overlays, "Overlays of the K images with the lowest H-mean")
      ->capture_default_str();
  cmd->add_flag("--allow-partial", ev->allow_partial,
                "Evaluate even when some parameters or buffers are missing from the weights (listed)");
  cmd->add_option("--save-weights", ev->save_weights,
                  std::string("Also write the loaded model as a plain weights file (for ") +
                      DBH_SCENARIO_KEY(model.weights) + ", train --weights)");
  cmd->add_flag("-q,--quiet", ev->quiet, "Print only the overall result");
  return {cmd, [ev] { return h::run_eval_command(*ev); }};
}

Command add_data(CLI::App& app) {
  struct State {
    h::DataCheckOptions check;
    h::DataShowOptions show;
  };
  auto s = std::make_shared<State>();
  auto* data = app.add_subcommand("data", "Inspect a dataset the way training reads it");
  data->require_subcommand(1);
  // A dataset folder argument: what is there instead is named ("got a FIFO",
  // "got a symlink loop"), not only that it is no folder.
  const CLI::Validator dataset_folder(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (fs::is_directory(path, ec)) return "";
        return h::one_line(path) + ": expected a dataset folder, got " + h::describe_path(path);
      },
      "DIR");
  auto* check = data->add_subcommand(
      "check", "Load a dataset, print counts and every defect with its location. "
               "Exit 0 clean, 1 defects found, 2 unreadable");
  check->add_option("DIR", s->check.dir, "Dataset folder (images/ + annotations.json or icdar/)")
      ->required()->check(dataset_folder);
  check->add_option("--on-invalid", s->check.on_invalid, "Policy the check applies")
      ->check(CLI::IsMember({"error", "skip", "clip"}))->capture_default_str();
  check->add_option("--json", s->check.json_out, "Write the JSON summary to this file");
  check->add_flag("-q,--quiet", s->check.quiet, "Print the JSON summary instead of text");
  auto* show = data->add_subcommand(
      "show", "Write what the model is trained on for one sample: input, label maps, overlay");
  show->add_option("DIR", s->show.dir, "Dataset folder")->required()->check(dataset_folder);
  show->add_option("--index", s->show.index, "Sample index")->required();
  show->add_flag("--no-augment", s->show.no_augment, "Letterbox only");
  show->add_option("--size", s->show.size, "Square size (multiple of 32)")
      ->check(CLI::Range(int64_t{32}, int64_t{8192}))->capture_default_str();
  show->add_option("--epoch", s->show.epoch, "Epoch of the augmentation draw")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))->capture_default_str();
  // Checked as text: a uint64 option would take "-1" as 2^64 - 1.
  show->add_option("--seed", s->show.seed, "Augmentation seed")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))->capture_default_str();
  show->add_option("--out", s->show.out, "Output folder")->required();
  return {data, [s, check] {
            if (*check) return h::run_data_check(s->check);
            if (s->show.size % 32 != 0) {
              throw h::UsageError("dbh data show --size: expected a multiple of 32, got " +
                                  std::to_string(s->show.size));
            }
            return h::run_data_show(s->show);
          }};
}

// The options run, repeat and suite share.
void add_run_options(CLI::App* cmd, h::RunOptions& ro) {
  cmd->add_option("--out", ro.out, "Output folder (default reports/runs/<name>-<time>)");
  cmd->add_option("--device", ro.device, "Shortcut for " + h::override_text(DBH_SCENARIO_KEY(hardware.device), "…"));
  cmd->add_option("--seed", ro.seed, "Shortcut for " + h::override_text(DBH_SCENARIO_KEY(train.seed), "…"));
  cmd->add_option("--junit", ro.junit, "Write JUnit XML here");
  cmd->add_flag("--json", ro.json, "Print report.json on stdout");
  cmd->add_flag("-q,--quiet", ro.quiet, "Print only the result line");
  cmd->add_flag("-v,--verbose", ro.verbose, "Print every step and fault");
  cmd->add_flag("--no-progress", ro.no_progress, "No step progress lines (results and failures still print)");
  cmd->add_flag("--print-config", ro.print_config,
                "Print the fully resolved scenario (as scenario.resolved.json) and exit 0, running and "
                "writing nothing");
  cmd->add_flag("--verify-resolutions", ro.verify_resolutions,
                "When a scenario fails, try each resolution of its failure class that dbh can express as "
                "overrides as a control run, and mark it confirmed or refuted in the report");
}

Command add_run(CLI::App& app) {
  struct State : OptionsAndWords<h::RunOptions> {
    bool bisect_exit = false;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("run", "Run one scenario: dbh run SCENARIO [key=value …]");
  cmd->add_option("ARGS", s->args,
                  "Scenario file, then dotted overrides (" +
                      h::override_text(DBH_SCENARIO_KEY(model.encoder), "resnet18") + " …)")
      ->required();
  add_run_options(cmd, s->options);
  cmd->add_flag("--withhold-fault-records", s->options.withhold_fault_records)->group("");
  cmd->add_flag("--bisect-exit", s->bisect_exit,
                "Exit codes for git bisect run: 0 expectation met, 1 not met, 125 cannot test");
  return {cmd, [s] {
            split_words(s->args, &s->options.scenarios, &s->options.overrides);
            const int code = h::run_command(s->options);
            if (!s->bisect_exit) return code;
            // git bisect: 0 good, 1 bad, 125 skip; never a code > 127 (git would abort).
            return code == 0 ? 0 : code == 1 ? 1 : 125;
          }};
}

Command add_repeat(CLI::App& app) {
  struct State : OptionsAndWords<h::RunOptions> {
    int64_t processes = 0, in_process = 0;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "repeat", "Run a scenario repeatedly: fresh processes (bit-identical?) or in one process (leaks?)");
  cmd->add_option("ARGS", s->args, "Scenario file, then key=value overrides")->required();
  cmd->add_option("--processes", s->processes, "Fresh processes to compare")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--in-process", s->in_process, "Runs in the same process")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--record", s->options.record,
                  "Write a numerics reference here (every process's per-step loss, gradient norm and module "
                  "numbers, and the machine) for `dbh qualify --reference` on another machine");
  add_run_options(cmd, s->options);
  return {cmd, [s] {
            auto& ro = s->options;
            split_words(s->args, &ro.scenarios, &ro.overrides);
            // A flag and an override of its key: the flag would silently win.
            for (const auto& [flag, given, key] :
                 {std::tuple<const char*, bool, const char*>{"--processes", s->processes > 0,
                                                             DBH_SCENARIO_KEY(repeat.processes)},
                  {"--in-process", s->in_process > 0, DBH_SCENARIO_KEY(repeat.in_process)}}) {
              for (const auto& x : ro.overrides) {
                if (given && h::override_sets(x, key)) {
                  throw h::UsageError("dbh repeat: " + std::string(flag) + ": expected either " + flag +
                                      " or the override " + key + "=…, got both");
                }
              }
            }
            // A reference measures the noise from its processes: 3 by default.
            if (s->processes == 0 && s->in_process == 0) s->processes = ro.record.empty() ? 2 : 3;
            if (!ro.record.empty()) {
              if (s->in_process > 1) {
                throw h::UsageError("dbh repeat: --record: expected fresh processes (--processes), got --in-process");
              }
              // The processes measure the noise (monitors.numerics_jitter):
              // they differ on purpose, and are not compared bit for bit.
              ro.overrides.push_back(h::override_text(DBH_SCENARIO_KEY(monitors.numerics), "true"));
              ro.overrides.push_back(h::override_text(DBH_SCENARIO_KEY(expect.deterministic), "null"));
            }
            if (s->processes > 0) {
              ro.overrides.push_back(
                  h::override_text(DBH_SCENARIO_KEY(repeat.processes), std::to_string(s->processes)));
            }
            if (s->in_process > 0) {
              ro.overrides.push_back(
                  h::override_text(DBH_SCENARIO_KEY(repeat.in_process), std::to_string(s->in_process)));
            }
            return h::run_command(ro);
          }};
}

// bisect's positional words: the scenario, range's key, the overrides; the
// combinations each kind needs.
void read_bisect_words(const std::vector<std::string>& args, h::BisectOptions& bo) {
  std::vector<std::string> plain;
  split_words(args, &plain, &bo.overrides);
  for (const auto& a : plain) {
    // A word of bisect config that names anything is its scenario (checked
    // as a file when it loads: a FIFO is refused, never opened).
    std::error_code exists_ec;
    if (bo.scenario.empty() && (bo.kind != h::BisectKind::kConfig || fs::exists(fs::symlink_status(a, exists_ec)))) {
      bo.scenario = a;
    } else if (bo.kind == h::BisectKind::kRange && bo.key.empty()) {
      bo.key = a;
    } else {
      throw h::UsageError("dbh bisect: unexpected argument \"" + a + "\"");
    }
  }
  if (bo.kind != h::BisectKind::kConfig && bo.scenario.empty()) {
    throw h::UsageError("dbh bisect " + h::to_string(bo.kind) + ": expected a scenario file");
  }
  if (bo.kind == h::BisectKind::kConfig && (bo.good.empty() || bo.bad.empty())) {
    throw h::UsageError("dbh bisect config: expected --good and --bad");
  }
  if (bo.kind == h::BisectKind::kConfig) {
    // Without '=' a side names a scenario file, which must be one.
    for (const auto* side : {&bo.good, &bo.bad}) {
      if (side->size() == 1 && !h::is_override(side->front())) {
        h::check_input_file(side->front(), "a scenario file or a \"key=value …\" set", "dbh bisect config",
                            side == &bo.good ? "--good" : "--bad");
      }
    }
  }
  if (bo.kind == h::BisectKind::kRange && (bo.key.empty() || bo.lo.empty() || bo.hi.empty())) {
    throw h::UsageError("dbh bisect range: expected KEY --lo X --hi Y");
  }
}

Command add_bisect(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::BisectOptions>>();
  auto& bo = s->options;
  auto* cmd = app.add_subcommand(
      "bisect", "Bisect a failure to its step, module, samples, config difference or value boundary");
  const std::vector<std::string> kinds(h::kBisectKindNames.begin(), h::kBisectKindNames.end());
  cmd->add_option_function<std::string>(
         "KIND",
         [&bo, kinds](const std::string& kind) {
           const auto it = std::find(kinds.begin(), kinds.end(), kind);
           bo.kind = static_cast<h::BisectKind>(it - kinds.begin());
         },
         "steps | modules | data | config | range")
      ->required()
      ->check(CLI::IsMember(kinds));
  cmd->add_option("ARGS", s->args, "SCENARIO [KEY for range] [key=value …]");
  cmd->add_option("--good", bo.good, "config: the passing scenario file or key=value set");
  cmd->add_option("--bad", bo.bad, "config: the failing scenario file or key=value set");
  cmd->add_option("--key", bo.key, "range: the numeric key");
  cmd->add_option("--lo", bo.lo, "range: low end");
  cmd->add_option("--hi", bo.hi, "range: high end");
  cmd->add_option("--out", bo.out, "Output folder");
  cmd->add_option("--cache", bo.cache_dir,
                  "Probe cache folder (default ~/.cache/dbh/probes: $DBH_CACHE_DIR or $XDG_CACHE_HOME/dbh when set)");
  cmd->add_option("--alpha", bo.alpha, "Accepted probability of missing a flaky failure per probe")
      ->check(CLI::Range(0.0001, 0.5))->capture_default_str();
  cmd->add_option("--reproductions", bo.reproductions, "Runs that measure the reproduction rate")
      ->check(CLI::Range(int64_t{1}, int64_t{50}))->capture_default_str();
  cmd->add_flag("--keep-checkpoints", bo.keep_checkpoints, "Keep the reproduction's checkpoints after the search");
  cmd->add_flag("--replay-from-start", bo.replay_from_start,
                "steps, modules: write no checkpoints and replay every prefix from step 0");
  cmd->add_flag("-q,--quiet", bo.quiet, "Print only the result");
  return {cmd, [s] {
            read_bisect_words(s->args, s->options);
            s->options.checks = h::input_checks();
            return h::bisect_command(s->options);
          }};
}

Command add_diagnose(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::diagnose::DiagnoseOptions>>();
  auto* cmd = app.add_subcommand(
      "diagnose", "Run the diagnosis ladder on a failing scenario: what works, what fails, ranked hypotheses");
  cmd->add_option("ARGS", s->args, "SCENARIO [key=value …]")->required();
  cmd->add_option("--out", s->options.out, "Output folder");
  cmd->add_option("--cache", s->options.cache_dir, "Probe cache folder");
  cmd->add_flag("-q,--quiet", s->options.quiet, "Print only the conclusion");
  return {cmd, [s] {
            one_scenario("diagnose", s->args, &s->options.scenario, &s->options.overrides);
            s->options.checks = h::input_checks();
            return h::diagnose::diagnose_command(s->options);
          }};
}

Command add_qualify(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::QualifyOptions>>();
  auto& qo = s->options;
  auto* cmd = app.add_subcommand(
      "qualify", "Will training fit and stay stable on a target card? Largest batch per precision, recommendation");
  cmd->add_option("ARGS", s->args, "SCENARIO [key=value …]")->required();
  cmd->add_option("--profile", qo.profile, "Hardware profile (dbh list profiles)");
  cmd->add_option("--budget", qo.budget, "Memory budget instead of a profile, e.g. 12GiB");
  cmd->add_option("--steps", qo.steps, "Steps each trial must train")->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--margin", qo.margin, "Safety margin kept free")->capture_default_str();
  cmd->add_flag("--host-estimate", qo.host_estimate,
                "A GPU profile on the CPU: measure host memory and label every page an estimate (else refused)");
  cmd->add_option("--reference", qo.reference,
                  "A numerics reference recorded on the source machine (dbh repeat --record): repeat its steps here "
                  "and say whether the training departs from it beyond the noise");
  cmd->add_option("--out", qo.out, "Output folder");
  cmd->add_option("--cache", qo.cache_dir, "Probe cache folder");
  cmd->add_flag("-q,--quiet", qo.quiet, "Print only the verdict");
  return {cmd, [s] {
            auto& qo = s->options;
            one_scenario("qualify", s->args, &qo.scenario, &qo.overrides);
            if (!qo.profile.empty() && !qo.budget.empty()) {
              throw h::UsageError("dbh qualify: expected --profile NAME or --budget SIZE, got both");
            }
            if (qo.profile.empty() && qo.budget.empty() && qo.reference.empty()) {
              throw h::UsageError("dbh qualify: expected --profile NAME, --budget SIZE or --reference FILE, got none");
            }
            qo.checks = h::input_checks();
            return h::qualify_command(qo);
          }};
}

Command add_suite(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::RunOptions>>();
  auto& ro = s->options;
  auto* cmd = app.add_subcommand("suite", "Run every scenario of folders or files; exit 0 when all hold");
  cmd->add_option("ARGS", s->args, "Folders / scenario files, then key=value overrides for all")->required();
  add_run_options(cmd, ro);
  cmd->add_flag("--resume", ro.resume, "Skip scenarios the --out folder's journal records as finished");
  cmd->add_option("--shard", ro.shard, "Run shard K/N (0-based K); detected from Slurm, Kubernetes, GitLab, "
                                       "GoogleTest and Bazel variables when omitted");
  cmd->add_option("--shard-count", ro.shard_count,
                  "Shard count for Kubernetes indexed Jobs (JOB_COMPLETION_INDEX names the shard)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  return {cmd, [s] {
            split_words(s->args, &s->options.scenarios, &s->options.overrides);
            return h::suite_command(s->options);
          }};
}

Command add_merge(CLI::App& app) {
  struct State {
    std::vector<std::string> dirs;
    std::string out, junit;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("merge", "Combine suite outputs (shards) into one suite.json and JUnit");
  cmd->add_option("DIRS", s->dirs, "Suite output folders")->required();
  cmd->add_option("--out", s->out, "Output folder");
  cmd->add_option("--junit", s->junit, "Also write the JUnit XML here");
  return {cmd, [s] { return h::merge_command(s->dirs, s->out, s->junit); }};
}

Command add_scenario(CLI::App& app) {
  auto fc = std::make_shared<h::ScenarioFromCommandOptions>();
  auto* scenario = app.add_subcommand("scenario", "Make scenarios");
  scenario->require_subcommand(1);
  auto* from_command = scenario->add_subcommand(
      "from-command", "Turn a Lightning/Hydra training command (python runners/train.py key=value …) into a "
                      "scenario; every key it cannot map is listed on stderr. Exit 0 written, 2 bad input");
  from_command->add_option("CMD", fc->command,
                           "The command line, quoted as one argument (backslash-newlines allowed), - to read it "
                           "from stdin, or its words after --")
      ->required();
  from_command->add_option("--out", fc->out, "Write the scenario here (atomically) instead of stdout");
  from_command->add_option("--name", fc->name, "Scenario name (default: the command's exp_name, else from-command)");
  from_command->add_option("--base", fc->base, "A scenario the generated one includes (its keys apply where the "
                                               "command says nothing)");
  from_command->add_flag("--force", fc->force, "Replace an existing --out file");
  from_command->add_flag("--external", fc->external,
                         "Run the command itself under dbh (worker.command; README \"Your own training\") instead of "
                         "dbh's DBNet");
  from_command->add_option("--data", fc->data, "A dataset folder for the scenario (data.source real, data.path)");
  from_command->add_option("--data-key", fc->data_key,
                           "With --external: the key of your configuration that holds the dataset folder");
  scenario->add_subcommand(
      "keys", "Print every scenario key under model, data, train, hardware, monitors, repeat and limits as a "
              "Markdown table: how it is written, its default and what it does (docs/scenario-keys.md)");
  return {scenario, [fc, from_command] {
            if (*from_command) return h::scenario_from_command_command(*fc);
            return h::scenario_keys_command();
          }};
}

Command add_tune(CLI::App& app) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand(
      "tune", "Measure the `auto` layout and thread choices of scenarios ahead of their runs (a CI job's set-up, "
              "a new machine): exit 0 when each has a trusted answer");
  cmd->add_option("ARGS", *args, "Scenario files, then key=value overrides for all")->required();
  return {cmd, [args] {
            h::TuneCommandOptions to;
            split_words(*args, &to.scenarios, &to.overrides);
            to.checks = h::input_checks();
            return h::run_tune_command(to);
          }};
}

Command add_list(CLI::App& app) {
  struct State {
    std::string what, dir;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("list", "List faults or scenarios");
  cmd->add_option("WHAT", s->what, "faults | scenarios | profiles")->required()
      ->check(CLI::IsMember({"faults", "scenarios", "profiles"}));
  cmd->add_option("DIR", s->dir, "Scenario folder (default: scenarios/)");
  return {cmd, [s] { return h::list_command(s->what, s->dir, h::input_checks()); }};
}

// The processes dbh starts itself (hidden): a trial's worker and a tuning run.
Command add_worker(CLI::App& app) {
  struct State {
    std::string scenario, dir;
    int64_t trial = 0;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("__worker", "")->group("");
  cmd->add_option("--scenario", s->scenario)->required();
  cmd->add_option("--run-dir", s->dir)->required();
  cmd->add_option("--trial", s->trial);
  return {cmd, [s] {
            return h::worker_main(h::read_input_file(s->scenario, "a resolved scenario"), s->dir, h::kEventsFd,
                                  s->trial);
          }};
}

Command add_tune_worker(CLI::App& app) {
  auto scenario = std::make_shared<std::string>();
  auto budget = std::make_shared<double>(0.0);
  auto* cmd = app.add_subcommand("__tune", "")->group("");
  cmd->add_option("--scenario", *scenario)->required();
  cmd->add_option("--budget-s", *budget)->check(CLI::NonNegativeNumber);
  return {cmd, [scenario, budget] {
            return h::tune_main(h::read_input_file(*scenario, "a resolved scenario"), h::kEventsFd, *budget);
          }};
}

// The commands, in the order `dbh --help` lists them.
constexpr Command (*kCommands[])(CLI::App&) = {
    add_env,   add_train, add_eval,    add_data,  add_run,  add_repeat, add_bisect,     add_diagnose,
    add_qualify, add_suite, add_merge, add_scenario, add_tune, add_list, add_worker, add_tune_worker,
};

// Note [Writable before work]: a place dbh will write (an output folder, a
// cache, a JUnit or JSON file, saved weights) is checked before any work:
// the nearest folder of it that exists must be one dbh may write into (not
// a read-only file system, not another user's). A run that trains for an
// hour and then cannot write its JUnit file has wasted the hour.
void check_writable(const std::string& command, const std::string& flag, const std::string& path, bool folder) {
  // What is wrong with the path's shape (a file where a folder is
  // expected, a FIFO, a folder in place of a file) each command says in
  // its own words; this checks only that dbh may write there.
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  fs::path at = folder && fs::is_directory(fs::status(p, ec)) ? p : p.parent_path();
  while (!at.empty() && !fs::exists(fs::symlink_status(at, ec)) && at != at.parent_path()) at = at.parent_path();
  if (!fs::is_directory(fs::status(at, ec))) return;
  if (::access(at.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    throw h::UsageError("dbh " + command + ": " + flag + " " + path + ": expected a place dbh may write, but " +
                        at.string() + " is not writable (" + std::strerror(err) + "); nothing was run");
  }
}

// "data check", not "check": the words the user typed after `dbh`.
std::string command_words(const CLI::App* cmd) {
  std::string words = cmd->get_name();
  for (const CLI::App* up = cmd->get_parent(); up != nullptr && up->get_parent() != nullptr; up = up->get_parent()) {
    words = up->get_name() + " " + words;
  }
  return words;
}

// The checks every command's arguments pass before it runs, for `cmd` and
// its subcommands: an empty value is never a path or a number, every word is
// UTF-8, a number is finite, and the places it writes are writable.
void check_arguments(const CLI::App* cmd) {
  const std::string command = command_words(cmd);
  static const std::vector<std::string> kPathOptions = {"--out",    "--data",         "--weights",
                                                        "--resume", "--junit",        "--save-weights",
                                                        "--base",   "--json",         "--cache"};
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->count() == 0 || opt->get_type_size() == 0) continue;
    // Every word dbh echoes into JSON, JUnit and pages must have a
    // faithful spelling there: a path or value that is not UTF-8 is
    // refused up front, never an internal error after the work.
    // (The words of the command `scenario from-command` converts are its
    // own to judge: it names the key, or quotes the word as $'…'.)
    const bool converted_words = cmd->get_name() == "from-command" && opt->get_lnames().empty();
    for (const auto& value : opt->results()) {
      if (!converted_words && h::valid_utf8(value) != value) {
        const std::string flag = opt->get_lnames().empty() ? "" : "--" + opt->get_lnames().front() + " ";
        throw h::UsageError("dbh " + command + ": " + flag + h::one_line(h::valid_utf8(value)) +
                            ": expected UTF-8, got bytes that are not (shown as \uFFFD)");
      }
    }
    if (opt->get_lnames().empty()) continue;
    // An empty path (`--out ""`, an unset shell variable) is never a place to
    // read or write: without this check some commands would fall back to
    // their default folder and write where the user did not ask. Any other
    // option too: `--shard "$SHARD"` with SHARD unset would run the whole
    // suite in every job.
    const std::string name = "--" + opt->get_lnames().front();
    const bool path = std::find(kPathOptions.begin(), kPathOptions.end(), name) != kPathOptions.end();
    for (const auto& value : opt->results()) {
      if (value.empty()) {
        throw h::UsageError("dbh " + command + ": " + name + ": expected " + (path ? "a path" : "a value") +
                            ", got \"\"");
      }
      // A number is finite, whatever the option: CLI11 reads "nan" and
      // "inf" as doubles, and a range check passes NaN (every comparison
      // with it is false).
      if (!path) {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end != value.c_str() && *end == '\0' && !std::isfinite(v)) {
          throw h::UsageError("dbh " + command + ": " + name + ": expected a finite number, got \"" + value + "\"");
        }
      }
    }
  }
  // The places this command writes, before any work (Note [Writable before work]).
  if (cmd->parsed()) {
    for (const char* flag : {"--out", "--cache", "--junit", "--save-weights", "--json"}) {
      const CLI::Option* opt = cmd->get_option_no_throw(flag);
      if (opt == nullptr || opt->count() == 0 || opt->get_type_size() == 0) continue;
      // from-command's --out is the scenario file it writes.
      const bool folder =
          (std::string(flag) == "--out" && cmd->get_name() != "from-command") || std::string(flag) == "--cache";
      for (const auto& value : opt->results()) check_writable(command, flag, value, folder);
    }
  }
  for (const CLI::App* sub : cmd->get_subcommands()) check_arguments(sub);
}

// The exit status and message of what escaped a command (called inside a
// catch block): bad input is 2, an interruption its signal's status, a bug
// in dbh 3.
int exit_status_of_exception() {
  try {
    throw;
  } catch (const h::UsageError& e) {
    // One line: text from the user's files and names never starts a line of
    // its own (a CI runner reads `::command` lines from the output).
    std::cerr << "dbh: " << h::one_line(e.what()) << "\n";
    return 2;
  } catch (const h::Interrupted& e) {
    // `train`, `eval` and `data show` stop between steps or images and
    // remove what they wrote (their output folder is claimed, not committed).
    std::cerr << "dbh: " << h::one_line(e.what()) << "; nothing was kept\n";
    return e.exit_code();
  } catch (const fs::filesystem_error& e) {
    // A file-system problem (a loop, a permission, a non-directory, a full
    // disk) is the user's to fix: name the path and the errno.
    std::cerr << "dbh: " << (e.path1().empty() ? std::string() : h::one_line(e.path1().string()) + ": ")
              << "expected a usable path, got an error (" << e.code().message() << ")\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "dbh: " << kOutOfMemory << "\n";
    return 2;
  } catch (const std::exception& e) {
    // Note [Memory exhaustion is never an internal error]: an input too large
    // for this machine (`dbh eval --size 8192`, a data show of a huge image)
    // is the user's to change, as `dbh run` makes it an outcome; it is exit
    // 2 with the knowledge base's class, not exit 3.
    const std::string what = e.what();
    const h::FailureClass* c = nullptr;
    try {
      c = h::KnowledgeBase::shipped().match_message(what);
    } catch (const std::exception&) {
      c = nullptr;  // no knowledge base: the message alone
    }
    if (c != nullptr && h::is_memory_exhaustion(c->id)) {
      std::cerr << "dbh: " << kOutOfMemory << " (" << h::truncate_utf8(h::one_line(what), 300) << ")\n";
      return 2;
    }
    std::cerr << "dbh: internal error: " << h::one_line(what) << "\n";
    return h::kInternalErrorExit;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A worker dies with its supervisor: armed before anything else runs.
  if (argc > 1 && (std::string(argv[1]) == "__worker" || std::string(argv[1]) == "__tune")) {
    h::die_with_supervisor();
  }
  // OpenCV's own pixel limit, for the formats whose headers dbh does not read
  // itself (model::kMaxImagePixels); read once, at the first decode.
  ::setenv("OPENCV_IO_MAX_IMAGE_PIXELS", std::to_string(dbh::model::kMaxImagePixels).c_str(), /*overwrite=*/0);
  CLI::App app{
      "dbh: reproduce, inject and bisect failures in DBNet training.\n"
      "Exit codes: 0 expectations met, 1 not met, 2 usage/config/input error, "
      "3 internal error, 4 not run here (a device this machine lacks)."};
  app.name("dbh");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dbh ") + h::kVersion + " (" + h::kGitRevision + ")");
  std::vector<Command> commands;
  for (const auto add : kCommands) commands.push_back(add(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    check_arguments(&app);
    // Note [Keeping freed host memory]: every command that allocates tensors
    // (a worker, train, eval, data show) steps with the caching allocator.
    h::install_host_allocator();
    for (const Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (...) {
    return exit_status_of_exception();
  }
  return 2;
}

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

int main(int argc, char** argv) {
  // A worker dies with its supervisor: armed before anything else runs.
  if (argc > 1 && (std::string(argv[1]) == "__worker" || std::string(argv[1]) == "__tune")) {
    dbh::harness::die_with_supervisor();
  }
  // OpenCV's own pixel limit, for the formats whose headers dbh does not read
  // itself (model::kMaxImagePixels); read once, at the first decode.
  // Weights and checkpoints a scenario names are read when it loads, so a
  // file of another model is refused before anything runs.
  dbh::harness::set_input_file_check(&dbh::harness::check_model_files);
  ::setenv("OPENCV_IO_MAX_IMAGE_PIXELS", std::to_string(dbh::model::kMaxImagePixels).c_str(), /*overwrite=*/0);
  CLI::App app{
      "dbh: reproduce, inject and bisect failures in DBNet training.\n"
      "Exit codes: 0 expectations met, 1 not met, 2 usage/config/input error, "
      "3 internal error, 4 not run here (a device this machine lacks)."};
  app.name("dbh");
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("dbh ") + dbh::harness::kVersion + " (" +
                           dbh::harness::kGitRevision + ")");

  bool env_json = false;
  auto* env = app.add_subcommand("env", "Print LibTorch/CUDA/cuDNN/OpenCV versions, device, CPU, RAM, OS and kernel");
  env->add_flag("--json", env_json, "Print JSON");

  dbh::harness::TrainCommandOptions t;
  auto* train = app.add_subcommand("train", "Train DBNet for a few steps, without a scenario");
  // Note [One training builder]: each value flag sets a scenario key, checked
  // by the scenario schema (values are read as text here).
  std::map<std::string, std::string> train_values;
  for (const auto& f : dbh::harness::train_flags()) {
    train->add_option(f.flag, train_values[f.flag], f.help + " (" + f.key + ")");
  }
  train->add_flag("--augment,!--no-augment", t.augment,
                  "DB training augmentation on real data (on by default, as the reference trains; "
                  "--no-augment letterboxes only)");
  train->add_flag("--validate-batches", t.validate_batches,
                  "Check every batch (finite, in range, binary masks) before training on it");
  train->add_flag("--allow-partial", t.allow_partial,
                  "Train even when --weights holds only part of the model (a pretrained encoder): the "
                  "others keep their initial values (listed). Tensors of another shape are always refused");
  train->add_option("--out", t.out, "Output folder (default reports/runs/train-<time>)");
  train->add_flag("-q,--quiet", t.quiet, "Print only the summary");

  dbh::harness::EvalCommandOptions ev;
  auto* eval = app.add_subcommand(
      "eval", "Score a checkpoint on a dataset (ICDAR 2015 P/R/H), with overlays of the worst images. "
              "Exit 0 when the evaluation ran, 2 bad input");
  eval->add_option("--weights", ev.weights, "dbh checkpoint (checkpoint-*.pt) or weights file")->required();
  eval->add_option("--data", ev.data, "Dataset folder (images/ + annotations.json or icdar/)")->required();
  eval->add_option("--out", ev.out, "Output folder (default reports/runs/eval-<time>)");
  eval->add_option("--encoder", ev.encoder, "Encoder the weights were trained with")
      ->check(CLI::IsMember({"resnet18", "resnet34", "resnet50", "18", "34", "50"}))->capture_default_str();
  eval->add_option("--decoder", ev.decoder, "Decoder the weights were trained with")
      ->check(CLI::IsMember({"fpn", "pan"}))->capture_default_str();
  eval->add_option("--size", ev.size, "Test-time size of the --side side (multiple of 32)")->capture_default_str();
  eval->add_option("--side", ev.side, "Side resized to --size (aspect kept, padded to multiples of 32)")
      ->check(CLI::IsMember({"short", "long"}))->capture_default_str();
  eval->add_option("--batch-size", ev.batch_size, "Images per forward pass (images of one input size)")
      ->capture_default_str();
  eval->add_option("--thresh", ev.binarize_thresh, "Probability threshold of the text bitmap")->capture_default_str();
  eval->add_option("--box-thresh", ev.box_thresh, "Minimum mean probability of a box")->capture_default_str();
  eval->add_option("--unclip-ratio", ev.unclip_ratio, "Unclip ratio r'")->capture_default_str();
  eval->add_option("--max-candidates", ev.max_candidates, "Contours considered per image")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  eval->add_option("--iou-thresh", ev.iou_thresh, "IoU a match must exceed")->capture_default_str();
  eval->add_option("--on-invalid", ev.on_invalid, "What to do with invalid annotations")
      ->check(CLI::IsMember({"error", "skip", "clip"}))->capture_default_str();
  eval->add_option("--threads", ev.threads, "Intra-op threads; 0 = all cores")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  eval->add_option("--device", ev.device, "cpu, cuda or cuda:N")->capture_default_str();
  eval->add_option("--overlays", ev.overlays, "Overlays of the K images with the lowest H-mean")
      ->capture_default_str();
  eval->add_flag("--allow-partial", ev.allow_partial,
                 "Evaluate even when some parameters or buffers are missing from the weights (listed)");
  eval->add_option("--save-weights", ev.save_weights,
                   std::string("Also write the loaded model as a plain weights file (for ") +
                       DBH_SCENARIO_KEY(model.weights) + ", train --weights)");
  eval->add_flag("-q,--quiet", ev.quiet, "Print only the overall result");

  auto* data = app.add_subcommand("data", "Inspect a dataset the way training reads it");
  data->require_subcommand(1);
  // A dataset folder argument: what is there instead is named ("got a FIFO",
  // "got a symlink loop"), not only that it is no folder.
  const CLI::Validator dataset_folder(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec)) return "";
        return dbh::harness::one_line(path) + ": expected a dataset folder, got " + dbh::harness::describe_path(path);
      },
      "DIR");
  dbh::harness::DataCheckOptions dc;
  auto* check = data->add_subcommand(
      "check", "Load a dataset, print counts and every defect with its location. "
               "Exit 0 clean, 1 defects found, 2 unreadable");
  check->add_option("DIR", dc.dir, "Dataset folder (images/ + annotations.json or icdar/)")
      ->required()->check(dataset_folder);
  check->add_option("--on-invalid", dc.on_invalid, "Policy the check applies")
      ->check(CLI::IsMember({"error", "skip", "clip"}))->capture_default_str();
  check->add_option("--json", dc.json_out, "Write the JSON summary to this file");
  check->add_flag("-q,--quiet", dc.quiet, "Print the JSON summary instead of text");
  dbh::harness::DataShowOptions ds;
  auto* show = data->add_subcommand(
      "show", "Write what the model is trained on for one sample: input, label maps, overlay");
  show->add_option("DIR", ds.dir, "Dataset folder")->required()->check(dataset_folder);
  show->add_option("--index", ds.index, "Sample index")->required();
  show->add_flag("--no-augment", ds.no_augment, "Letterbox only");
  show->add_option("--size", ds.size, "Square size (multiple of 32)")
      ->check(CLI::Range(int64_t{32}, int64_t{8192}))->capture_default_str();
  show->add_option("--epoch", ds.epoch, "Epoch of the augmentation draw")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))->capture_default_str();
  // Checked as text: a uint64 option would take "-1" as 2^64 - 1.
  show->add_option("--seed", ds.seed, "Augmentation seed")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))->capture_default_str();
  show->add_option("--out", ds.out, "Output folder")->required();

  dbh::harness::RunOptions ro;
  auto add_run_options = [&](CLI::App* cmd) {
    cmd->add_option("--out", ro.out, "Output folder (default reports/runs/<name>-<time>)");
    cmd->add_option("--device", ro.device,
                    "Shortcut for " + dbh::harness::override_text(DBH_SCENARIO_KEY(hardware.device), "…"));
    cmd->add_option("--seed", ro.seed,
                    "Shortcut for " + dbh::harness::override_text(DBH_SCENARIO_KEY(train.seed), "…"));
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
  };
  std::vector<std::string> run_args;
  auto* run = app.add_subcommand("run", "Run one scenario: dbh run SCENARIO [key=value …]");
  run->add_option("ARGS", run_args,
                   "Scenario file, then dotted overrides (" +
                       dbh::harness::override_text(DBH_SCENARIO_KEY(model.encoder), "resnet18") + " …)")
      ->required();
  add_run_options(run);
  run->add_flag("--withhold-fault-records", ro.withhold_fault_records)->group("");
  bool bisect_exit = false;
  run->add_flag("--bisect-exit", bisect_exit,
                "Exit codes for git bisect run: 0 expectation met, 1 not met, 125 cannot test");
  std::vector<std::string> repeat_args;
  int64_t repeat_processes = 0, repeat_in_process = 0;
  auto* repeat = app.add_subcommand(
      "repeat", "Run a scenario repeatedly: fresh processes (bit-identical?) or in one process (leaks?)");
  repeat->add_option("ARGS", repeat_args, "Scenario file, then key=value overrides")->required();
  repeat->add_option("--processes", repeat_processes, "Fresh processes to compare")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  repeat->add_option("--in-process", repeat_in_process, "Runs in the same process")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  add_run_options(repeat);
  dbh::harness::BisectOptions bo;
  std::vector<std::string> bisect_args;
  auto* bisect = app.add_subcommand(
      "bisect", "Bisect a failure to its step, module, samples, config difference or value boundary");
  bisect->add_option("KIND", bo.kind, "steps | modules | data | config | range")->required()
      ->check(CLI::IsMember({"steps", "modules", "data", "config", "range"}));
  bisect->add_option("ARGS", bisect_args,
                     "SCENARIO [KEY for range] [key=value …]");
  bisect->add_option("--good", bo.good, "config: the passing scenario file or key=value set");
  bisect->add_option("--bad", bo.bad, "config: the failing scenario file or key=value set");
  bisect->add_option("--key", bo.key, "range: the numeric key");
  bisect->add_option("--lo", bo.lo, "range: low end");
  bisect->add_option("--hi", bo.hi, "range: high end");
  bisect->add_option("--out", bo.out, "Output folder");
  bisect->add_option("--cache", bo.cache_dir, "Probe cache folder (default ~/.cache/dbh/probes: $DBH_CACHE_DIR or $XDG_CACHE_HOME/dbh when set)");
  bisect->add_option("--alpha", bo.alpha, "Accepted probability of missing a flaky failure per probe")
      ->check(CLI::Range(0.0001, 0.5))->capture_default_str();
  bisect->add_option("--reproductions", bo.reproductions, "Runs that measure the reproduction rate")
      ->check(CLI::Range(int64_t{1}, int64_t{50}))->capture_default_str();
  bisect->add_flag("--keep-checkpoints", bo.keep_checkpoints, "Keep the reproduction's checkpoints after the search");
  bisect->add_flag("--replay-from-start", bo.replay_from_start,
                   "steps, modules: write no checkpoints and replay every prefix from step 0");
  bisect->add_flag("-q,--quiet", bo.quiet, "Print only the result");
  dbh::harness::DiagnoseOptions dg;
  std::vector<std::string> diagnose_args;
  auto* diagnose = app.add_subcommand(
      "diagnose", "Run the diagnosis ladder on a failing scenario: what works, what fails, ranked hypotheses");
  diagnose->add_option("ARGS", diagnose_args, "SCENARIO [key=value …]")->required();
  diagnose->add_option("--out", dg.out, "Output folder");
  diagnose->add_option("--cache", dg.cache_dir, "Probe cache folder");
  diagnose->add_flag("-q,--quiet", dg.quiet, "Print only the conclusion");
  dbh::harness::QualifyOptions qo;
  std::vector<std::string> qualify_args;
  auto* qualify = app.add_subcommand(
      "qualify", "Will training fit and stay stable on a target card? Largest batch per precision, recommendation");
  qualify->add_option("ARGS", qualify_args, "SCENARIO [key=value …]")->required();
  qualify->add_option("--profile", qo.profile, "Hardware profile (dbh list profiles)");
  qualify->add_option("--budget", qo.budget, "Memory budget instead of a profile, e.g. 12GiB");
  qualify->add_option("--steps", qo.steps, "Steps each trial must train")->check(CLI::PositiveNumber)
      ->capture_default_str();
  qualify->add_option("--margin", qo.margin, "Safety margin kept free")->capture_default_str();
  qualify->add_flag("--host-estimate", qo.host_estimate,
                    "A GPU profile on the CPU: measure host memory and label every page an estimate (else refused)");
  qualify->add_option("--out", qo.out, "Output folder");
  qualify->add_option("--cache", qo.cache_dir, "Probe cache folder");
  qualify->add_flag("-q,--quiet", qo.quiet, "Print only the verdict");
  std::vector<std::string> suite_args;
  auto* suite = app.add_subcommand("suite", "Run every scenario of folders or files; exit 0 when all hold");
  suite->add_option("ARGS", suite_args, "Folders / scenario files, then key=value overrides for all")
      ->required();
  add_run_options(suite);
  suite->add_flag("--resume", ro.resume, "Skip scenarios the --out folder's journal records as finished");
  suite->add_option("--shard", ro.shard, "Run shard K/N (0-based K); detected from Slurm, Kubernetes, GitLab, "
                                         "GoogleTest and Bazel variables when omitted");
  suite->add_option("--shard-count", ro.shard_count,
                    "Shard count for Kubernetes indexed Jobs (JOB_COMPLETION_INDEX names the shard)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  std::vector<std::string> merge_dirs;
  std::string merge_out, merge_junit;
  auto* merge = app.add_subcommand("merge", "Combine suite outputs (shards) into one suite.json and JUnit");
  merge->add_option("DIRS", merge_dirs, "Suite output folders")->required();
  merge->add_option("--out", merge_out, "Output folder");
  merge->add_option("--junit", merge_junit, "Also write the JUnit XML here");
  auto* scenario = app.add_subcommand("scenario", "Make scenarios");
  scenario->require_subcommand(1);
  dbh::harness::ScenarioFromCommandOptions fc;
  auto* from_command = scenario->add_subcommand(
      "from-command", "Turn a Lightning/Hydra training command (python runners/train.py key=value …) into a "
                      "scenario; every key it cannot map is listed on stderr. Exit 0 written, 2 bad input");
  from_command->add_option("CMD", fc.command,
                           "The command line, quoted as one argument (backslash-newlines allowed), - to read it "
                           "from stdin, or its words after --")
      ->required();
  from_command->add_option("--out", fc.out, "Write the scenario here (atomically) instead of stdout");
  from_command->add_option("--name", fc.name, "Scenario name (default: the command's exp_name, else from-command)");
  from_command->add_option("--base", fc.base, "A scenario the generated one includes (its keys apply where the "
                                              "command says nothing)");
  from_command->add_flag("--force", fc.force, "Replace an existing --out file");
  from_command->add_flag("--external", fc.external,
                         "Run the command itself under dbh (worker.command; README \"Your own training\") instead of "
                         "dbh's DBNet");
  from_command->add_option("--data", fc.data, "A dataset folder for the scenario (data.source real, data.path)");
  from_command->add_option("--data-key", fc.data_key,
                           "With --external: the key of your configuration that holds the dataset folder");
  auto* keys = scenario->add_subcommand(
      "keys", "Print every scenario key under model, data, train, hardware, monitors, repeat and limits as a "
              "Markdown table: how it is written, its default and what it does (docs/scenario-keys.md)");
  std::vector<std::string> tune_args;
  auto* tune_ahead = app.add_subcommand(
      "tune", "Measure the `auto` layout and thread choices of scenarios ahead of their runs (a CI job's set-up, "
              "a new machine): exit 0 when each has a trusted answer");
  tune_ahead->add_option("ARGS", tune_args, "Scenario files, then key=value overrides for all")->required();
  std::string list_what, list_dir;
  auto* list = app.add_subcommand("list", "List faults or scenarios");
  list->add_option("WHAT", list_what, "faults | scenarios | profiles")->required()
      ->check(CLI::IsMember({"faults", "scenarios", "profiles"}));
  list->add_option("DIR", list_dir, "Scenario folder (default: scenarios/)");
  std::string w_scenario, w_dir;
  int64_t w_trial = 0;
  auto* worker = app.add_subcommand("__worker", "")->group("");
  worker->add_option("--scenario", w_scenario)->required();
  worker->add_option("--run-dir", w_dir)->required();
  worker->add_option("--trial", w_trial);
  auto* tune = app.add_subcommand("__tune", "")->group("");
  tune->add_option("--scenario", w_scenario)->required();

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

  // Note [Writable before work]: a place dbh will write (an output folder, a
  // cache, a JUnit or JSON file, saved weights) is checked before any work:
  // the nearest folder of it that exists must be one dbh may write into (not
  // a read-only file system, not another user's). A run that trains for an
  // hour and then cannot write its JUnit file has wasted the hour.
  namespace fs = std::filesystem;
  auto check_writable = [](const std::string& command, const std::string& flag, const std::string& path,
                           bool folder) {
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
      throw dbh::harness::UsageError("dbh " + command + ": " + flag + " " + path +
                                     ": expected a place dbh may write, but " + at.string() + " is not writable (" +
                                     std::strerror(err) + "); nothing was run");
    }
  };

  try {
    // An empty path (`--out ""`, an unset shell variable) is never a place to
    // read or write: without this check some commands would fall back to
    // their default folder and write where the user did not ask.
    // "data check", not "check": the words the user typed after `dbh`.
    auto command_words = [](const CLI::App* cmd) {
      std::string words = cmd->get_name();
      for (const CLI::App* up = cmd->get_parent(); up != nullptr && up->get_parent() != nullptr;
           up = up->get_parent()) {
        words = up->get_name() + " " + words;
      }
      return words;
    };
    std::function<void(const CLI::App*)> check_empty_paths = [&](const CLI::App* cmd) {
      const std::string command = command_words(cmd);
      for (const CLI::Option* opt : cmd->get_options()) {
        static const std::vector<std::string> kPathOptions = {"--out",  "--data", "--weights", "--resume",
                                                              "--junit", "--save-weights", "--base", "--json",
                                                              "--cache"};
        if (opt->count() == 0 || opt->get_type_size() == 0) continue;
        // Every word dbh echoes into JSON, JUnit and pages must have a
        // faithful spelling there: a path or value that is not UTF-8 is
        // refused up front, never an internal error after the work.
        // (The words of the command `scenario from-command` converts are its
        // own to judge: it names the key, or quotes the word as $'…'.)
        const bool converted_words = cmd->get_name() == "from-command" && opt->get_lnames().empty();
        for (const auto& value : opt->results()) {
          if (!converted_words && dbh::harness::valid_utf8(value) != value) {
            const std::string flag = opt->get_lnames().empty() ? "" : "--" + opt->get_lnames().front() + " ";
            throw dbh::harness::UsageError("dbh " + command + ": " + flag +
                                           dbh::harness::one_line(dbh::harness::valid_utf8(value)) +
                                           ": expected UTF-8, got bytes that are not (shown as \uFFFD)");
          }
        }
        if (opt->get_lnames().empty()) continue;
        // Any other option too: `--shard "$SHARD"` with SHARD unset would
        // run the whole suite in every job.
        const std::string name = "--" + opt->get_lnames().front();
        const bool path = std::find(kPathOptions.begin(), kPathOptions.end(), name) != kPathOptions.end();
        for (const auto& value : opt->results()) {
          if (value.empty()) {
            throw dbh::harness::UsageError("dbh " + command + ": " + name + ": expected " +
                                           (path ? "a path" : "a value") + ", got \"\"");
          }
          // A number is finite, whatever the option: CLI11 reads "nan" and
          // "inf" as doubles, and a range check passes NaN (every comparison
          // with it is false).
          if (!path) {
            char* end = nullptr;
            const double v = std::strtod(value.c_str(), &end);
            if (end != value.c_str() && *end == '\0' && !std::isfinite(v)) {
              throw dbh::harness::UsageError("dbh " + command + ": " + name + ": expected a finite number, got \"" +
                                             value + "\"");
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
          const bool folder = (std::string(flag) == "--out" && cmd->get_name() != "from-command") ||
                              std::string(flag) == "--cache";
          for (const auto& value : opt->results()) check_writable(command, flag, value, folder);
        }
      }
      for (const CLI::App* sub : cmd->get_subcommands()) check_empty_paths(sub);
    };
    check_empty_paths(&app);
    if (*env) return dbh::harness::run_env_command(env_json);
    if (*train) {
      for (const auto& f : dbh::harness::train_flags()) {
        if (train->count(f.flag) > 0) t.given.emplace_back(f.flag, train_values[f.flag]);
      }
      return dbh::harness::run_train_command(t);
    }
    if (*eval) return dbh::harness::run_eval_command(ev);
    if (*check) return dbh::harness::run_data_check(dc);
    // A command's words: key.path=value overrides and the rest, each in order.
    auto split = [](const std::vector<std::string>& args, std::vector<std::string>* plain,
                    std::vector<std::string>* overrides) {
      for (const auto& a : args) (dbh::harness::is_override(a) ? overrides : plain)->push_back(a);
    };
    // The one scenario file of `command`; a second plain word is refused.
    auto one_scenario = [&](const char* command, const std::vector<std::string>& args, std::string* scenario,
                            std::vector<std::string>* overrides) {
      std::vector<std::string> plain;
      split(args, &plain, overrides);
      if (plain.size() > 1) {
        std::cerr << "dbh " << command << ": unexpected argument \"" << plain[1] << "\"\n";
        return false;
      }
      if (!plain.empty()) *scenario = plain.front();
      return true;
    };
    if (*tune_ahead) {
      dbh::harness::TuneCommandOptions to;
      split(tune_args, &to.scenarios, &to.overrides);
      return dbh::harness::run_tune_command(to);
    }
    if (*run) {
      split(run_args, &ro.scenarios, &ro.overrides);
      const int code = dbh::harness::run_command(ro);
      if (!bisect_exit) return code;
      // git bisect: 0 good, 1 bad, 125 skip; never a code > 127 (git would abort).
      return code == 0 ? 0 : code == 1 ? 1 : 125;
    }
    if (*repeat) {
      split(repeat_args, &ro.scenarios, &ro.overrides);
      // A flag and an override of its key: the flag would silently win.
      for (const auto& [flag, given, key] :
           {std::tuple<const char*, bool, const char*>{"--processes", repeat_processes > 0,
                                                       DBH_SCENARIO_KEY(repeat.processes)},
            {"--in-process", repeat_in_process > 0, DBH_SCENARIO_KEY(repeat.in_process)}}) {
        for (const auto& x : ro.overrides) {
          if (given && dbh::harness::override_sets(x, key)) {
            throw dbh::harness::UsageError("dbh repeat: " + std::string(flag) + ": expected either " + flag +
                                           " or the override " + key + "=…, got both");
          }
        }
      }
      if (repeat_processes == 0 && repeat_in_process == 0) repeat_processes = 2;
      if (repeat_processes > 0) {
        ro.overrides.push_back(
            dbh::harness::override_text(DBH_SCENARIO_KEY(repeat.processes), std::to_string(repeat_processes)));
      }
      if (repeat_in_process > 0) {
        ro.overrides.push_back(
            dbh::harness::override_text(DBH_SCENARIO_KEY(repeat.in_process), std::to_string(repeat_in_process)));
      }
      return dbh::harness::run_command(ro);
    }
    if (*qualify) {
      if (!one_scenario("qualify", qualify_args, &qo.scenario, &qo.overrides)) return 2;
      if (qo.profile.empty() == qo.budget.empty()) {
        std::cerr << "dbh qualify: expected --profile NAME or --budget SIZE, got "
                  << (qo.profile.empty() ? "neither" : "both") << "\n";
        return 2;
      }
      return dbh::harness::qualify_command(qo);
    }
    if (*diagnose) {
      if (!one_scenario("diagnose", diagnose_args, &dg.scenario, &dg.overrides)) return 2;
      return dbh::harness::diagnose_command(dg);
    }
    if (*bisect) {
      std::vector<std::string> plain;
      split(bisect_args, &plain, &bo.overrides);
      for (const auto& a : plain) {
        // A word of bisect config that names anything is its scenario (checked
        // as a file when it loads: a FIFO is refused, never opened).
        std::error_code exists_ec;
        if (bo.scenario.empty() &&
            (bo.kind != "config" || std::filesystem::exists(std::filesystem::symlink_status(a, exists_ec)))) {
          bo.scenario = a;
        } else if (bo.kind == "range" && bo.key.empty()) {
          bo.key = a;
        } else {
          std::cerr << "dbh bisect: unexpected argument \"" << a << "\"\n";
          return 2;
        }
      }
      if (bo.kind != "config" && bo.scenario.empty()) {
        std::cerr << "dbh bisect " << bo.kind << ": expected a scenario file\n";
        return 2;
      }
      if (bo.kind == "config" && (bo.good.empty() || bo.bad.empty())) {
        std::cerr << "dbh bisect config: expected --good and --bad\n";
        return 2;
      }
      if (bo.kind == "config") {
        // Without '=' a side names a scenario file, which must be one.
        for (const auto* side : {&bo.good, &bo.bad}) {
          if (side->size() == 1 && !dbh::harness::is_override(side->front())) {
            dbh::harness::check_input_file(side->front(), "a scenario file or a \"key=value …\" set",
                                           "dbh bisect config", side == &bo.good ? "--good" : "--bad");
          }
        }
      }
      if (bo.kind == "range" && (bo.key.empty() || bo.lo.empty() || bo.hi.empty())) {
        std::cerr << "dbh bisect range: expected KEY --lo X --hi Y\n";
        return 2;
      }
      return dbh::harness::bisect_command(bo);
    }
    if (*suite) {
      split(suite_args, &ro.scenarios, &ro.overrides);
      return dbh::harness::suite_command(ro);
    }
    if (*merge) return dbh::harness::merge_command(merge_dirs, merge_out, merge_junit);
    if (*list) return dbh::harness::list_command(list_what, list_dir);
    if (*from_command) return dbh::harness::scenario_from_command_command(fc);
    if (*keys) return dbh::harness::scenario_keys_command();
    if (*worker) {
      return dbh::harness::worker_main(dbh::harness::read_input_file(w_scenario, "a resolved scenario"), w_dir,
                                       dbh::harness::kEventsFd, w_trial);
    }
    if (*tune) {
      return dbh::harness::tune_main(dbh::harness::read_input_file(w_scenario, "a resolved scenario"),
                                     dbh::harness::kEventsFd);
    }
    if (*show) {
      if (ds.size % 32 != 0) {
        throw dbh::harness::UsageError("dbh data show --size: expected a multiple of 32, got " +
                                       std::to_string(ds.size));
      }
      return dbh::harness::run_data_show(ds);
    }
  } catch (const dbh::harness::UsageError& e) {
    // One line: text from the user's files and names never starts a line of
    // its own (a CI runner reads `::command` lines from the output).
    std::cerr << "dbh: " << dbh::harness::one_line(e.what()) << "\n";
    return 2;
  } catch (const dbh::harness::Interrupted& e) {
    // `train`, `eval` and `data show` stop between steps or images and
    // remove what they wrote (their output folder is claimed, not committed).
    std::cerr << "dbh: " << dbh::harness::one_line(e.what()) << "; nothing was kept\n";
    return e.exit_code();
  } catch (const std::filesystem::filesystem_error& e) {
    // A file-system problem (a loop, a permission, a non-directory, a full
    // disk) is the user's to fix: name the path and the errno.
    std::cerr << "dbh: " << (e.path1().empty() ? std::string() : dbh::harness::one_line(e.path1().string()) + ": ")
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
    const dbh::harness::FailureClass* c = nullptr;
    try {
      c = dbh::harness::KnowledgeBase::shipped().match_message(what);
    } catch (const std::exception&) {
      c = nullptr;  // no knowledge base: the message alone
    }
    if (c != nullptr && dbh::harness::is_memory_exhaustion(c->id)) {
      std::cerr << "dbh: " << kOutOfMemory << " (" << dbh::harness::truncate_utf8(dbh::harness::one_line(what), 300)
                << ")\n";
      return 2;
    }
    std::cerr << "dbh: internal error: " << dbh::harness::one_line(what) << "\n";
    return dbh::harness::kInternalErrorExit;
  }
  return 2;
}

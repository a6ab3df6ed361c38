// `dbh run`, `repeat`, `suite` and `merge`: their flags (Note [The command table]).

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/merge_command.h"
#include "harness/cli/run_command.h"
#include "harness/common/error.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

// The options run, repeat and suite share.
void add_run_options(CLI::App* cmd, RunOptions& ro) {
  cmd->add_option("--out", ro.out, "Output folder (default reports/runs/<name>-<time>)");
  cmd->add_option("--device", ro.device, "Shortcut for " + h::scenario::override_text(DBH_SCENARIO_KEY(hardware.device), "…"));
  cmd->add_option("--seed", ro.seed, "Shortcut for " + h::scenario::override_text(DBH_SCENARIO_KEY(train.seed), "…"));
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
  struct State : OptionsAndWords<RunOptions> {
    bool bisect_exit = false;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("run", "Run one scenario: dbh run SCENARIO [key=value …]");
  cmd->add_option("ARGS", s->args,
                  "Scenario file, then dotted overrides (" +
                      h::scenario::override_text(DBH_SCENARIO_KEY(model.encoder), "resnet18") + " …)")
      ->required();
  add_run_options(cmd, s->options);
  cmd->add_flag("--withhold-fault-records", s->options.withhold_fault_records)->group("");
  cmd->add_flag("--bisect-exit", s->bisect_exit,
                "Exit codes for git bisect run: 0 expectation met, 1 not met, 125 cannot test");
  return {cmd, [s] {
            split_words(s->args, &s->options.scenarios, &s->options.overrides);
            const int code = run_command(s->options);
            if (!s->bisect_exit) return code;
            // git bisect: 0 good, 1 bad, 125 skip; never a code > 127 (git would abort).
            return code == 0 ? 0 : code == 1 ? 1 : 125;
          }};
}

Command add_repeat(CLI::App& app) {
  struct State : OptionsAndWords<RunOptions> {
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
                if (given && h::scenario::override_sets(x, key)) {
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
              // The processes measure the noise (Note [Real differences
              // measure the noise]): they compute differently on purpose,
              // and are not compared bit for bit. The first keeps the state
              // of every step (Note [The same state, step by step]).
              ro.overrides.push_back(h::scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics), "true"));
              ro.overrides.push_back(
                  h::scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics_variant), "by_process"));
              ro.overrides.push_back(
                  h::scenario::override_text(DBH_SCENARIO_KEY(monitors.numerics_save_states), "true"));
              ro.overrides.push_back(h::scenario::override_text(DBH_SCENARIO_KEY(expect.deterministic), "null"));
            }
            if (s->processes > 0) {
              ro.overrides.push_back(
                  h::scenario::override_text(DBH_SCENARIO_KEY(repeat.processes), std::to_string(s->processes)));
            }
            if (s->in_process > 0) {
              ro.overrides.push_back(
                  h::scenario::override_text(DBH_SCENARIO_KEY(repeat.in_process), std::to_string(s->in_process)));
            }
            return run_command(ro);
          }};
}

Command add_suite(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<RunOptions>>();
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
            return suite_command(s->options);
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
  return {cmd, [s] { return merge_command(s->dirs, s->out, s->junit); }};
}

}  // namespace dbh::harness::cli

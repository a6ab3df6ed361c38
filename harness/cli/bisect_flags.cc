// `dbh bisect`: its flags and words (Note [The command table]).

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/supervisor/warm_worker.h"
#include "harness/bisect/bisect_command.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/scenario/scenario.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;
namespace h = dbh::harness;

// bisect's positional words: the scenario, range's key, the overrides; the
// combinations each kind needs.
void read_bisect_words(const std::vector<std::string>& args, h::bisect::BisectOptions& bo) {
  std::vector<std::string> plain;
  split_words(args, &plain, &bo.overrides);
  for (const auto& a : plain) {
    // A word of bisect config that names anything is its scenario (checked
    // as a file when it loads: a FIFO is refused, never opened).
    std::error_code exists_ec;
    if (bo.scenario.empty() && (bo.kind != h::bisect::BisectKind::kConfig || fs::exists(fs::symlink_status(a, exists_ec)))) {
      bo.scenario = a;
    } else if (bo.kind == h::bisect::BisectKind::kRange && bo.key.empty()) {
      bo.key = a;
    } else {
      throw h::UsageError("dbh bisect: unexpected argument \"" + a + "\"");
    }
  }
  if (bo.kind != h::bisect::BisectKind::kConfig && bo.scenario.empty()) {
    throw h::UsageError("dbh bisect " + to_string(bo.kind) + ": expected a scenario file");
  }
  if (bo.kind == h::bisect::BisectKind::kConfig && (bo.good.empty() || bo.bad.empty())) {
    throw h::UsageError("dbh bisect config: expected --good and --bad");
  }
  if (bo.kind == h::bisect::BisectKind::kConfig) {
    // One word without '=' that is no option of the command (`--lr 5`)
    // names a scenario file, which must be one.
    for (const auto* side : {&bo.good, &bo.bad}) {
      const std::string& first = side->front();
      if (side->size() == 1 && !h::is_override(first) && first.find_first_of(" \t\n") == std::string::npos &&
          first.rfind('-', 0) != 0) {
        h::check_input_file(side->front(), "a scenario file or a \"key=value …\" set", "dbh bisect config",
                            side == &bo.good ? "--good" : "--bad");
      }
    }
  }
  if (bo.kind == h::bisect::BisectKind::kRange && (bo.key.empty() || bo.lo.empty() || bo.hi.empty())) {
    throw h::UsageError("dbh bisect range: expected KEY --lo X --hi Y");
  }
}

Command add_bisect(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::bisect::BisectOptions>>();
  auto& bo = s->options;
  auto* cmd = app.add_subcommand(
      "bisect", "Bisect a failure to its step, module, samples, config difference or value boundary");
  const std::vector<std::string> kinds(h::bisect::kBisectKindNames.begin(), h::bisect::kBisectKindNames.end());
  cmd->add_option_function<std::string>(
         "KIND",
         [&bo, kinds](const std::string& kind) {
           const auto it = std::find(kinds.begin(), kinds.end(), kind);
           bo.kind = static_cast<h::bisect::BisectKind>(it - kinds.begin());
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
  cmd->add_option("-j,--jobs", bo.jobs,
                  "config, data: probes at once; each ddmin round's probes run ahead in processes of their own, "
                  "with the same answer as one at a time (default 0: one on a GPU, else one per two CPUs, at most 4)")
      ->check(CLI::Range(int64_t{0}, int64_t{64}));
  cmd->add_flag("-q,--quiet", bo.quiet, "Print only the result");
  const auto cold = add_cold_flag(cmd);
  const auto executor = add_executor_flags(cmd);
  return {cmd, [s, cold, executor] {
            read_bisect_words(s->args, s->options);
            s->options.checks = h::worker::input_checks();
            h::probe::check_cluster_options(*executor);
            const h::supervisor::WarmWorkers warm(!*cold);
            const h::probe::Cluster cluster(*executor);
            return h::bisect::bisect_command(s->options);
          }};
}

}  // namespace dbh::harness::cli

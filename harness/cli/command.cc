#include "harness/cli/command.h"

#include <algorithm>
#include <iterator>

#include <CLI/CLI.hpp>

#include "harness/common/error.h"
#include "harness/common/value.h"

namespace dbh::harness::cli {

// A command's words: key.path=value overrides and the rest, each in order.
void split_words(const std::vector<std::string>& args, std::vector<std::string>* plain,
                 std::vector<std::string>* overrides) {
  for (const auto& a : args) (is_override(a) ? overrides : plain)->push_back(a);
}

// The one scenario file of `command`; a second plain word is refused.
void one_scenario(const char* command, const std::vector<std::string>& args, std::string* scenario,
                  std::vector<std::string>* overrides) {
  std::vector<std::string> plain;
  split_words(args, &plain, overrides);
  if (plain.size() > 1) {
    throw UsageError("dbh " + std::string(command) + ": unexpected argument \"" + plain[1] + "\"");
  }
  if (!plain.empty()) *scenario = plain.front();
}

std::shared_ptr<bool> add_cold_flag(CLI::App* cmd) {
  auto cold = std::make_shared<bool>(false);
  cmd->add_flag("--cold", *cold,
                "Start every trial as a process of its own (by default a Python training's trials are forked "
                "from a warm worker that has imported its modules: docs/own-training.md)");
  return cold;
}

std::shared_ptr<probe::ClusterOptions> add_executor_flags(CLI::App* cmd) {
  auto o = std::make_shared<probe::ClusterOptions>();
  const std::vector<std::string> names(std::begin(probe::kExecutorNames), std::end(probe::kExecutorNames));
  cmd->add_option_function<std::string>(
         "--executor",
         [o, names](const std::string& name) {
           o->executor = static_cast<probe::Executor>(std::find(names.begin(), names.end(), name) - names.begin());
         },
         "Where probes run: local (default), or slurm: each probe a Slurm job step through srun, the nodes "
         "seeing this binary and the output folder at the same paths (docs/diagnosis.md)")
      ->check(CLI::IsMember(names));
  cmd->add_option("--partition", o->partition, "slurm: the partition to run probes in");
  cmd->add_option("--gpu-type", o->gpu_type, "slurm: one GPU of this type per probe (--gres=gpu:TYPE:1)");
  cmd->add_option("--time-limit", o->time_limit, "slurm: each probe's time limit (--time: MM, HH:MM:SS, D-HH, ...)");
  cmd->add_option("--srun-arg", o->srun_args, "slurm: a further srun option, as --srun-arg=--account=ml (repeatable)");
  cmd->add_option("--attempts", o->attempts,
                  "slurm: submissions of a probe whose job ends without a result (cancelled, pre-empted, its node "
                  "lost) before the search stops")
      ->check(CLI::Range(int64_t{1}, int64_t{20}))
      ->capture_default_str();
  return o;
}

}  // namespace dbh::harness::cli

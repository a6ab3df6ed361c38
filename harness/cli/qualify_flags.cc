// `dbh qualify`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/common/error.h"
#include "harness/qualify/qualify_command.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_qualify(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::qualify::QualifyOptions>>();
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
  const auto executor = add_executor_flags(cmd);
  return {cmd, [s, executor] {
            auto& qo = s->options;
            one_scenario("qualify", s->args, &qo.scenario, &qo.overrides);
            if (!qo.profile.empty() && !qo.budget.empty()) {
              throw h::UsageError("dbh qualify: expected --profile NAME or --budget SIZE, got both");
            }
            if (qo.profile.empty() && qo.budget.empty() && qo.reference.empty()) {
              throw h::UsageError("dbh qualify: expected --profile NAME, --budget SIZE or --reference FILE, got none");
            }
            h::probe::check_cluster_options(*executor);
            if (executor->executor != h::probe::Executor::kLocal && !qo.reference.empty()) {
              throw h::UsageError(
                  "dbh qualify --reference: expected --executor local, got --executor slurm: the numerics "
                  "comparison reads every module's numbers of every step, which a probe on the cluster does not "
                  "send back; run it on a node of that partition instead (srun dbh qualify …)");
            }
            qo.checks = h::worker::input_checks();
            const h::probe::Cluster cluster(*executor);
            return h::qualify::qualify_command(qo);
          }};
}

}  // namespace dbh::harness::cli

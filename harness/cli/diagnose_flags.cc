// `dbh diagnose`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/supervisor/warm_worker.h"
#include "harness/diagnose/diagnose_command.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_diagnose(CLI::App& app) {
  auto s = std::make_shared<OptionsAndWords<h::diagnose::DiagnoseOptions>>();
  auto* cmd = app.add_subcommand(
      "diagnose", "Run the diagnosis ladder on a failing scenario: what works, what fails, ranked hypotheses");
  cmd->add_option("ARGS", s->args, "SCENARIO [key=value …]")->required();
  cmd->add_option("--out", s->options.out, "Output folder");
  cmd->add_option("--cache", s->options.cache_dir, "Probe cache folder");
  cmd->add_flag("-q,--quiet", s->options.quiet, "Print only the conclusion");
  cmd->add_option("-j,--jobs", s->options.jobs,
                  "Probes at once: the ladder's rungs and the follow-up bisection's probes run ahead in processes "
                  "of their own, with the same conclusion as one at a time (default 0: one on a GPU, else one "
                  "per two CPUs, at most 4)")
      ->check(CLI::Range(int64_t{0}, int64_t{64}));
  cmd->add_option("--max-probes", s->options.max_probes,
                  "Run at most N probes beyond the ladder's own rungs, those that can separate the leading "
                  "hypotheses first (default: every one that applies)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  const auto cold = add_cold_flag(cmd);
  const auto executor = add_executor_flags(cmd);
  return {cmd, [s, cold, executor] {
            one_scenario("diagnose", s->args, &s->options.scenario, &s->options.overrides);
            s->options.checks = h::worker::input_checks();
            h::probe::check_cluster_options(*executor);
            const h::supervisor::WarmWorkers warm(!*cold);
            const h::probe::Cluster cluster(*executor);
            return h::diagnose::diagnose_command(s->options);
          }};
}

}  // namespace dbh::harness::cli

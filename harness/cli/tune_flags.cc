// `dbh tune` and the hidden measuring process `__tune`: their flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/tune_command.h"
#include "harness/common/files.h"
#include "harness/proto/worker_link.h"
#include "harness/worker/tune.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_tune(CLI::App& app) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand(
      "tune", "Measure the `auto` layout and thread choices of scenarios ahead of their runs (a CI job's set-up, "
              "a new machine): exit 0 when each has a trusted answer");
  cmd->add_option("ARGS", *args, "Scenario files, then key=value overrides for all")->required();
  return {cmd, [args] {
            TuneCommandOptions to;
            split_words(*args, &to.scenarios, &to.overrides);
            to.checks = h::worker::input_checks();
            return run_tune_command(to);
          }};
}

Command add_tune_worker(CLI::App& app) {
  auto scenario = std::make_shared<std::string>();
  auto budget = std::make_shared<double>(0.0);
  auto* cmd = app.add_subcommand("__tune", "")->group("");
  cmd->add_option("--scenario", *scenario)->required();
  cmd->add_option("--budget-s", *budget)->check(CLI::NonNegativeNumber);
  return {cmd, [scenario, budget] {
            return h::worker::tune_main(h::read_input_file(*scenario, "a resolved scenario"), h::proto::kEventsFd, *budget);
          }};
}

}  // namespace dbh::harness::cli

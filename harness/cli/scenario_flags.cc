// `dbh scenario from-command` and `dbh scenario keys`: their flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/scenario_command.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_scenario(CLI::App& app) {
  auto fc = std::make_shared<ScenarioFromCommandOptions>();
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
            if (*from_command) return scenario_from_command_command(*fc);
            return scenario_keys_command();
          }};
}

}  // namespace dbh::harness::cli

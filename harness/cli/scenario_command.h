#pragma once

#include <string>
#include <vector>

namespace dbh::harness::cli {

struct ScenarioFromCommandOptions {
  /// The training command: one argument holding the whole command line, "-"
  /// to read it from standard input, or its words one per argument.
  std::vector<std::string> command;
  std::string out;     // scenario file to write; "" = standard output
  std::string name;    // the scenario's name ("" = the command's exp_name, else from-command)
  std::string base;    // a scenario file the generated one includes
  bool force = false;  // replace an existing --out
  bool external = false;  // run the command itself under dbh (worker.command)
  std::string data;       // a dataset folder for the scenario
  std::string data_key;   // --external: the user's key for it
};

/// `dbh scenario from-command "CMD"`: converts a Lightning/Hydra training
/// command line into a scenario (harness/scenario/from_command.h), checks that
/// it loads, and prints it or writes it atomically to --out (an existing file
/// only with --force). Every word it cannot map is listed on stderr as
/// "unmapped: key=value (why)". 0 written, 2 bad input (UsageError).
int scenario_from_command_command(const ScenarioFromCommandOptions& options);

/// `dbh scenario keys`: prints the reference of the scenario keys under
/// model, data, train, hardware, monitors, repeat and limits as Markdown
/// (harness/scenario/schema.h; docs/scenario-keys.md is its output). 0.
int scenario_keys_command();

}  // namespace dbh::harness::cli

// `dbh list`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/list_command.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_list(CLI::App& app) {
  struct State {
    std::string what, dir;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("list", "List faults or scenarios");
  cmd->add_option("WHAT", s->what, "faults | scenarios | profiles")->required()
      ->check(CLI::IsMember({"faults", "scenarios", "profiles"}));
  cmd->add_option("DIR", s->dir, "Scenario folder (default: scenarios/)");
  return {cmd, [s] { return list_command(s->what, s->dir, h::worker::input_checks()); }};
}

}  // namespace dbh::harness::cli

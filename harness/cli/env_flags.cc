// `dbh env`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/env_command.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_env(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("env", "Print LibTorch/CUDA/cuDNN/OpenCV versions, device, CPU, RAM, OS and kernel");
  cmd->add_flag("--json", *json, "Print JSON");
  return {cmd, [json] { return run_env_command(*json); }};
}

}  // namespace dbh::harness::cli

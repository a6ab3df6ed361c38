#include "harness/cli/command.h"

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

}  // namespace dbh::harness::cli

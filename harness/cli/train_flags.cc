// `dbh train`: its flags (Note [The command table]).

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/cli/command.h"
#include "harness/cli/train_command.h"

namespace dbh::harness::cli {
namespace h = dbh::harness;

Command add_train(CLI::App& app) {
  struct State {
    TrainCommandOptions t;
    std::map<std::string, std::string> values;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("train", "Train DBNet for a few steps, without a scenario");
  // Note [One training builder]: each value flag sets a scenario key, checked
  // by the scenario schema (values are read as text here).
  for (const auto& f : train_flags()) {
    cmd->add_option(f.flag, s->values[f.flag], f.help + " (" + f.key + ")");
  }
  cmd->add_flag("--augment,!--no-augment", s->t.augment,
                "DB training augmentation on real data (on by default, as the reference trains; "
                "--no-augment letterboxes only)");
  cmd->add_flag("--validate-batches", s->t.validate_batches,
                "Check every batch (finite, in range, binary masks) before training on it");
  cmd->add_flag("--allow-partial", s->t.allow_partial,
                "Train even when --weights holds only part of the model (a pretrained encoder): the "
                "others keep their initial values (listed). Tensors of another shape are always refused");
  cmd->add_option("--out", s->t.out, "Output folder (default reports/runs/train-<time>)");
  cmd->add_flag("-q,--quiet", s->t.quiet, "Print only the summary");
  return {cmd, [s, cmd] {
            for (const auto& f : train_flags()) {
              if (cmd->count(f.flag) > 0) s->t.given.emplace_back(f.flag, s->values[f.flag]);
            }
            return run_train_command(s->t);
          }};
}

}  // namespace dbh::harness::cli

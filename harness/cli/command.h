#pragma once

// Note [The command table]: each command of the binary is a row: a function
// that adds its subcommand, options and help to the command line and returns
// how to run it once parsed (its options live in the closure). Each command's
// flags are in a file of their own beside it (`<command>_flags.cc`); `main`
// lists the rows, parses, checks the arguments every command shares (empty
// values, UTF-8, finite numbers, writable output places), runs the parsed
// row, and turns what escapes it into an exit status. A new command is a new
// row.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/probe/cluster.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dbh::harness::cli {

struct Command {
  CLI::App* app = nullptr;   // owned by the parent CLI::App
  std::function<int()> run;  // called when `app` was parsed
};

/// A command's options and its positional words.
template <class Options>
struct OptionsAndWords {
  Options options;
  std::vector<std::string> args;
};

/// A command's words: key.path=value overrides and the rest, each in order.
void split_words(const std::vector<std::string>& args, std::vector<std::string>* plain,
                 std::vector<std::string>* overrides);

/// The one scenario file of `command`; a second plain word is refused.
void one_scenario(const char* command, const std::vector<std::string>& args, std::string* scenario,
                  std::vector<std::string>* overrides);

/// `--cold` on a command of many trials: whether it was given (Note [A warm
/// worker]: without it, the command's Python trials are forked from warm
/// workers where they may be).
std::shared_ptr<bool> add_cold_flag(CLI::App* cmd);

/// `--executor` and the Slurm options on a command of many probes (Note
/// [Probes on a cluster]); checked with probe::check_cluster_options.
std::shared_ptr<probe::ClusterOptions> add_executor_flags(CLI::App* cmd);

// The rows, each defined in its command's flags file.
Command add_run(CLI::App& app);  // run_flags.cc
Command add_repeat(CLI::App& app);  // run_flags.cc
Command add_suite(CLI::App& app);  // run_flags.cc
Command add_merge(CLI::App& app);  // run_flags.cc
Command add_bisect(CLI::App& app);  // bisect_flags.cc
Command add_diagnose(CLI::App& app);  // diagnose_flags.cc
Command add_qualify(CLI::App& app);  // qualify_flags.cc
Command add_train(CLI::App& app);  // train_flags.cc
Command add_eval(CLI::App& app);  // eval_flags.cc
Command add_data(CLI::App& app);  // data_flags.cc
Command add_scenario(CLI::App& app);  // scenario_flags.cc
Command add_tune(CLI::App& app);  // tune_flags.cc
Command add_tune_worker(CLI::App& app);  // tune_flags.cc
Command add_list(CLI::App& app);  // list_flags.cc
Command add_env(CLI::App& app);  // env_flags.cc
Command add_worker(CLI::App& app);  // worker_flags.cc
Command add_node_probe(CLI::App& app);  // worker_flags.cc

}  // namespace dbh::harness::cli

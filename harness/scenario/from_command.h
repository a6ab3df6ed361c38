#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/scenario/command_syntax.h"
#include "harness/scenario/user_config.h"

namespace dbh::harness::scenario {

/// One word of a shell command line and where it starts (1-based).
struct ShellWord {
  std::string text;
  int line = 1;
  int column = 1;
};

/// Splits `command` into words as a POSIX shell does for one simple command:
/// single and double quotes, backslash escapes, backslash-newline
/// continuations (CRLF too) and `#` comments. Throws UsageError naming the
/// line and column of an unbalanced quote, a trailing backslash, a shell
/// operator (| & ; < > ( )) or an expansion ($, `), which a scenario cannot
/// hold.
std::vector<ShellWord> split_shell_words(const std::string& command);

/// A training image size as a command line writes it.

struct FromCommandOptions {
  std::string name;     // the scenario's name; "" = exp_name, else "from-command"
  std::string include;  // a base scenario, as the generated file names it; "" = none
  /// Run the command itself under dbh (worker.command, docs/worker-protocol.md)
  /// instead of dbh's own DBNet: the keys dbh passes are taken out of it, every
  /// other word stays, VAR=value words become worker.env.
  bool external = false;
  std::string cwd;       // external: the command's working directory (absolute)
  std::string data;      // a dataset folder (absolute): data.source real, data.path
  std::string data_key;  // external: the key of the user's config that holds it
  bool has_gpu = false;  // external: this machine has an NVIDIA GPU (the device when the command says none)
  /// external: the command's composed configuration (its `hello`'s `config`
  /// in describe mode), flattened; dbh's keys are then mapped into it (Note
  /// [dbh's keys in your configuration]). nullopt: passed under the
  /// Lightning/Hydra alias table's names.
  std::optional<std::vector<ConfigEntry>> user_config;
  /// external: the options of the parser the command reported (`hello`'s
  /// `options`): a key that is an option's destination is passed as that
  /// option, a positional as its word (Note [A command's own syntax]).
  std::vector<ParserOption> parser_options;
  /// external: the keys of the YAML or JSON files the command's words name,
  /// by the word's index in the worker command; a key only a file holds is
  /// set in a copy of it (Note [A copy of your config file]) unless the
  /// command's syntax overrides a file's keys (`-o`, `--model.lr`).
  std::vector<std::pair<size_t, std::vector<ConfigEntry>>> config_files;
};

/// A Lightning/Hydra training command converted to a dbh scenario.
struct ConvertedCommand {
  std::string yaml;                    // the scenario, its comments first
  std::vector<std::string> program;    // the words skipped as the program
  std::vector<std::string> unmapped;   // "key=value (why)", in command order
  std::vector<std::string> satisfied;  // "key=value (why)": dbh already behaves so
  std::vector<std::string> mapped;     // external: "dbh.key: your.key (value), passed as …", from your configuration
  std::vector<std::string> worker_command;  // external: the command as the worker runs it (dbh's Hydra aliases out)
  std::vector<std::pair<std::string, std::string>> worker_env;  // external: its VAR=value words
};

/// Converts a training command line (`[VAR=… ] [uv run] python
/// runners/train.py key=value …`, or the overrides alone) into scenario YAML
/// through the alias table (harness/scenario/aliases.h). Every word that is
/// not mapped is listed with its reason in `unmapped` and in the YAML's
/// comments. The script's image-size flags (--target_size, --image_size,
/// --img_size, --imgsz, --input_size, '-' or '_' alike; `--flag N`,
/// `--flag=N`, `--flag N N`, `--flag [N, N]`) read as
/// preprocessing.target_size. Throws UsageError "scenario from-command: …"
/// for an empty or unparsable command, a value an alias does not accept
/// (naming the word and the expected values), an image size that
/// parse_image_size refuses, and two words giving one key different values.
/// The result is not yet validated by the scenario loader.
ConvertedCommand scenario_from_command(const std::string& command, const FromCommandOptions& options = {});

}  // namespace dbh::harness::scenario

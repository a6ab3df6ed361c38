#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace dbh::harness::scenario {

// Note [A command's own syntax]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// dbh passes a key of the user's configuration (worker.keys' user key, or an
// override of the user's own in worker.overrides) in the syntax the user's
// command takes, never as a word the command would refuse:
//
//   - by default in worker.syntax: `key=value` (Hydra), `--key value`
//     (argparse flags, jsonargparse/LightningCLI's `--model.lr 0.1`), or
//     `key=value` among the words of one option (PaddleOCR's `-o`, mmocr's
//     `--cfg-options`: worker.syntax_option);
//   - or as worker.written_as spells that key (an ArgumentPlace): an option
//     with its strings (`--batch-size|-b`), a switch (`on:--amp`,
//     `off:--no-shuffle`), a word of the command (`@2`, a positional
//     argument), or a key of a YAML or JSON file a word of the command names
//     (`@1:optimizer.lr`: dbh writes a copy with the key changed into the
//     trial folder and passes the copy's path in the word's place).
//
// A word that already sets the key is replaced where it stands (every
// spelling of the option: `--lr 0.1`, `--lr=0.1`, `-l 0.1`; `+key=…` keeps
// its `+`), never appended a second time; only a key the command does not
// set is appended. The words before the script (`python -u train.py`) are
// the interpreter's and never touched. compose_worker_argv is pure: the
// caller writes the file copies (FileEdit) and puts their paths in.

/// How the command writes one key of the user's configuration
/// (worker.written_as's value, parsed).
struct ArgumentPlace {
  enum class Kind {
    kOption,     // `--key value`: option_strings, the first is the one dbh writes
    kSwitchOn,   // present when the value is true (argparse's store_true)
    kSwitchOff,  // present when the value is false (store_false)
    kWord,       // the command's word `word` (a positional argument)
    kFileKey,    // `file_key` of the YAML/JSON file the command's word `word` names
  };
  Kind kind = Kind::kOption;
  std::vector<std::string> option_strings;
  size_t word = 0;
  std::string file_key;
};

/// Parses a worker.written_as value: `--lr|-l`, `on:--amp`, `off:--no-x`,
/// `@2`, `@1:a.b`. nullopt, with what was expected in `why`, for anything
/// else.
std::optional<ArgumentPlace> parse_argument_place(const std::string& text, std::string* why);
/// The place as worker.written_as writes it (parse_argument_place's inverse).
std::string to_string(const ArgumentPlace& place);

/// The index of the first word of `command` that is the script's argument:
/// after `python [-u …] script.py`, `python -m module`, `uv run …`; 1 when no
/// script is recognised (the program is one word).
size_t first_argument(const std::vector<std::string>& command);

/// One option of the parser the user's command parsed its words with, as
/// the adapter reports it in `hello` (`options`, from argparse after
/// parsing): its destination (the configuration's key) and how it is
/// written.
struct ParserOption {
  enum class Kind { kValue, kSwitchOn, kSwitchOff, kPositional };
  std::string dest;
  std::vector<std::string> strings;  // empty for a positional
  Kind kind = Kind::kValue;
  int nargs = 1;  // words of value it takes; -1: a variable number
};

/// At most this many options are read from a `hello`, each with at most 8
/// strings of at most 100 bytes.
inline constexpr size_t kMaxParserOptions = 512;
inline constexpr size_t kMaxParserOptionStrings = 8;
inline constexpr size_t kMaxParserOptionBytes = 100;

/// Where each positional argument of `command` stands: its word index, by
/// its destination, reading the words with `options` (an option not among
/// them takes no value). Empty when `options` has no positional.
std::vector<std::pair<std::string, size_t>> positional_words(const std::vector<std::string>& command,
                                                             const std::vector<ParserOption>& options);

/// The worker.written_as place of `option` in `command` ("" for an option
/// dbh passes in the syntax's own form).
std::string place_of(const ParserOption& option, const std::vector<std::string>& command,
                     const std::vector<ParserOption>& options);

/// The syntax a command's words show (Note [A command's own syntax]): an
/// option followed by `key=value` words (`-o a.b=1`) is kOption with that
/// option; an option with a dotted name (`--model.lr`), or a parser the
/// worker reported (`has_parser`), is kFlags; otherwise kKeyValue (Hydra,
/// also for a command with no words to go by).
struct DetectedSyntax {
  CommandSyntax syntax = CommandSyntax::kKeyValue;
  std::string option;         // kOption
  bool dotted_flags = false;  // kFlags with dotted keys (jsonargparse): a config file's keys are options too
};
DetectedSyntax detect_syntax(const std::vector<std::string>& command, bool has_parser);

/// A key of the user's configuration and the value dbh passes for it, as a
/// command line writes it (`0.005`, `true`, `/data/train`).
struct KeyArgument {
  std::string key;
  std::string value;
};

/// One key dbh sets in a copy of a config file the command names.
struct FileEdit {
  size_t word = 0;  // the command's word that names the file
  std::string key;  // dotted, in the file
  std::string value;
};

/// The command with dbh's keys in it.
struct WorkerArgv {
  std::vector<std::string> argv;
  /// Keys to set in copies of config files; the copy's path replaces
  /// argv[file_word_at[i]] for the word FileEdit::word names.
  std::vector<FileEdit> file_edits;
  /// For each word of worker.command that file_edits name: its index in argv.
  std::vector<std::pair<size_t, size_t>> file_word_at;  // {command word, argv index}
};

/// `worker.command` with each of `keys` (dbh's, then the user's overrides)
/// in its place (Note [A command's own syntax]). Throws std::logic_error for
/// a place the loader should have refused (a word past the command's end).
WorkerArgv compose_worker_argv(const WorkerConfig& worker, const std::vector<KeyArgument>& keys);

/// How `key` reaches the command, in words: "--batch-size 2", "-o lr=0.1",
/// "the word `data/` (argument 2)", "optimizer.lr in a copy of exp.yaml".
std::string describe_argument(const WorkerConfig& worker, const std::string& key, const std::string& value);

/// `words` written in the command's own syntax (`--lr 0.5 --amp`, `-o
/// a.b=1 c=2`, `--model.lr 0.1`, Hydra's `a.b=1`) as `key=value` overrides
/// of the user's keys (`lr=0.5 amp=true`, `a.b=1 c=2`, `model.lr=0.1`):
/// what `dbh bisect config --bad` takes in the command's spelling. Throws
/// UsageError "<where>: expected …, got …" for a word that sets no key (an
/// option the command does not take, a positional word, an option without
/// its value); with the parser's `options` (the worker's `hello`), an option
/// none of them takes is refused too, before any probe runs.
std::vector<std::string> overrides_from_command_words(const WorkerConfig& worker,
                                                      const std::vector<std::string>& words, const std::string& where,
                                                      const std::vector<ParserOption>& options = {});

/// Why worker.written_as's entry `text` cannot be used with `worker`'s
/// command ("" when it can): not a place, or a word past its end or among
/// the program's words.
std::string written_as_problem(const WorkerConfig& worker, const std::string& text);

}  // namespace dbh::harness::scenario

#pragma once
// `dbh scenario from-command`, first half: the command's words read into the
// settings they make (from_command.cc decides and writes the scenario from
// them). Internal to the scenario part.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/scenario/from_command.h"

namespace dbh::harness::scenario::internal {

inline constexpr const char* kFromCommandWhere = "scenario from-command: ";

// One dbh key the command sets, with the word that set it.
struct Setting {
  std::string key;
  std::string value;   // a YAML flow scalar
  std::string source;  // the command's word ("" = a default the converter chose)
  std::string note;
};

// The settings a command converts to, in the order found: one value per key.
class Settings {
 public:
  // key = value, set by the command's word `source` ("" = a default the
  // converter chose). A key set again must get the same value.
  void set(const std::string& key, const std::string& value, const std::string& source, const std::string& note) {
    for (const auto& s : list_) {
      if (s.key == key && s.value != value) {
        throw UsageError(std::string(kFromCommandWhere) + s.source + " and " + source + ": expected one value for " + key +
                         ", got " + s.value + " and " + value);
      }
      if (s.key == key) return;
    }
    list_.push_back({key, value, source, note});
  }
  bool has(const std::string& key) const {
    return std::any_of(list_.begin(), list_.end(), [&](const Setting& s) { return s.key == key; });
  }
  std::vector<Setting>& list() { return list_; }
  const std::vector<Setting>& list() const { return list_; }

 private:
  std::vector<Setting> list_;
};

// What reading the words found besides settings.
struct WordsRead {
  std::optional<std::string> accelerator;  // trainer.accelerator as written, when given
  bool accelerator_auto = false;
  std::vector<std::string> kept;  // --external: the words that stay in worker.command
};

// The program part: environment assignments (into `env`), then the launcher,
// the interpreter and the script (`python runners/train.py`, `uv run python
// …`, `python -m module`, into out.program), unless the command is the
// overrides alone. Returns the index of the first word after it.
size_t read_program(const std::vector<ShellWord>& shell_words, const std::vector<std::string>& words,
                    std::vector<std::string>& env, ConvertedCommand& out);

// The command's environment assignments: worker.env for --external, else
// the one dbh has a key for (CUDA_LAUNCH_BLOCKING); the others are unmapped.
void convert_environment(const std::vector<std::string>& env, const FromCommandOptions& options, Settings& settings,
                         nlohmann::ordered_json& worker_env, ConvertedCommand& out);

// The words after the program, from words[i] on.
WordsRead read_words(const std::vector<ShellWord>& shell_words, const std::vector<std::string>& words, size_t i,
                     const FromCommandOptions& options, Settings& settings, ConvertedCommand& out);

/// Whether `s` ends with `suffix`.
bool ends_with(const std::string& s, const std::string& suffix);
/// The words, each quoted as a shell reads it back, joined by spaces.
std::string join_quoted(const std::vector<std::string>& words);

}  // namespace dbh::harness::scenario::internal

#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/scenario/command_syntax.h"
#include "harness/scenario/user_config.h"

namespace dbh::harness::scenario {

// Note [A copy of your config file]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A training configured by a YAML or JSON file named on its command line
// (MhLiao/DB's positional experiment file, `--config_file x.yaml`) may have
// no syntax to override a key from the command line. dbh then sets the key
// in a copy: the file's text with the value's bytes replaced and every other
// byte kept (comments, anchors, tags such as `!!python/name:`, `import:`
// lists, key order), written into the trial folder; the copy's path takes
// the file's word in the command. The user's file is only read. A relative
// path in the file that names something from the file's own folder but not
// from where the command runs is written absolute in the copy, so it names
// the same file from the trial folder. The edit is checked by reading the
// copy back: every key holds what it held, but the keys dbh set.

/// `text` (the file `file`, for messages) with each edit's key set to its
/// value (a number or boolean as such where the file had one, otherwise a
/// quoted string), every other byte kept, and each scalar for which
/// `absolute_path` returns a path replaced by it (quoted). Throws UsageError
/// "<file>:<line>:<col>: <key>: expected …, got …" for a key the file does
/// not hold, one that is not a scalar, or a file that is not YAML or JSON.
std::string edit_config_text(const std::string& text, const std::string& file, const std::vector<FileEdit>& edits,
                             const std::function<std::optional<std::string>(const std::string&)>& absolute_path);

/// The copy of the config file the command's word names (`word`, relative
/// to `cwd`), with `edits` (all for that word), written into `dir` under the
/// file's own name; returns the copy's path. Throws UsageError naming the
/// file when it cannot be read or edited.
std::string write_config_copy(const std::string& word, const std::string& cwd, const std::vector<FileEdit>& edits,
                              const std::string& dir);

/// The keys of a YAML or JSON config file, dotted, with scalar values (and
/// short lists of scalars), as the adapter reports a configuration
/// (user_config.h); nullopt when `path` is no such file. At most `max_keys`.
std::optional<std::vector<ConfigEntry>> read_config_file(const std::string& path, size_t max_keys = 4096);

/// Whether a command's word names a config file dbh can edit (.yaml, .yml,
/// .json), by its name.
bool config_file_name(const std::string& word);

}  // namespace dbh::harness::scenario

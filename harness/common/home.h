#pragma once

#include <string>

namespace dbh::harness {

/// Directory holding dbh's data files (reports/kb/, scenarios/): $DBH_HOME,
/// else the source tree the binary was built from.
std::string dbh_home();

/// Where dbh_home() came from, for error messages: "$DBH_HOME" or "the
/// source tree dbh was built from".
std::string dbh_home_origin();

/// The variable naming dbh's per-user cache folder (measured choices, probe
/// results).
inline constexpr const char* kCacheDirEnv = "DBH_CACHE_DIR";

/// dbh's per-user cache folder: $DBH_CACHE_DIR, else $XDG_CACHE_HOME/dbh,
/// else $HOME/.cache/dbh; "" when none of them is set.
std::string cache_root();

/// Where cache_root() came from, for messages: "$DBH_CACHE_DIR",
/// "$XDG_CACHE_HOME" or "$HOME".
std::string cache_root_origin();

/// The path of the running dbh binary (/proc/self/exe); "dbh" when unknown.
std::string self_exe();

/// The word that starts this dbh from a shell, for every command dbh prints
/// or writes into a script: "dbh" when the first `dbh` on $PATH is this very
/// binary, else its absolute path, so a printed command runs as pasted.
std::string self_command();

}  // namespace dbh::harness

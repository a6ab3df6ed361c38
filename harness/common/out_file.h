#pragma once

// Checks for a file a user names for dbh to write (`--junit`, `dbh scenario
// from-command --out`), made before anything is written or started, so bad
// input never costs a run and never replaces a file that is not dbh's.

#include <functional>
#include <string>
#include <vector>

namespace dbh::harness {

/// What check_output_file accepts at a path.
struct OutputFileRule {
  std::string where;  // the command, "dbh run"
  std::string flag;   // the option, "--junit"
  /// Whether an existing regular file (never a link) may be replaced; null
  /// when none may.
  std::function<bool(const std::string& path)> may_replace;
  /// What may_replace accepts, in words ("a JUnit file dbh wrote"), for the
  /// message; "" when it accepts every regular file.
  std::string replaceable;
  /// Added to "expected a new file" when an existing regular file is refused
  /// ("(or --force to replace it)").
  std::string hint;
};

/// Checks that `path` can take a file dbh writes atomically (a temporary file
/// beside it, renamed over it): it lies in an existing, writable folder, and it
/// is either new or an existing regular file that `rule.may_replace` accepts,
/// never a symbolic link, a directory, a FIFO, a socket or a device. Throws
/// UsageError "<where>: <flag>: expected a new file…, got <what is there>
/// (<path>)". Links are not followed: replacing a link would not write where
/// it points, and writing where it points could reach any file.
void check_output_file(const std::string& path, const OutputFileRule& rule);

/// Whether `path` is a regular file (not followed through a link) whose first
/// bytes are `head` and last bytes `tail`. Reads only those bytes, never blocks
/// on a FIFO or a device; false on any error.
bool file_has_head_and_tail(const std::string& path, const std::string& head, const std::string& tail);

/// Whether `path` is `folder` or lies under it, comparing the paths with their
/// links resolved as far as they exist (so "out/../out/x" and a link to out
/// count).
bool path_within(const std::string& path, const std::string& folder);

/// Refuses a folder `folder` (given as `flag`: "--out", "--cache") that is
/// the dataset folder `data` the command reads, or lies inside it: dbh never
/// writes into the user's data (a later scan, copy or cache key would see
/// its files). Nothing when `data` is empty. Throws UsageError "<where>:
/// <flag> <folder>: expected a folder outside the dataset <data>, got one
/// inside it".
/// The comparison is by identity (device and inode of `folder`'s existing
/// ancestors against the dataset folder's and those of the folders its
/// entries link to), so a link into the dataset, a link out of it (images/
/// on another disk) or a bind mount is seen.
void check_outside_dataset(const std::string& where, const std::string& flag, const std::string& folder,
                           const std::string& data);

/// check_outside_dataset for each of `datasets` (a scenario's
/// dataset_folders: training and validation).
void check_outside_datasets(const std::string& where, const std::string& flag, const std::string& folder,
                            const std::vector<std::string>& datasets);

/// Whether `path` (existing or to be created) lies in `folder` or in a folder
/// linked from within it, by identity (see check_outside_dataset).
bool within_by_identity(const std::string& path, const std::string& folder);

/// Whether `a` and `b` name the same existing file (links followed).
bool same_file(const std::string& a, const std::string& b);

/// The output folder of a command run without --out, relative to the working
/// directory: reports/runs/<label>-<YYYYmmdd-HHMMSS>-<pid> (the pid keeps two
/// commands started in the same second apart). `label` names the command and
/// what it ran ("bisect-steps-seed-002"); characters that do not belong in a
/// file name are replaced.
std::string default_output_folder(const std::string& label);

/// The probe cache of a command run without --cache: cache_root()/probes
/// ($DBH_CACHE_DIR, $XDG_CACHE_HOME/dbh or ~/.cache/dbh), or, with none of
/// them set, reports/cache/probes made absolute.
std::string default_probe_cache();

}  // namespace dbh::harness

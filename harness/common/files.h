#pragma once

#include <cstddef>
#include <string>

namespace dbh::harness {

/// Largest scenario, include or annotation file dbh reads as text.
inline constexpr size_t kMaxInputFileBytes = 4u << 20;

/// What a path is, in words ("a directory", "a FIFO", "a symlink loop", …),
/// following links; "none" when it does not exist.
std::string describe_path(const std::string& path);

/// Checks that `path` is a regular file dbh can read, before anything is
/// written or started. Throws ScenarioError "<where>: <key>: expected <what>,
/// got …" naming the path, what it is instead (a directory, a FIFO, a device,
/// a symlink loop, nothing) or the errno of the failed open.
void check_input_file(const std::string& path, const std::string& what, const std::string& where = "",
                      const std::string& key = "");

/// Checks that `path` is a complete LibTorch checkpoint or weights file (a
/// zip archive with its end record: a file cut short by an interrupted copy
/// or a full disk has none), as check_input_file does first.
void check_checkpoint_file(const std::string& path, const std::string& where = "", const std::string& key = "");

/// Reads a regular file of at most `max_bytes` (never blocks on a FIFO or a
/// device, never reads without bound). Throws ScenarioError as
/// check_input_file does, or when the file is larger than `max_bytes`.
std::string read_input_file(const std::string& path, const std::string& what,
                            size_t max_bytes = kMaxInputFileBytes);

/// Writes `text` to `path` so that readers see the old file or the whole new
/// one, never a torn one, and a full disk leaves no partial file: written to
/// `<path>.tmp.<pid>` (same directory, so two processes writing the same file
/// never share a temporary), fsync'd, renamed over `path`, then the directory
/// fsync'd so the rename survives a crash. Throws ReportError naming the path
/// and the system's reason; the temporary file is removed on failure.
void write_file_atomically(const std::string& path, const std::string& text);

/// Puts the complete file `tmp` (written by someone else, e.g. LibTorch) in
/// place of `path` as write_file_atomically does: fsyncs `tmp`, renames it
/// over `path` and fsyncs the directory. `tmp` must be in the same directory
/// as `path`. Throws ReportError naming `path` and the system's reason (and
/// leaves `tmp` for the caller to remove).
void replace_file_atomically(const std::string& tmp, const std::string& path);

}  // namespace dbh::harness

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

}  // namespace dbh::harness

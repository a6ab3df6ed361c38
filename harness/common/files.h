#pragma once

#include <cstddef>
#include <optional>
#include <vector>
#include <string>

namespace dbh::harness {

/// Largest scenario, include or annotation file dbh reads as text.
inline constexpr size_t kMaxInputFileBytes = 4u << 20;

/// `path` as a command dbh prints names it: absolute and normalised, so the
/// line runs as pasted from any folder (a CI log is read far from the
/// working directory); `path` itself when it has no absolute form.
std::string path_for_command(const std::string& path);

/// What a path is, in words ("a directory", "a FIFO", "a symlink loop", …),
/// following links; "none" when it does not exist.
std::string describe_path(const std::string& path);

/// What a file of mode `mode` (stat's st_mode) is, for messages: "a regular
/// file", "a directory", "a symbolic link", "a FIFO", … .
std::string file_kind(unsigned int mode);

/// Checks that `path` is a regular file dbh can read, before anything is
/// written or started. Throws ScenarioError "<where>: <key>: expected <what>,
/// got …" naming the path, what it is instead (a directory, a FIFO, a device,
/// a symlink loop, nothing) or the errno of the failed open.
void check_input_file(const std::string& path, const std::string& what, const std::string& where = "",
                      const std::string& key = "");

/// `path` as it is now, for a cache key: its resolved name, modification and
/// change times, inode and size (a folder's times change with its listing).
/// Nothing at `path` is a state too.
std::string file_state(const std::string& path);

/// Checks that `path` is a complete LibTorch checkpoint or weights file (a
/// zip archive with its end record: a file cut short by an interrupted copy
/// or a full disk has none), as check_input_file does first.
void check_checkpoint_file(const std::string& path, const std::string& where = "", const std::string& key = "");

/// Reads a regular file of at most `max_bytes` (never blocks on a FIFO or a
/// device, never reads without bound). Throws ScenarioError as
/// check_input_file does, or when the file is larger than `max_bytes`.
std::string read_input_file(const std::string& path, const std::string& what,
                            size_t max_bytes = kMaxInputFileBytes);

/// The same open-for-reading for what dbh or an earlier run wrote and may
/// find replaced (probe-cache entries, a suite's reports, hashed inputs):
/// the contents of a regular file of at most `max_bytes`, or nullopt when the
/// path is missing, is not a regular file (a FIFO, a device, a folder) or is
/// larger; never blocks, never throws.
std::optional<std::string> read_regular_file(const std::string& path, size_t max_bytes);

// Note [Never through a link]: dbh writes only inside its output and cache
// folders, and a folder it reuses may hold links someone else put there
// (`main/stdout.log -> ~/thesis.tex`, `main -> ~`). So every file dbh makes
// there is created anew, never written through what was at its name: the old
// entry (a file of an earlier run, a link, a FIFO) is unlinked, the name and
// never its target, and the file is created with O_CREAT | O_EXCL |
// O_NOFOLLOW in a folder opened without following links. Below an output
// root (the folder an OutputDir holds, the worker's run folder) every folder
// on the way is entered with O_NOFOLLOW too: a link there (dbh never makes
// one on the way to a file it writes) would lead out of the folder, and is
// refused. The root itself may be a link: it is the user's choice.

/// Marks `root` as a folder this process writes in (Note [Never through a
/// link]) until remove_output_root(root). Roots may nest; the innermost one
/// holding a path applies. Thread-safe.
void add_output_root(const std::string& root);
/// Undoes one add_output_root(root).
void remove_output_root(const std::string& root);

/// Creates `path` as a new, empty regular file (mode 0644) open for writing
/// (O_WRONLY | O_CLOEXEC | `extra_flags`), never writing through what was at
/// that name (Note [Never through a link]). Returns the descriptor, or -1
/// with errno set: EISDIR when a folder is at `path`, ENOTDIR or ELOOP when a
/// folder on the way below an output root is a link or not a folder.
int create_file_no_follow(const std::string& path, int extra_flags = 0);

/// Writes all of `data` to `fd`, retrying short writes and EINTR. Returns 0 or
/// the errno of the failed write.
int write_all(int fd, const char* data, size_t size);

/// Makes `path` a folder dbh may write in: creates what is missing (as
/// std::filesystem::create_directories) and refuses a link or a non-folder at
/// `path` itself and at every folder below the output root holding it (Note
/// [Never through a link]). Throws ReportError "<path>: expected a folder dbh
/// can write in, got a symlink (to …)" naming what is there instead.
void make_directories_no_follow(const std::string& path);

/// The program a spawn runs for `program`, as execvp would find it but with
/// the PATH the program is started with (`path_var`; glibc's "/bin:/usr/bin"
/// when it is unset) and relative names resolved against `cwd`, the
/// program's working directory: a name with a slash is that file, a bare name
/// the first regular executable file of that name in `path_var`'s folders.
/// "" when none is found (Note [dbh owns its names]: the file dbh hashes and
/// the file it starts are one).
std::string find_program(const std::string& program, const std::optional<std::string>& path_var,
                         const std::string& cwd);

/// The value of PATH among an environment's "NAME=value" words (the last
/// one), or nullopt when it has none: what find_program's `path_var` is.
std::optional<std::string> path_variable(const std::vector<std::string>& env);

/// Writes `text` to `path` so that readers see the old file or the whole new
/// one, never a torn one, and a full disk leaves no partial file: written to
/// `<path>.tmp.<pid>` (same directory, so two processes writing the same file
/// never share a temporary), fsync'd, renamed over `path`, then the directory
/// fsync'd so the rename survives a crash. The temporary is created and
/// renamed as create_file_no_follow does: a link at `path` is replaced, never
/// written through. Throws ReportError naming the path and the system's
/// reason; the temporary file is removed on failure.
void write_file_atomically(const std::string& path, const std::string& text);

/// Puts the complete file `tmp` (written by someone else, e.g. LibTorch) in
/// place of `path` as write_file_atomically does: fsyncs `tmp`, renames it
/// over `path` and fsyncs the directory. `tmp` must be in the same directory
/// as `path`. Throws ReportError naming `path` and the system's reason (and
/// leaves `tmp` for the caller to remove).
void replace_file_atomically(const std::string& tmp, const std::string& path);

}  // namespace dbh::harness

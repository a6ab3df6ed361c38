#pragma once

#include <sys/types.h>

#include <cstdint>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/paths.h"

namespace dbh::testing {

/// The dbh under test: the one beside this program when there is one (a bin
/// folder carried to another machine, as scripts/gpu-check.sh carries it to
/// the GPU machine), else the build's.
inline std::string dbh_binary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && std::filesystem::is_regular_file(self.parent_path() / "dbh", ec)) return (self.parent_path() / "dbh").string();
  return DBH_BINARY;
}

/// The result of running a program to completion.
struct ProcessResult {
  int exit_code = -1;    // valid when term_signal == 0
  int term_signal = 0;   // signal that ended the process, or 0
  bool timed_out = false;
  std::string out;       // standard output
  std::string err;       // standard error
  int64_t peak_rss_bytes = 0;  // run_process: the largest resident size of the process (getrusage's ru_maxrss)
};

/// Runs `argv` (argv[0] is a path) with the working directory `cwd`, waits up
/// to `timeout_s` seconds, then sends `timeout_signal` (SIGKILL by default;
/// after any other signal it waits up to 60 s more for the process to finish
/// on its own, then kills it), and captures both output streams.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::string& cwd = "", double timeout_s = 300, int timeout_signal = 9);

/// Changes to the environment of a child: a value sets the variable,
/// std::nullopt removes it; every other variable is inherited.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

/// As run_process, with this process's environment changed by `env`.
ProcessResult run_process_with_env(const std::vector<std::string>& argv, const EnvChanges& env,
                                   const std::string& cwd = "", double timeout_s = 300,
                                   int timeout_signal = 9);

/// Starts `argv` (argv[0] is a path) without waiting for it, with the working
/// directory `cwd`, standard input from /dev/null and both output streams
/// appended to `log_path` (/dev/null when empty). Throws std::runtime_error
/// when it cannot start. Reap it with wait_process.
pid_t spawn_process(const std::vector<std::string>& argv, const std::string& cwd = "",
                    const std::string& log_path = "");

/// Waits up to `timeout_s` seconds for `pid` (started by spawn_process) to
/// end; when it is still running then, kills it (SIGKILL) and sets
/// `timed_out`. Always reaps it. `out` and `err` stay empty.
ProcessResult wait_process(pid_t pid, double timeout_s);

/// Pids of the live processes whose command line (/proc/PID/cmdline, the
/// arguments joined by spaces) contains every one of `needles`; never this
/// process.
std::vector<pid_t> find_processes(const std::vector<std::string>& needles);

/// The trial journals a running dbh holds open under the folder `under`, as
/// /proc/PID/fd/N paths to read them through: while a trial runs, its
/// journal is reachable by no other path (Note [dbh's files in a trial]).
std::vector<std::filesystem::path> live_journals(const std::filesystem::path& under);

}  // namespace dbh::testing

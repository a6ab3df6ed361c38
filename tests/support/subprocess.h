#pragma once

#include <string>
#include <vector>

namespace dbh::testing {

/// The result of running a program to completion.
struct ProcessResult {
  int exit_code = -1;    // valid when term_signal == 0
  int term_signal = 0;   // signal that ended the process, or 0
  bool timed_out = false;
  std::string out;       // standard output
  std::string err;       // standard error
};

/// Runs `argv` (argv[0] is a path) with the working directory `cwd`, waits up
/// to `timeout_s` seconds, then sends `timeout_signal` (SIGKILL by default;
/// after any other signal it waits up to 60 s more for the process to finish
/// on its own, then kills it), and captures both output streams.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::string& cwd = "", double timeout_s = 300, int timeout_signal = 9);

}  // namespace dbh::testing

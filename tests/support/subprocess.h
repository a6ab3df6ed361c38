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
/// to `timeout_s` seconds (then kills it), and captures both output streams.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::string& cwd = "", double timeout_s = 300);

}  // namespace dbh::testing

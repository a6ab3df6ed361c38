#pragma once

#include <string>
#include <vector>

namespace dbh::harness {

struct RunOptions {
  std::vector<std::string> scenarios;  // files (run: one; suite: many / a folder)
  std::vector<std::string> overrides;  // key=value
  std::string out;                     // output folder
  std::string device;                  // --device shortcut for hardware.device=
  std::string seed;                    // --seed shortcut for train.seed=
  std::string junit;                   // JUnit XML file
  bool json = false;                   // print report.json on stdout
  bool quiet = false;
  bool verbose = false;
  bool withhold_fault_records = false; // attribution test hook (hidden)
};

/// `dbh run SCENARIO [key=value …]`: 0 expectation met, 1 not met, 2 bad
/// scenario/override/CLI input, 3 internal error.
int run_command(const RunOptions& options);
/// `dbh suite DIR|FILES…`: runs every scenario; 0 when all expectations hold.
int suite_command(const RunOptions& options);
/// `dbh list faults|scenarios`.
int list_command(const std::string& what, const std::string& dir);

}  // namespace dbh::harness

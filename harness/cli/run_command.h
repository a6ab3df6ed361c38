#pragma once

#include <string>
#include <vector>

namespace dbh::harness::cli {

struct RunOptions {
  std::vector<std::string> scenarios;  // files (run: one; suite: many / a folder)
  std::vector<std::string> overrides;  // key=value
  std::string out;                     // output folder
  std::string device;                  // --device shortcut for hardware.device=
  std::string seed;                    // --seed shortcut for train.seed=
  std::string junit;                   // JUnit XML file
  std::string record;                  // repeat: the numerics reference to write (Note [A numerics reference])
  bool json = false;                   // print report.json on stdout
  bool quiet = false;
  bool verbose = false;
  bool no_progress = false;            // no live step progress lines
  bool print_config = false;           // print the resolved scenario(s), run nothing
  bool verify_resolutions = false;     // try the failure's resolutions as control runs
  bool withhold_fault_records = false; // attribution test hook (hidden)
  bool resume = false;                 // suite: skip finished scenarios
  std::string shard;                   // suite: "K/N"
  int64_t shard_count = 0;             // suite: count for Kubernetes indexed Jobs
};

/// `dbh run SCENARIO [key=value …]`: 0 expectation met, 1 not met, 2 bad
/// scenario/override/CLI input, 3 internal error.
int run_command(const RunOptions& options);
/// `dbh suite DIR|FILES…`: runs every scenario; 0 when all expectations hold.
int suite_command(const RunOptions& options);

}  // namespace dbh::harness::cli

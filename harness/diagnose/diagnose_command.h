#pragma once
// `dbh diagnose`: the diagnosis ladder's rungs run as probes (probe/probe.h),
// judged by diagnose/hypotheses.h, with the bisection called for its answer.

#include <cstdint>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace dbh::harness::diagnose {

struct DiagnoseOptions {
  std::string scenario;
  std::vector<std::string> overrides;
  std::string out;
  std::string cache_dir;
  bool quiet = false;
  int64_t jobs = 0;  // --jobs: probes at once (Note [Probes ahead, in parallel]); 0: probe::default_jobs
  int64_t max_probes = 0;  // --max-probes: the budget beyond the ladder (rungs.h ProbeBudget); 0: none
  scenario::InputChecks checks;  // what loading the scenario checks beyond its keys
};

/// `dbh diagnose SCENARIO`: the diagnosis ladder, a what-works/what-fails
/// table, ranked hypotheses, next steps and a minimal repro scenario.
int diagnose_command(const DiagnoseOptions& options);

}  // namespace dbh::harness::diagnose

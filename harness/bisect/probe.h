#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/bisect/search.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness {

/// One probe: an isolated trial of a scenario with extra overrides.
struct ProbeResult {
  int64_t index = 0;
  std::string what;                    // human description ("max_steps=5")
  std::vector<std::string> overrides;  // the probe's own overrides
  Verdict verdict = Verdict::kUnknown;
  TrialAnalysis analysis;
  double seconds = 0;
  bool cached = false;
  std::string hash;  // resolved-scenario hash
  std::string dir;
};

/// Runs probes as isolated worker trials (so crashes and sticky CUDA errors
/// cannot stop a search), caches them by resolved-scenario hash (in memory
/// and under `cache_dir`) and prints each one as it goes.
class Prober {
 public:
  Prober(std::string scenario_path, std::vector<std::string> base_overrides, std::string out_dir,
         std::string cache_dir, bool quiet);

  /// Probes the scenario with `extra` overrides on top of the base ones.
  /// A probe fails when the trial's outcome is a failure; an unresolved
  /// trial is kUnknown.
  ProbeResult probe(const std::vector<std::string>& extra, const std::string& what);
  /// Probes `k` times (different process each time, cache bypassed) and
  /// fails if any repetition fails.
  ProbeResult probe_repeated(const std::vector<std::string>& extra, const std::string& what, int64_t k);

  const std::vector<ProbeResult>& history() const { return history_; }
  const std::string& scenario_path() const { return scenario_path_; }
  const std::vector<std::string>& base_overrides() const { return base_overrides_; }
  Scenario load(const std::vector<std::string>& extra) const;

 private:
  ProbeResult run(const std::vector<std::string>& extra, const std::string& what, bool use_cache,
                  int64_t repetition);

  std::string scenario_path_;
  std::vector<std::string> base_overrides_;
  std::string out_dir_;
  std::string cache_dir_;
  bool quiet_;
  std::vector<ProbeResult> history_;
  std::map<std::string, ProbeResult> cache_;
};

/// Runs one supervised trial of `s` in `dir` (shared by `dbh run` and the
/// probes). `label` prefixes progress lines; `on_line` prints them.
TrialAnalysis run_scenario_trial(const Scenario& s, const std::string& dir, int64_t index,
                                 bool withhold_fault_records, std::string* stderr_tail,
                                 const std::function<void(const Event&)>& on_event);

/// The path of the running dbh binary.
std::string self_exe();

}  // namespace dbh::harness

#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace dbh::harness::bisect {

/// What a bisection searches: the first failing step, the module in it, the
/// samples, the configuration difference, or a numeric key's boundary.
enum class BisectKind { kSteps, kModules, kData, kConfig, kRange };
/// Each kind's name on the command line and in outputs, in the enum's order.
inline constexpr std::array<const char*, 5> kBisectKindNames = {"steps", "modules", "data", "config", "range"};
std::string to_string(BisectKind kind);

struct BisectOptions {
  BisectKind kind = BisectKind::kSteps;
  std::string scenario;                // scenario file (optional for config)
  std::vector<std::string> overrides;  // key=value on top of the scenario
  std::vector<std::string> good, bad;  // config: scenario files or key=value sets
  /// config: `bad` holds the scenario's overrides, one per entry, as a
  /// caller that loaded the scenario has them (diagnose), not the words of
  /// a command line in the worker command's own syntax.
  bool bad_as_overrides = false;
  std::string key;                     // range: the numeric key
  std::string lo, hi;                  // range: the interval
  std::string out;
  std::string cache_dir;               // probe cache (default default_probe_cache())
  double alpha = 0.05;                 // accepted probability of missing a flaky failure
  int64_t reproductions = 3;           // runs to measure the reproduction rate
  bool keep_checkpoints = false;       // keep the reproduction's checkpoints after the search
  bool replay_from_start = false;      // steps, modules: write no checkpoints, replay every prefix from step 0
  bool quiet = false;
  /// Probes at once (Note [Probes ahead, in parallel]): config and data run
  /// each ddmin round's probes ahead, beside the search's own.
  int64_t jobs = 0;  // 0: probe::default_jobs
  scenario::InputChecks checks;                  // what loading the scenario checks beyond its keys
};

/// A bisection's answer as a value, for a caller that acts on it (diagnose's
/// follow-up) without reading bisect.json back.
struct BisectAnswer {
  BisectKind kind = BisectKind::kSteps;
  bool confident = false;
  bool confirmed = false;
  double confidence = 0;
  std::vector<std::string> doubts;
  std::string summary;  // the answer in words (Markdown)
  std::string repro;    // the command that reproduces the minimal failure
  std::string method;   // data: "ddmin", "the read that raised" or "named by the failure"
  bool before_training = false;  // data: named before any step trained (no training-time repro)
  std::vector<int64_t> samples;  // data: every sample of the answer, by dataset index
  std::vector<std::string> difference;  // config: the minimal difference, as dbh's overrides
};

/// `dbh bisect KIND …`: prints each probe as it runs, writes bisect.json,
/// bisect.md and bisect.html (the same page for a browser) under the output
/// folder, and ends with a one-line command that reproduces the minimal
/// failure. Every answer is confirmed by fresh probes before it is reported
/// as confident. Exit 0 for a confident answer, 1 when the failure did not
/// reproduce, no answer could be given or the answer is unsure, 2 on bad input
/// or an infrastructure failure of a probe (full disk, a worker that cannot
/// start).
/// `answer` (when given) receives the answer of a bisection that ended with
/// one (exit 0 or 1).
int bisect_command(const BisectOptions& options, BisectAnswer* answer = nullptr);

}  // namespace dbh::harness::bisect

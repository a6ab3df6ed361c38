#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/probe/verdict.h"

namespace dbh::harness::bisect {

/// Result of a boundary search over integers.
struct BoundaryResult {
  /// The smallest value that fails (with every smaller probed value passing).
  std::optional<int64_t> first_fail;
  /// The largest value that passes.
  std::optional<int64_t> last_pass;
  int64_t probes = 0;
  std::string note;  // why there is no answer, when there is none
};

/// Finds the boundary of a monotone predicate on [lo, hi]: `fails(x)` is
/// false below the boundary and true from it on. Assumes `fails(hi)` (and
/// probes it only if `check_ends`). Uses at most ⌈log2(hi − lo + 1)⌉ probes
/// after the ends.
BoundaryResult find_first_failing(int64_t lo, int64_t hi,
                                  const std::function<probe::Verdict(int64_t)>& fails,
                                  bool check_ends = false);

/// Delta debugging (Zeller's ddmin) over item indices 0..n-1. `test` returns
/// kFail when the subset still fails. The result fails and is 1-minimal:
/// removing any single element makes it pass (or undecidable).
struct DdminResult {
  std::vector<size_t> minimal;
  int64_t probes = 0;
  bool reproduced = true;  // false when the full set did not fail
};
/// `ahead`, when given, hears before each round the subsets the round will
/// test, in the order it tests them until one fails (the whole set with the
/// first round's halves; then each round's parts and, past granularity 2,
/// its complements), so a caller can start them in parallel (Note [Probes
/// ahead, in parallel] in probe/probe.h). It changes nothing of what is
/// tested or decided.
using Upcoming = std::function<void(const std::vector<std::vector<size_t>>&)>;
DdminResult ddmin(size_t n, const std::function<probe::Verdict(const std::vector<size_t>&)>& test,
                  const Upcoming& ahead = nullptr);

/// Repetitions a probe needs so that a failure reproducing with probability
/// `rate` per trial is missed with probability at most `alpha`:
/// ⌈log(alpha) / log(1 − rate)⌉ (1 for a deterministic failure).
int64_t repetitions_for(double rate, double alpha);

/// Repeats `probe` up to `k` times and fails as soon as one repetition fails
/// (a passing verdict needs k passes; a repetition that failed differently
/// or could not decide makes it kDifferent or kUnknown instead). `runs`
/// receives the repetitions used.
probe::Verdict repeat_probe(const std::function<probe::Verdict()>& probe, int64_t k, int64_t* runs = nullptr);

}  // namespace dbh::harness::bisect

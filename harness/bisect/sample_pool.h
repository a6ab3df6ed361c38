#pragma once
// The samples a data bisection searches (bisect/'s own files only).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "model/data/scan.h"

namespace dbh::harness::bisect {

// Note [Every bad sample]: at most this many samples the failing run never
// reached are searched.
inline constexpr size_t kUnreachedSearched = 256;

// Note [Samples as the loader reads them]: dbh's worker reads its dataset in
// dbh's order (model::batch_indices), so the samples a failing run consumed
// are computed. An external worker's loader reads the worker's own dataset in
// its own order (its sampler and generator, workers reading ahead, Lightning
// one batch early): dbh never assumes its order there. The adapter's dataset
// wrapper reports every index it reads (`sample_read`, from the loader's
// processes too) and the one whose read raised, and data.subset holds the
// worker's own indices. The search runs over the samples the failing run read
// (a superset of what it trained on); a read that raised is tried alone first,
// so one probe names it and is its confirmation; a worker that reports no
// reads but its dataset's size gets every sample searched, and the answer says
// so; one that reports neither cannot be bisected over its data.
struct SamplePool {
  std::vector<int64_t> consumed;   // the samples to search, sorted
  std::vector<int64_t> unreached;  // the dataset's other samples, when at most kUnreachedSearched (else none)
  std::vector<int64_t> unreached_first;  // the first kUnreachedSearched of them, however many there are
  size_t unreached_count = 0;      // how many there are
  int64_t dataset_size = 0;
  std::optional<int64_t> raised;  // the sample whose read raised (an external worker's report)
  std::string how;                // how `consumed` is known, for the details

  // The samples not in `seen`: counted, listed only when few enough to search.
  void set_unreached(const std::set<int64_t>& seen);
};

/// The samples dbh's worker consumed up to `last_step`, in dbh's order.
SamplePool pool_from_sampler(const scenario::Scenario& s, const model::ScanResult& scan, int64_t last_step);
/// The samples an external worker reported reading (or, with only its
/// dataset's size, every sample). Throws ScenarioError when it reported neither.
SamplePool pool_from_worker(const supervisor::TrialAnalysis& a);

}  // namespace dbh::harness::bisect

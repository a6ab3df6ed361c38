#include "harness/bisect/sample_pool.h"

#include <algorithm>
#include <iterator>

#include "harness/common/error.h"

namespace dbh::harness::bisect {

void SamplePool::set_unreached(const std::set<int64_t>& seen) {
  unreached_count = static_cast<size_t>(dataset_size - std::distance(seen.lower_bound(0), seen.lower_bound(dataset_size)));
  for (int64_t i = 0; i < dataset_size && unreached_first.size() < kUnreachedSearched; ++i) {
    if (!seen.count(i)) unreached_first.push_back(i);
  }
  if (unreached_count <= kUnreachedSearched) unreached = unreached_first;
}

SamplePool pool_from_sampler(const scenario::Scenario& s, const model::ScanResult& scan, int64_t last_step) {
  SamplePool p;
  std::set<int64_t> seen;
  p.dataset_size = static_cast<int64_t>(scan.images.size());
  for (int64_t micro = 0; micro < (last_step + 1) * s.train.accumulation; ++micro) {
    for (const int64_t i : model::batch_indices(p.dataset_size, s.data.batch_size, s.train.seed, micro)) {
      if (seen.insert(i).second) p.consumed.push_back(i);
    }
  }
  std::sort(p.consumed.begin(), p.consumed.end());
  p.set_unreached(seen);
  p.how = "the failing run consumed " + std::to_string(p.consumed.size()) + " samples up to step " +
          std::to_string(last_step);
  return p;
}

SamplePool pool_from_worker(const supervisor::TrialAnalysis& a) {
  SamplePool p;
  p.raised = a.failed_sample;
  p.consumed = a.samples_read;
  if (!p.consumed.empty()) {
    p.dataset_size = a.dataset_size.value_or(p.consumed.back() + 1);
    p.set_unreached(std::set<int64_t>(p.consumed.begin(), p.consumed.end()));
    p.how = "the worker's loader read " + std::to_string(p.consumed.size()) + " of its " +
            (a.dataset_size ? std::to_string(*a.dataset_size) + " " : "") + "samples in the failing run";
    return p;
  }
  if (!a.dataset_size || *a.dataset_size <= 0) {
    throw ScenarioError(
        "bisect data: expected the worker to report the samples its loader reads (`sample_read` events, or its "
        "dataset's size in a `dataset` event), got neither: wrap the training set with the adapter's "
        "`dbh.dataset(...)` (docs/worker-protocol.md, \"subset\"); dbh does not assume its own order of the samples");
  }
  if (*a.dataset_size > static_cast<int64_t>(supervisor::kMaxSamplesRead)) {  // Note [A claimed size is a claim]
    throw ScenarioError("bisect data: expected the worker to report the samples its loader reads for a dataset of "
                        "over " + std::to_string(supervisor::kMaxSamplesRead) + " samples, got only its size (" +
                        std::to_string(*a.dataset_size) + "): wrap the training set with `dbh.dataset(...)`");
  }
  p.dataset_size = *a.dataset_size;
  for (int64_t i = 0; i < p.dataset_size; ++i) p.consumed.push_back(i);
  p.how = "the worker reported no sample its loader read (only its dataset's size): every one of its " +
          std::to_string(p.dataset_size) + " samples is searched";
  return p;
}

}  // namespace dbh::harness::bisect

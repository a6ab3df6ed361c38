#include "harness/qualify/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "harness/bisect/search.h"
#include "harness/scenario/scenario.h"  // format_bytes

namespace dbh::harness::qualify {

namespace {

// The largest divisor of the effective batch up to `b`: it keeps batch ×
// accumulation equal to the source's.
int64_t largest_divisor_up_to(int64_t effective, int64_t b) {
  while (b > 1 && effective % b != 0) --b;
  return b;
}

// The search's answer, `max_batch` (0: none), and what is known of it: a
// measured trial, the confirmation, or the affine model's peak.
void set_answer(PrecisionSearchResult& rec, int64_t max_batch, const std::map<int64_t, QualifyTrial>& seen) {
  rec.max_batch = max_batch;
  if (max_batch <= 0) return;
  const auto it = seen.find(max_batch);
  rec.max_measured = it != seen.end() || rec.confirm.batch == max_batch;
  rec.at_max = it != seen.end() ? it->second : rec.confirm;
  if (it == seen.end() && rec.bytes_per_sample > 0) {
    rec.at_max.peak = rec.fixed_bytes + static_cast<int64_t>(rec.bytes_per_sample * static_cast<double>(max_batch));
  }
}

// One precision's search (Note [Source first]): the state the steps share,
// every trial measured once (`seen`), and the steps in order in run().
class PrecisionSearch {
 public:
  PrecisionSearch(const PrecisionSearchInput& in, const PrecisionSearchTrials& trials)
      : in_(in), trials_(trials), effective_(in.effective), capacity_(0) {
    rec_.precision = in.precision;
  }

  PrecisionSearchResult run() {
    const bool source_line = in_.precision == in_.source_precision && in_.source_batch > 1;
    const std::optional<std::pair<int64_t, int64_t>> p_hi = second_point(source_line);
    const bool small_fits = verdict(1) == probe::Verdict::kPass;
    capacity_ = static_cast<double>(in_.margined - rec_.context);
    int64_t predicted = 0;
    if (small_fits && p_hi && p_hi->first > 1 && p_hi->second > seen_[1].peak) {
      predicted = fit(p_hi->first, p_hi->second);
    } else if (small_fits && source_line && in_.source_out_of_memory) {
      predicted = predict_below_the_source();
    }
    int64_t max_batch = 0;
    if (predicted > 0 && rec_.confirmed) {
      max_batch = predicted;
    } else if (predicted > 0) {
      rec_.method = "affine model";
      if (confirm_prediction(predicted)) max_batch = predicted;
    }
    if (!rec_.confirmed && small_fits) max_batch = binary_search(predicted);
    set_answer(rec_, rec_.confirmed ? max_batch : 0, seen_);
    return rec_;
  }

 private:
  const QualifyTrial& measure(int64_t b) {
    QualifyTrial t = trials_.measure(b);
    ++rec_.probes;
    if (t.context) rec_.context = *t.context;
    rec_.measured.push_back(t);
    seen_[b] = std::move(t);
    return seen_[b];
  }

  probe::Verdict verdict(int64_t b) {
    if (const auto it = seen_.find(b); it != seen_.end()) {
      return it->second.passed ? probe::Verdict::kPass : probe::Verdict::kFail;
    }
    return measure(b).passed ? probe::Verdict::kPass : probe::Verdict::kFail;
  }

  int64_t divisor_up_to(int64_t b) const { return largest_divisor_up_to(effective_, b); }

  // Note [The margin holds for the answer]: a confirmation runs under the
  // full budget, so that a batch the margined search predicted is known to
  // train; it is the answer only when its peak, with what was in use before
  // the allocator, leaves the margin free. Else (an H100 run of seed 003:
  // 8 × 2 peaked at 11.0 GiB plus 0.6 GiB of context on a 12 GiB card whose
  // margin keeps 1.2 GiB free) the search goes on below it.
  bool keeps_margin(const QualifyTrial& t) {
    const int64_t context = rec_.context;
    if (t.peak + context <= in_.margined) return true;
    rec_.how += std::string(rec_.how.empty() ? "" : "; ") + std::to_string(t.batch) + " × " +
                std::to_string(t.accumulation) + " trained, but its peak of " + scenario::format_bytes(t.peak) +
                (context > 0 ? " (plus " + scenario::format_bytes(context) + " in use before the allocator)" : "") +
                " left less than the margin free (" + scenario::format_bytes(in_.margined) + " usable)";
    return false;
  }

  // A confirmation runs fresh (never answered from a cache); one that
  // trained past the margin is kept by batch, as the binary search may land
  // on it again, and is not run twice.
  bool confirm(int64_t batch) {
    if (const auto it = over_margin_.find(batch); it != over_margin_.end()) {
      rec_.confirm = it->second;
      rec_.confirmed = false;
      return false;
    }
    rec_.confirm = trials_.confirm(batch, effective_ / batch);
    ++rec_.probes;
    rec_.confirmed = rec_.confirm.passed && keeps_margin(rec_.confirm);
    if (rec_.confirm.passed && !rec_.confirmed) over_margin_[batch] = rec_.confirm;
    return rec_.confirmed;
  }

  // Two points: the source (its precision, when it fits) or batch 2, and
  // batch 1; or, when the source ran out of memory, batch 1 and the bound
  // its failure sets (Note [Source first]). The second point, if any.
  std::optional<std::pair<int64_t, int64_t>> second_point(bool source_line) {
    if (source_line && in_.source.passed) return std::make_pair(in_.source_batch, in_.source.peak);
    if (!(source_line && in_.source_out_of_memory) && measure(std::min<int64_t>(2, effective_)).passed &&
        effective_ >= 2) {
      return std::make_pair(int64_t{2}, seen_[2].peak);
    }
    return std::nullopt;
  }

  // The line through batch 1 and a second point: memory per sample and fixed
  // memory, and the largest batch within the margined budget.
  int64_t fit(int64_t batch, int64_t peak) {
    const double k = static_cast<double>(peak - seen_[1].peak) / static_cast<double>(batch - 1);
    const double a = static_cast<double>(seen_[1].peak) - k;
    rec_.bytes_per_sample = k;
    rec_.fixed_bytes = static_cast<int64_t>(a);
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor((capacity_ - a) / k)), 1, effective_);
  }

  // The source ran out of memory: need(source batch) > budget sets at least
  // this much per sample, so a bound below the source; its largest divisor
  // is confirmed first, and the line through it predicts.
  int64_t predict_below_the_source() {
    const int64_t context = rec_.context, budget = in_.budget;
    const double k_min = static_cast<double>(budget - context - seen_[1].peak) /
                         static_cast<double>(in_.source_batch - 1);
    const int64_t bound = std::clamp<int64_t>(
        k_min > 0 ? 1 + static_cast<int64_t>(std::floor((capacity_ - static_cast<double>(seen_[1].peak)) / k_min))
                  : in_.source_batch - 1,
        1, in_.source_batch - 1);
    const int64_t candidate = divisor_up_to(bound);
    rec_.method = "affine model";
    rec_.how = "the source ran out of memory under the budget, so it needs more than " +
               scenario::format_bytes(budget) + ": with batch 1's " + scenario::format_bytes(seen_[1].peak) +
               ", at most batch " + std::to_string(bound) + " fits the margined budget, and the largest divisor of " +
               std::to_string(effective_) + " up to it, " + std::to_string(candidate) + ", was confirmed first";
    int64_t predicted = 0;
    if (confirm(candidate)) {
      predicted = candidate > 1 && rec_.confirm.peak > seen_[1].peak
                      ? std::clamp<int64_t>(fit(candidate, rec_.confirm.peak), candidate, in_.source_batch - 1)
                      : candidate;
    }
    if (predicted > 0) {
      rec_.source_need =
          rec_.fixed_bytes + static_cast<int64_t>(rec_.bytes_per_sample * static_cast<double>(in_.source_batch));
    }
    return predicted;
  }

  // The predicted batch's largest divisor confirmed (the source itself when
  // it is that run).
  bool confirm_prediction(int64_t predicted) {
    const int64_t batch = divisor_up_to(predicted);
    const bool reused = in_.precision == in_.source_precision && batch == in_.source_batch &&
                        effective_ / batch == in_.source_accumulation;
    if (reused && in_.source.passed) {
      rec_.confirm = in_.source;
      rec_.confirmed = keeps_margin(in_.source);
      if (!rec_.confirmed) over_margin_[batch] = in_.source;
    } else {
      confirm(batch);
    }
    return rec_.confirmed;
  }

  // The prediction missed: binary search for the first failing batch. Both
  // ends measured: the top may pass too (batch 1 is the whole range when the
  // effective batch is 1), and is then the answer.
  int64_t binary_search(int64_t predicted) {
    rec_.method = predicted > 0 ? "affine model missed; binary search" : "binary search";
    const auto r = bisect::find_first_failing(1, effective_, [this](int64_t b) { return verdict(b); },
                                              /*check_ends=*/true);
    int64_t max_batch = r.first_fail ? *r.first_fail - 1 : effective_;
    if (max_batch <= 0) return max_batch;
    // A confirmation that trained past the margin tries the next smaller
    // divisor.
    int64_t b = divisor_up_to(max_batch);
    while (!confirm(b) && rec_.confirm.passed && b > 1) b = divisor_up_to(b - 1);
    // Below a batch that broke the margin, the largest batch known to keep
    // it is the one confirmed: the table, the checklist and the
    // recommendation name the same batch (an H100 run of seed 003 said
    // "largest batch 8, 1.7 GiB headroom" beside a recommended 4 × 4).
    if (const auto above = over_margin_.upper_bound(b);
        rec_.confirmed && above != over_margin_.end() && above->first <= max_batch) {
      max_batch = b;
    }
    return max_batch;
  }

  const PrecisionSearchInput& in_;
  const PrecisionSearchTrials& trials_;
  const int64_t effective_;
  double capacity_;
  PrecisionSearchResult rec_;
  std::map<int64_t, QualifyTrial> seen_;
  std::map<int64_t, QualifyTrial> over_margin_;
};

}  // namespace

PrecisionSearchResult search_precision(const PrecisionSearchInput& in, const PrecisionSearchTrials& trials) {
  return PrecisionSearch(in, trials).run();
}

}  // namespace dbh::harness::qualify

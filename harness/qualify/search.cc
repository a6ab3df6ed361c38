#include "harness/qualify/search.h"

#include <algorithm>
#include <cmath>
#include <map>

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

}  // namespace

PrecisionSearchResult search_precision(const PrecisionSearchInput& in, const PrecisionSearchTrials& trials) {
  PrecisionSearchResult rec;
  rec.precision = in.precision;
  const int64_t effective = in.effective, budget = in.budget, margined = in.margined;
  const QualifyTrial& source = in.source;
  std::map<int64_t, QualifyTrial> seen;
  int64_t& context = rec.context;
  auto measure = [&](int64_t b) -> const QualifyTrial& {
    QualifyTrial t = trials.measure(b);
    ++rec.probes;
    if (t.context) context = *t.context;
    rec.measured.push_back(t);
    seen[b] = std::move(t);
    return seen[b];
  };
  auto fails = [&](int64_t b) {
    if (const auto it = seen.find(b); it != seen.end()) return it->second.passed ? probe::Verdict::kPass : probe::Verdict::kFail;
    return measure(b).passed ? probe::Verdict::kPass : probe::Verdict::kFail;
  };
  // Note [The margin holds for the answer]: a confirmation runs under the
  // full budget, so that a batch the margined search predicted is known to
  // train; it is the answer only when its peak, with what was in use before
  // the allocator, leaves the margin free. Else (an H100 run of seed 003:
  // 8 × 2 peaked at 11.0 GiB plus 0.6 GiB of context on a 12 GiB card whose
  // margin keeps 1.2 GiB free) the search goes on below it.
  auto keeps_margin = [&](const QualifyTrial& t) {
    if (t.peak + context <= margined) return true;
    rec.how += std::string(rec.how.empty() ? "" : "; ") + std::to_string(t.batch) + " × " +
               std::to_string(t.accumulation) + " trained, but its peak of " + scenario::format_bytes(t.peak) +
               (context > 0 ? " (plus " + scenario::format_bytes(context) + " in use before the allocator)" : "") +
               " left less than the margin free (" + scenario::format_bytes(margined) + " usable)";
    return false;
  };
  // Confirmations that trained past the margin, by batch: the binary search
  // may land on one again, and it is not run twice.
  std::map<int64_t, QualifyTrial> over_margin;
  auto confirm = [&](int64_t batch) {
    if (const auto it = over_margin.find(batch); it != over_margin.end()) {
      rec.confirm = it->second;
      rec.confirmed = false;
      return false;
    }
    // A confirmation runs fresh: never answered from a cache.
    rec.confirm = trials.confirm(batch, effective / batch);
    ++rec.probes;
    rec.confirmed = rec.confirm.passed && keeps_margin(rec.confirm);
    if (rec.confirm.passed && !rec.confirmed) over_margin[batch] = rec.confirm;
    return rec.confirmed;
  };
  auto divisor_up_to = [effective](int64_t b) { return largest_divisor_up_to(effective, b); };

  // Two points: the source (its precision, when it fits) or batch 2, and
  // batch 1; or, when the source ran out of memory, batch 1 and the bound
  // its failure sets (Note [Source first]).
  const bool source_line = in.precision == in.source_precision && in.source_batch > 1;
  std::optional<std::pair<int64_t, int64_t>> p_hi;
  if (source_line && source.passed) {
    p_hi = {in.source_batch, source.peak};
  } else if (!(source_line && in.source_out_of_memory) && measure(std::min<int64_t>(2, effective)).passed &&
             effective >= 2) {
    p_hi = {2, seen[2].peak};
  }
  const bool small_fits = fails(1) == probe::Verdict::kPass;
  const double capacity = static_cast<double>(margined - context);
  // The line through batch 1 and a second point: memory per sample and fixed
  // memory, and the largest batch within the margined budget.
  auto fit = [&](int64_t batch, int64_t peak) {
    const double k = static_cast<double>(peak - seen[1].peak) / static_cast<double>(batch - 1);
    const double a = static_cast<double>(seen[1].peak) - k;
    rec.bytes_per_sample = k;
    rec.fixed_bytes = static_cast<int64_t>(a);
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor((capacity - a) / k)), 1, effective);
  };
  int64_t predicted = 0;
  if (small_fits && p_hi && p_hi->first > 1 && p_hi->second > seen[1].peak) {
    predicted = fit(p_hi->first, p_hi->second);
  } else if (small_fits && source_line && in.source_out_of_memory) {
    // need(source batch) > budget: at least this much per sample.
    const double k_min = static_cast<double>(budget - context - seen[1].peak) /
                         static_cast<double>(in.source_batch - 1);
    const int64_t bound = std::clamp<int64_t>(
        k_min > 0 ? 1 + static_cast<int64_t>(std::floor((capacity - static_cast<double>(seen[1].peak)) / k_min))
                  : in.source_batch - 1,
        1, in.source_batch - 1);
    const int64_t candidate = divisor_up_to(bound);
    rec.method = "affine model";
    rec.how = "the source ran out of memory under the budget, so it needs more than " + scenario::format_bytes(budget) +
              ": with batch 1's " + scenario::format_bytes(seen[1].peak) + ", at most batch " + std::to_string(bound) +
              " fits the margined budget, and the largest divisor of " + std::to_string(effective) +
              " up to it, " + std::to_string(candidate) + ", was confirmed first";
    if (confirm(candidate)) {
      predicted = candidate > 1 && rec.confirm.peak > seen[1].peak
                      ? std::clamp<int64_t>(fit(candidate, rec.confirm.peak), candidate, in.source_batch - 1)
                      : candidate;
    }
    if (predicted > 0) {
      rec.source_need =
          rec.fixed_bytes + static_cast<int64_t>(rec.bytes_per_sample * static_cast<double>(in.source_batch));
    }
  }
  int64_t max_batch = 0;
  if (predicted > 0 && rec.confirmed) {
    max_batch = predicted;
  } else if (predicted > 0) {
    rec.method = "affine model";
    const int64_t batch = divisor_up_to(predicted);
    const bool reused = in.precision == in.source_precision && batch == in.source_batch &&
                        effective / batch == in.source_accumulation;
    if (reused && source.passed) {
      rec.confirm = source;
      rec.confirmed = keeps_margin(source);
      if (!rec.confirmed) over_margin[batch] = source;
    } else {
      confirm(batch);
    }
    if (rec.confirmed) max_batch = predicted;
  }
  if (!rec.confirmed && small_fits) {
    // The prediction missed: binary search for the first failing batch.
    rec.method = predicted > 0 ? "affine model missed; binary search" : "binary search";
    // Both ends measured: the top may pass too (batch 1 is the whole range
    // when the effective batch is 1), and is then the answer.
    const auto r = bisect::find_first_failing(1, effective, fails, /*check_ends=*/true);
    max_batch = r.first_fail ? *r.first_fail - 1 : effective;
    if (max_batch > 0) {
      // A confirmation that trained past the margin tries the next smaller
      // divisor.
      int64_t b = divisor_up_to(max_batch);
      while (!confirm(b) && rec.confirm.passed && b > 1) b = divisor_up_to(b - 1);
      // Below a batch that broke the margin, the largest batch known to keep
      // it is the one confirmed: the table, the checklist and the
      // recommendation name the same batch (an H100 run of seed 003 said
      // "largest batch 8, 1.7 GiB headroom" beside a recommended 4 × 4).
      if (const auto above = over_margin.upper_bound(b);
          rec.confirmed && above != over_margin.end() && above->first <= max_batch) {
        max_batch = b;
      }
    }
  }
  set_answer(rec, rec.confirmed ? max_batch : 0, seen);
  return rec;
}

}  // namespace dbh::harness::qualify

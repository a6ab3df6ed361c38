#include "harness/bisect/search.h"

#include <algorithm>
#include <cmath>

namespace dbh::harness::bisect {

BoundaryResult find_first_failing(int64_t lo, int64_t hi,
                                  const std::function<probe::Verdict(int64_t)>& fails, bool check_ends) {
  BoundaryResult r;
  if (lo > hi) {
    r.note = "empty range";
    return r;
  }
  auto probe = [&](int64_t x) {
    ++r.probes;
    return fails(x);
  };
  if (check_ends) {
    if (probe(hi) != probe::Verdict::kFail) {
      r.note = "the upper end does not fail";
      return r;
    }
    if (probe(lo) == probe::Verdict::kFail) {
      r.first_fail = lo;
      r.note = "the lower end already fails";
      return r;
    }
  }
  // Invariant: lo passes (or is the lower bound), hi fails.
  int64_t good = check_ends ? lo : lo - 1;
  int64_t bad = hi;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    const probe::Verdict v = probe(mid);
    if (v == probe::Verdict::kFail) {
      bad = mid;
    } else if (v == probe::Verdict::kPass) {
      good = mid;
    } else {
      // Undecidable: search the half below first, as git bisect skips a commit.
      int64_t alt = mid - 1;
      probe::Verdict va = probe::Verdict::kUnknown;
      while (alt > good && (va == probe::Verdict::kUnknown || va == probe::Verdict::kDifferent)) va = probe(alt--);
      if (va == probe::Verdict::kFail) {
        bad = alt + 1;
      } else if (va == probe::Verdict::kPass) {
        good = alt + 1;
      } else {
        r.note = "probes between " + std::to_string(good) + " and " + std::to_string(bad) +
                 " could not be decided";
        break;
      }
    }
  }
  r.first_fail = bad;
  if (good >= lo) r.last_pass = good;
  return r;
}

namespace {
std::vector<std::vector<size_t>> split(const std::vector<size_t>& items, size_t n) {
  std::vector<std::vector<size_t>> parts;
  const size_t size = items.size();
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t end = start + (size - start) / (n - i);
    parts.emplace_back(items.begin() + static_cast<std::ptrdiff_t>(start),
                       items.begin() + static_cast<std::ptrdiff_t>(end));
    start = end;
  }
  return parts;
}

// The parts of one round and, past granularity 2, their complements: what
// the round tests, in order, until one fails.
std::vector<std::vector<size_t>> round_of(const std::vector<std::vector<size_t>>& parts, size_t granularity) {
  std::vector<std::vector<size_t>> out;
  for (const auto& part : parts) {
    if (!part.empty()) out.push_back(part);
  }
  if (granularity <= 2) return out;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<size_t> complement;
    for (size_t j = 0; j < parts.size(); ++j) {
      if (j != i) complement.insert(complement.end(), parts[j].begin(), parts[j].end());
    }
    out.push_back(complement);
  }
  return out;
}
}  // namespace

DdminResult ddmin(size_t n, const std::function<probe::Verdict(const std::vector<size_t>&)>& test,
                  const Upcoming& ahead) {
  DdminResult r;
  std::vector<size_t> current(n);
  for (size_t i = 0; i < n; ++i) current[i] = i;
  auto probe = [&](const std::vector<size_t>& s) {
    ++r.probes;
    return test(s);
  };
  if (ahead) {
    auto first = round_of(split(current, 2), 2);
    first.insert(first.begin(), current);
    if (n >= 2) ahead(first);
  }
  if (probe(current) != probe::Verdict::kFail) {
    r.reproduced = false;
    r.minimal = current;
    return r;
  }
  size_t granularity = 2;
  while (current.size() >= 2) {
    granularity = std::min(granularity, current.size());
    const auto parts = split(current, granularity);
    // The round: each part alone, then (past granularity 2) each complement.
    const auto round = round_of(parts, granularity);
    if (ahead) ahead(round);
    const size_t alone = static_cast<size_t>(
        std::count_if(parts.begin(), parts.end(), [](const std::vector<size_t>& p) { return !p.empty(); }));
    bool reduced = false;
    for (size_t i = 0; i < round.size(); ++i) {
      if (probe(round[i]) == probe::Verdict::kFail) {
        current = round[i];
        granularity = i < alone ? 2 : std::max<size_t>(granularity - 1, 2);
        reduced = true;
        break;
      }
    }
    if (!reduced) {
      if (granularity >= current.size()) break;  // 1-minimal
      granularity = std::min(current.size(), granularity * 2);
    }
  }
  r.minimal = current;
  return r;
}

int64_t repetitions_for(double rate, double alpha) {
  if (rate >= 1.0) return 1;
  if (rate <= 0.0) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::log(alpha) / std::log(1.0 - rate))));
}

probe::Verdict repeat_probe(const std::function<probe::Verdict()>& probe, int64_t k, int64_t* runs) {
  bool unknown = false;
  bool different = false;
  int64_t i = 0;
  for (; i < k; ++i) {
    const probe::Verdict v = probe();
    if (v == probe::Verdict::kFail) {
      if (runs) *runs = i + 1;
      return probe::Verdict::kFail;
    }
    unknown = unknown || v == probe::Verdict::kUnknown;
    different = different || v == probe::Verdict::kDifferent;
  }
  if (runs) *runs = i;
  return different ? probe::Verdict::kDifferent : unknown ? probe::Verdict::kUnknown : probe::Verdict::kPass;
}

}  // namespace dbh::harness::bisect

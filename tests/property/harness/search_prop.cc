// Properties of the bisection searches (harness/bisect/search.h).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "harness/bisect/search.h"

namespace dbh::harness {
namespace {

RC_GTEST_PROP(SearchProp, BinarySearchFindsTheBoundaryWithinLog2Probes, ()) {
  const auto n = *rc::gen::inRange<int64_t>(1, 5000);
  const auto boundary = *rc::gen::inRange<int64_t>(0, n);  // first failing value in [0, n-1]... or n-1
  const int64_t b = std::min(boundary, n - 1);
  const auto r = bisect::find_first_failing(0, n - 1, [&](int64_t x) {
    return x >= b ? probe::Verdict::kFail : probe::Verdict::kPass;
  });
  RC_ASSERT(r.first_fail.has_value());
  RC_ASSERT(*r.first_fail == b);
  const auto bound = static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(n)))) + 1;
  RC_ASSERT(r.probes <= bound);
}

RC_GTEST_PROP(SearchProp, BinarySearchWithCheckedEnds, ()) {
  const auto n = *rc::gen::inRange<int64_t>(2, 3000);
  const auto b = *rc::gen::inRange<int64_t>(1, n);  // lo = 0 passes, hi = n - 1 fails
  const int64_t boundary = std::min(b, n - 1);
  const auto r = bisect::find_first_failing(0, n - 1, [&](int64_t x) {
    return x >= boundary ? probe::Verdict::kFail : probe::Verdict::kPass;
  }, /*check_ends=*/true);
  RC_ASSERT(r.first_fail == std::optional<int64_t>(boundary));
  RC_ASSERT(r.last_pass == std::optional<int64_t>(boundary - 1));
  RC_ASSERT(r.probes <= static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(n)))) + 2);
}

RC_GTEST_PROP(SearchProp, DdminResultFailsAndIsOneMinimal, ()) {
  const auto n = *rc::gen::inRange<size_t>(1, 40);
  // A failure needs every element of some random "culprit" set (1–3 items)
  // or, alternatively, of a second one: ddmin must return a failing,
  // 1-minimal subset.
  const auto k1 = *rc::gen::inRange<size_t>(1, std::min<size_t>(3, n) + 1);
  auto culprits = *rc::gen::unique<std::vector<size_t>>(k1, rc::gen::inRange<size_t>(0, n));
  auto other = *rc::gen::unique<std::vector<size_t>>(
      *rc::gen::inRange<size_t>(1, std::min<size_t>(3, n) + 1), rc::gen::inRange<size_t>(0, n));
  auto fails = [&](const std::vector<size_t>& s) {
    const std::set<size_t> have(s.begin(), s.end());
    auto all = [&](const std::vector<size_t>& c) {
      return std::all_of(c.begin(), c.end(), [&](size_t x) { return have.count(x) > 0; });
    };
    return all(culprits) || all(other) ? probe::Verdict::kFail : probe::Verdict::kPass;
  };
  const auto r = bisect::ddmin(n, fails);
  RC_ASSERT(r.reproduced);
  RC_ASSERT(fails(r.minimal) == probe::Verdict::kFail);
  for (size_t i = 0; i < r.minimal.size(); ++i) {
    auto smaller = r.minimal;
    smaller.erase(smaller.begin() + static_cast<std::ptrdiff_t>(i));
    RC_ASSERT(fails(smaller) == probe::Verdict::kPass);
  }
}

// Note [Probes ahead, in parallel]: the hint changes nothing of what ddmin
// tests or answers, and every subset it tests was announced by the last
// hint, in the order it is tested (so the tested ones are a prefix of what a
// caller started ahead, once the earlier ones are skipped).
RC_GTEST_PROP(SearchProp, DdminAnnouncesEachRoundAndDecidesTheSame, ()) {
  const auto n = *rc::gen::inRange<size_t>(1, 30);
  auto culprits = *rc::gen::unique<std::vector<size_t>>(
      *rc::gen::inRange<size_t>(1, std::min<size_t>(3, n) + 1), rc::gen::inRange<size_t>(0, n));
  std::vector<std::vector<size_t>> tested_plain, tested_hinted, announced;
  size_t next = 0;  // the next announced subset a test may be
  auto fails_by = [&](std::vector<std::vector<size_t>>* tested, bool hinted) {
    return [&, tested, hinted](const std::vector<size_t>& s) {
      tested->push_back(s);
      if (hinted) {
        while (next < announced.size() && announced[next] != s) ++next;
        RC_ASSERT(next < announced.size());  // announced before it was tested
        ++next;
      }
      const std::set<size_t> have(s.begin(), s.end());
      const bool all = std::all_of(culprits.begin(), culprits.end(), [&](size_t x) { return have.count(x) > 0; });
      return all ? probe::Verdict::kFail : probe::Verdict::kPass;
    };
  };
  const auto plain = bisect::ddmin(n, fails_by(&tested_plain, false));
  const auto hinted = bisect::ddmin(n, fails_by(&tested_hinted, n >= 2), [&](const auto& upcoming) {
    announced = upcoming;
    next = 0;
  });
  RC_ASSERT(plain.minimal == hinted.minimal);
  RC_ASSERT(tested_plain == tested_hinted);
}

TEST(SearchTest, DdminFindsASingleCulpritInFewProbes) {
  const auto r = bisect::ddmin(64, [](const std::vector<size_t>& s) {
    return std::find(s.begin(), s.end(), 37) != s.end() ? probe::Verdict::kFail : probe::Verdict::kPass;
  });
  EXPECT_EQ(r.minimal, std::vector<size_t>{37});
  EXPECT_LE(r.probes, 2 * 6 + 1);  // one probe per half, log2(64) levels
}

TEST(SearchTest, DdminReportsANonReproducingFullSet) {
  const auto r = bisect::ddmin(5, [](const std::vector<size_t>&) { return probe::Verdict::kPass; });
  EXPECT_FALSE(r.reproduced);
}

RC_GTEST_PROP(SearchProp, RepetitionsBoundTheMissProbability, ()) {
  const double rate = *rc::gen::inRange(1, 100) / 100.0;
  const double alpha = *rc::gen::element(0.01, 0.05, 0.1);
  const int64_t k = bisect::repetitions_for(rate, alpha);
  RC_ASSERT(std::pow(1.0 - rate, static_cast<double>(k)) <= alpha + 1e-12);
  if (k > 1) RC_ASSERT(std::pow(1.0 - rate, static_cast<double>(k - 1)) > alpha);
}

TEST(SearchTest, FlakyFailureIsCaughtAtTheStatedConfidence) {
  // A failure that reproduces 30% of the time: with repetitions_for(0.3, 0.05)
  // repetitions per probe, at most ~5% of probes miss it.
  std::mt19937 rng(7);
  std::bernoulli_distribution flaky(0.3);
  const int64_t k = bisect::repetitions_for(0.3, 0.05);
  int missed = 0;
  const int trials = 2000;
  for (int i = 0; i < trials; ++i) {
    if (bisect::repeat_probe([&] { return flaky(rng) ? probe::Verdict::kFail : probe::Verdict::kPass; }, k) != probe::Verdict::kFail) {
      ++missed;
    }
  }
  EXPECT_LE(missed, trials * 0.05 * 1.3) << "k = " << k;
}

TEST(SearchTest, UnknownProbesAreSkippedLikeGitBisectSkip) {
  // 50 is undecidable; the boundary 60 is still found.
  const auto r = bisect::find_first_failing(0, 99, [](int64_t x) {
    if (x == 49 || x == 50) return probe::Verdict::kUnknown;
    return x >= 60 ? probe::Verdict::kFail : probe::Verdict::kPass;
  });
  EXPECT_EQ(r.first_fail, std::optional<int64_t>(60));
}

}  // namespace
}  // namespace dbh::harness

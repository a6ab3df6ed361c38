// Properties of a qualification's per-precision search (harness/qualify/search.h)
// against a memory model: a step's peak is affine in the micro-batch plus a
// jump at some batch (an allocator that is not affine), a context outside
// the allocator, and an allocator that, under a cap, frees and retries, so a
// batch may train under the full budget while its uncapped peak breaks the
// margin (seen on an H100: Note [The margin holds for the answer]).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>

#include "harness/qualify/search.h"

namespace dbh::harness::qualify {
namespace {

constexpr int64_t kMiB = 1 << 20;

struct Card {
  int64_t fixed = 0, per_sample = 0, jump_at = 0, jump = 0, context = 0;
  double slack = 1.0;  // under a cap, a peak up to slack × the cap still trains
  int64_t peak(int64_t batch) const { return fixed + per_sample * batch + (batch >= jump_at ? jump : 0); }
  // A trial of `batch` under a budget of `budget` (the allocator gets what the
  // context leaves).
  QualifyTrial run(int64_t batch, int64_t accumulation, int64_t budget) const {
    QualifyTrial t;
    t.batch = batch;
    t.accumulation = accumulation;
    t.precision = "fp32";
    const int64_t cap = budget - context;
    t.passed = static_cast<double>(peak(batch)) <= slack * static_cast<double>(cap);
    t.klass = t.passed ? "" : "cuda_oom";
    t.peak = t.passed ? std::min(peak(batch), cap) : cap;
    t.context = context;
    return t;
  }
};

Card card_gen(bool affine) {
  Card c;
  c.fixed = *rc::gen::inRange<int64_t>(100, 4000) * kMiB;
  c.per_sample = *rc::gen::inRange<int64_t>(10, 2000) * kMiB;
  c.context = *rc::gen::inRange<int64_t>(0, 700) * kMiB;
  if (!affine) {
    c.jump_at = *rc::gen::inRange<int64_t>(2, 24);
    c.jump = *rc::gen::inRange<int64_t>(0, 3000) * kMiB;
    c.slack = *rc::gen::element(1.0, 1.05, 1.1);
  } else {
    c.jump_at = 1 << 30;
  }
  return c;
}

struct Searched {
  PrecisionSearchResult r;
  std::map<int64_t, int> confirms;  // batch → confirmations run
  std::vector<QualifyTrial> confirmations;
};

// A budget whose margined part ends near batch `near` of `card`: the
// search's hard cases (the boundary, the margin, the jump) are likely.
int64_t budget_near(const Card& card, int64_t near, double margin) {
  const double factor = *rc::gen::element(0.9, 0.97, 1.0, 1.02, 1.08, 1.2);
  return static_cast<int64_t>(static_cast<double>(card.peak(near) + card.context) / (1.0 - margin) * factor);
}

Searched search(const Card& card, int64_t effective, int64_t source_batch, int64_t budget, double margin) {
  PrecisionSearchInput in;
  in.precision = in.source_precision = "fp32";
  in.effective = effective;
  in.source_batch = source_batch;
  in.source_accumulation = effective / source_batch;
  in.budget = budget;
  in.margined = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - margin));
  in.source = card.run(source_batch, in.source_accumulation, budget);
  in.source_out_of_memory = !in.source.passed;
  Searched s;
  PrecisionSearchTrials trials;
  trials.measure = [&](int64_t b) { return card.run(b, 1, in.margined); };
  trials.confirm = [&](int64_t b, int64_t a) {
    ++s.confirms[b];
    s.confirmations.push_back(card.run(b, a, budget));
    return s.confirmations.back();
  };
  s.r = search_precision(in, trials);
  return s;
}

int64_t divisor(int64_t b, int64_t effective) {
  while (b > 1 && effective % b != 0) --b;
  return b;
}

RC_GTEST_PROP(QualifySearchProp, AnAnswerTrainsKeepsTheMarginAndKeepsTheEffectiveBatch, ()) {
  const Card card = card_gen(*rc::gen::arbitrary<bool>());
  const int64_t effective = *rc::gen::inRange<int64_t>(1, 33);
  const int64_t source_batch = divisor(*rc::gen::inRange<int64_t>(1, effective + 1), effective);
  const double margin = *rc::gen::element(0.0, 0.1, 0.2);
  const int64_t budget = budget_near(card, *rc::gen::inRange<int64_t>(1, effective + 1), margin);
  const auto s = search(card, effective, source_batch, budget, margin);
  const int64_t margined = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - margin));
  for (const auto& [batch, n] : s.confirms) RC_ASSERT(n == 1);  // no confirmation runs twice
  if (!s.r.confirmed) {
    RC_ASSERT(s.r.max_batch == 0);
    return;
  }
  RC_ASSERT(s.r.confirm.passed);
  RC_ASSERT(s.r.confirm.batch * s.r.confirm.accumulation == effective);
  RC_ASSERT(s.r.confirm.peak + card.context <= margined);  // Note [The margin holds for the answer]
  RC_ASSERT(s.r.max_batch >= s.r.confirm.batch);
  RC_ASSERT(s.r.max_batch <= effective);
  // The largest batch lies below every confirmation that broke the margin.
  for (const auto& t : s.confirmations) {
    if (t.passed && t.peak + card.context > margined) RC_ASSERT(s.r.max_batch < t.batch);
  }
}

// With memory exactly affine and no retries under a cap, the search answers
// the largest divisor of the effective batch whose peak keeps the margin.
RC_GTEST_PROP(QualifySearchProp, OnAnAffineCardTheAnswerIsTheLargestBatchThatKeepsTheMargin, ()) {
  const Card card = card_gen(true);
  const int64_t effective = *rc::gen::inRange<int64_t>(1, 33);
  const int64_t source_batch = divisor(*rc::gen::inRange<int64_t>(1, effective + 1), effective);
  const int64_t budget = budget_near(card, *rc::gen::inRange<int64_t>(1, effective + 1), 0.1);
  const auto s = search(card, effective, source_batch, budget, 0.1);
  const int64_t margined = static_cast<int64_t>(static_cast<double>(budget) * 0.9);
  int64_t best = 0;
  for (int64_t b = 1; b <= effective; ++b) {
    if (effective % b == 0 && card.peak(b) + card.context <= margined) best = b;
  }
  RC_ASSERT(s.r.confirmed == (best > 0));
  if (best > 0) RC_ASSERT(s.r.confirm.batch == best);
}

}  // namespace
}  // namespace dbh::harness::qualify

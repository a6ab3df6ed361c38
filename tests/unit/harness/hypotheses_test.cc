// The diagnosis ladder's judgement from hand-built rung results: which
// hypothesis the evidence names, and when it names none (Note [The diagnosis
// ladder] in harness/diagnose/hypotheses.h). No process is started.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "harness/diagnose/hypotheses.h"
#include "harness/kb/knowledge_base.h"

namespace dbh::harness::diagnose {
namespace {

RungEvidence works(RungId id, const std::string& name) {
  RungEvidence r;
  r.id = id;
  r.name = name;
  r.ran = true;
  r.outcome = scenario::Outcome::kPassed;
  r.result = "works";
  return r;
}

RungEvidence fails(RungId id, const std::string& name, scenario::Outcome o, const std::string& klass) {
  RungEvidence r = works(id, name);
  r.outcome = o;
  r.klass = klass;
  r.result = "FAILS: " + to_string(o) + " `" + klass + "`";
  return r;
}

const Hypothesis& find(const LadderConclusion& j, HypothesisId id) {
  for (const auto& h : j.ranked) {
    if (h.id == id) return h;
  }
  ADD_FAILURE() << "no hypothesis " << to_string(id);
  return j.ranked.front();
}

// Seed 004: every rung that runs three times in one process leaks, each run
// in a fresh process passes. The model is not blamed for a failing
// synthetic rung: the failure is growth, not a value.
TEST(HypothesesTest, GrowthAcrossRunsConcludesResourcesNotTheModel) {
  Ladder l;
  l.kind = FailureKind::kResources;
  l.klass = "leak_across_runs";
  l.rungs = {works(RungId::kOps, "ops"),
             fails(RungId::kModelStep, "model step", scenario::Outcome::kLeaked, "leak_across_runs"),
             fails(RungId::kSynthetic, "synthetic", scenario::Outcome::kLeaked, "leak_across_runs"),
             works(RungId::kOneRunPerProcess, "each run in a fresh process"),
             fails(RungId::kAsGiven, "as given", scenario::Outcome::kLeaked, "leak_across_runs"),
             fails(RungId::kSmallerBatch, "smaller batch", scenario::Outcome::kLeaked, "leak_across_runs")};
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "resources");
  EXPECT_EQ(j.ranked.front().id, HypothesisId::kResources);
  EXPECT_EQ(j.ranked.front().support.size(), 2u);
  EXPECT_TRUE(find(j, HypothesisId::kModel).support.empty());
  EXPECT_FALSE(j.data_dependent);
}

// The class decides the kind: the shipped knowledge base's leak class grows
// across runs, a NaN class does not.
TEST(HypothesesTest, TheKnowledgeBaseSaysWhichClassesGrowAcrossRuns) {
  const auto& kb = kb::KnowledgeBase::shipped();
  ASSERT_NE(kb.find("leak_across_runs"), nullptr);
  EXPECT_TRUE(grows_across_runs(*kb.find("leak_across_runs")));
  EXPECT_FALSE(grows_across_runs(*kb.find("nonfinite_gradient")));
  EXPECT_EQ(failure_kind("leak_across_runs", false, true), FailureKind::kResources);
  EXPECT_EQ(failure_kind("illegal_memory_access", false, false), FailureKind::kKernel);
  EXPECT_EQ(failure_kind("not_learning", true, false), FailureKind::kSilent);
  EXPECT_EQ(failure_kind("", false, false), FailureKind::kNone);
}

// Two hypotheses with the same evidence: unsure, naming both, never the
// first of the declared list.
TEST(HypothesesTest, ATieAtTheTopIsUnsure) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "cuda_oom";
  l.rungs = {fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, "cuda_oom"),
             works(RungId::kCudnnDeterministic, "cuDNN deterministic"),
             works(RungId::kSmallerBatch, "smaller batch")};
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "unsure");
  ASSERT_EQ(j.tied.size(), 2u);
  EXPECT_EQ(j.ranked[0].score(), j.ranked[1].score());
  // One more piece of evidence breaks the tie.
  l.memory_exhaustion = true;
  const LadderConclusion k = conclude_ladder(l);
  EXPECT_EQ(k.conclusion, "memory");
  EXPECT_TRUE(k.tied.empty());
}

TEST(HypothesesTest, NoEvidenceForAnyIsUnsureAndAPassIsAPass) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "crash_signal";
  l.rungs = {works(RungId::kOps, "ops"), fails(RungId::kAsGiven, "as given", scenario::Outcome::kCrashed, "crash_signal")};
  EXPECT_EQ(conclude_ladder(l).conclusion, "unsure");
  Ladder pass;
  pass.rungs = {works(RungId::kOps, "ops"), works(RungId::kAsGiven, "as given")};
  EXPECT_EQ(conclude_ladder(pass).conclusion, "passes");
}

// A divergence on a training whose synthetic rungs cannot run (a user's
// own): the run at a tenth of the learning rate training through is the
// optimizer's evidence; the same run diverging again refutes it.
TEST(HypothesesTest, ADivergenceThatATenthOfTheLearningRateEndsIsTheOptimizer) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "nonfinite_activation";
  l.real_data = true;
  l.rungs = {fails(RungId::kRealNoWorkers, "real, no workers", scenario::Outcome::kDiverged, "nonfinite_activation"),
             fails(RungId::kAsGiven, "as given", scenario::Outcome::kDiverged, "nonfinite_activation"),
             works(RungId::kLowerLearningRate, "a tenth of the learning rate")};
  LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "optimizer");
  EXPECT_EQ(find(j, HypothesisId::kOptimizer).support.size(), 1u);
  // dbh's own worker: synthetic data diverges too, which alone would blame
  // the model; the tenth of the learning rate says it is the updates.
  Ladder own = l;
  own.rungs.push_back(fails(RungId::kSynthetic, "synthetic", scenario::Outcome::kDiverged, "nonfinite_activation"));
  EXPECT_EQ(conclude_ladder(own).conclusion, "optimizer");
  l.rungs[2] = fails(RungId::kLowerLearningRate, "a tenth of the learning rate", scenario::Outcome::kDiverged,
                     "nonfinite_activation");
  j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "unsure");
  EXPECT_EQ(find(j, HypothesisId::kOptimizer).refute.size(), 1u);
}

// Note [The learning rung]: flat on synthetic boxes too is the optimizer;
// learning on synthetic boxes but not on the real data is the labels.
TEST(HypothesesTest, SilentFailuresAreJudgedByTheLearningRungs) {
  Ladder l;
  l.kind = FailureKind::kSilent;
  l.klass = "not_learning";
  l.real_data = true;
  l.rungs = {works(RungId::kOps, "ops"), fails(RungId::kSynthetic, "synthetic", scenario::Outcome::kFailed, "not_learning"),
             fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, "not_learning"),
             fails(RungId::kLearnsSynthetic, "learns on synthetic", scenario::Outcome::kFailed, "not_learning"),
             fails(RungId::kLearnsReal, "learns on real", scenario::Outcome::kFailed, "not_learning")};
  EXPECT_EQ(conclude_ladder(l).conclusion, "optimizer");
  l.rungs[3] = works(RungId::kLearnsSynthetic, "learns on synthetic");
  l.rungs[1] = works(RungId::kSynthetic, "synthetic");
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "labels");
  EXPECT_FALSE(j.data_dependent);  // a silent failure has no bad sample to find
}

// A crash on real data reading a sample that cannot be read.
Ladder data_invalid_on_real_data() {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "data_invalid";
  l.real_data = true;
  l.data_invalid = true;
  return l;
}

TEST(HypothesesTest, SyntheticPassingRealFailingIsDataDependent) {
  Ladder l = data_invalid_on_real_data();
  l.rungs = {works(RungId::kSynthetic, "synthetic"),
             fails(RungId::kRealNoWorkers, "real, no workers", scenario::Outcome::kFailed, "data_invalid"),
             fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, "data_invalid")};
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "data-dependent");
  EXPECT_EQ(j.ranked.front().id, HypothesisId::kData);
}

// A sticky CUDA error on synthetic data points at the kernel, not at the
// model's numerics; an unresolved rung is evidence of nothing.
TEST(HypothesesTest, AKernelFaultIsNotTheModelAndAnUnresolvedRungIsNothing) {
  Ladder l;
  l.kind = FailureKind::kKernel;
  l.klass = "illegal_memory_access";
  l.rungs = {works(RungId::kOps, "ops"),
             fails(RungId::kSynthetic, "synthetic", scenario::Outcome::kCrashed, "illegal_memory_access"),
             fails(RungId::kAsGiven, "as given", scenario::Outcome::kCrashed, "illegal_memory_access"),
             fails(RungId::kCudnnDisabled, "cuDNN disabled", scenario::Outcome::kCrashed, "illegal_memory_access"),
             fails(RungId::kRealNoWorkers, "real", scenario::Outcome::kUnresolved, "")};
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "kernel");
  EXPECT_TRUE(find(j, HypothesisId::kModel).support.empty());
  EXPECT_TRUE(find(j, HypothesisId::kLoader).refute.empty());
}

RungEvidence at_rate(double rate, const RungEvidence& r) {
  RungEvidence e = r;
  e.id = RungId::kLowerLearningRate;
  e.rate = rate;
  return e;
}

RungEvidence at_step(int64_t step, RungEvidence r) {
  r.step = step;
  return r;
}

// Note [Evidence by direction]: a user's training diverged at step 3 with a
// rate 5,000 times its configuration's. A tenth of it diverges one step
// later: the failure moved as the rate fell, which suggests the optimizer
// rather than refuting it; a hundredth trains, which shows it.
TEST(HypothesesTest, AFailureThatMovesLaterAsTheRateFallsIsForTheOptimizer) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "nonfinite_loss";
  l.real_data = true;
  l.failure_step = 3;
  l.lr_floor = 0.01;
  l.lr_floor_is_configured = true;
  const auto diverged = [](int64_t step) {
    return at_step(step, fails(RungId::kAsGiven, "rate", scenario::Outcome::kDiverged, "nonfinite_loss"));
  };
  l.rungs = {fails(RungId::kRealNoWorkers, "real, no workers", scenario::Outcome::kDiverged, "nonfinite_loss"),
             at_step(3, fails(RungId::kAsGiven, "as given", scenario::Outcome::kDiverged, "nonfinite_loss")),
             at_rate(5, diverged(4))};
  LadderConclusion j = conclude_ladder(l);
  const Hypothesis& opt = find(j, HypothesisId::kOptimizer);
  ASSERT_EQ(opt.support.size(), 1u);
  EXPECT_TRUE(opt.refute.empty());
  EXPECT_EQ(opt.support[0].strength, Strength::kSuggests);
  EXPECT_NE(opt.support[0].text.find("step 3 → 4"), std::string::npos) << opt.support[0].text;
  EXPECT_EQ(j.conclusion, "optimizer");

  l.rungs.push_back(at_rate(0.5, works(RungId::kAsGiven, "rate 0.5")));
  j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "optimizer");
  EXPECT_EQ(find(j, HypothesisId::kOptimizer).support[0].strength, Strength::kShows);
  EXPECT_EQ(find(j, HypothesisId::kOptimizer).score(), 2);

  // Unchanged at every rate: down to the configuration's own rate it shows
  // against the optimizer; stopped above it, it only suggests so.
  l.rungs.resize(2);
  l.rungs.push_back(at_rate(5, diverged(3)));
  l.rungs.push_back(at_rate(0.01, diverged(2)));
  l.lr_reached_floor = true;
  EXPECT_EQ(find(conclude_ladder(l), HypothesisId::kOptimizer).score(), -2);
  l.lr_reached_floor = false;
  const LadderConclusion short_conclusion = conclude_ladder(l);
  const Hypothesis& short_search = find(short_conclusion, HypothesisId::kOptimizer);
  EXPECT_EQ(short_search.score(), -1);
  EXPECT_NE(short_search.refute[0].text.find("stopped above the configuration's own rate"), std::string::npos);
}

// A variant that ends the failure shows its hypothesis, one under which it
// comes later suggests it, one that turns it into another failure is weighed
// for nothing, and only the same failure refutes.
TEST(HypothesesTest, AVariantIsWeighedByWhatItDidToTheFailure) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "memory_exhausted";
  l.failure_step = 2;
  const auto batch = [&](RungEvidence r) {
    l.rungs = {at_step(2, fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, "memory_exhausted")),
               std::move(r)};
    return find(conclude_ladder(l), HypothesisId::kMemory);
  };
  EXPECT_EQ(batch(works(RungId::kSmallerBatch, "smaller batch")).weight_for(), 2);
  const auto later = batch(at_step(5, fails(RungId::kSmallerBatch, "smaller", scenario::Outcome::kFailed, "memory_exhausted")));
  EXPECT_EQ(later.weight_for(), 1);
  EXPECT_EQ(later.weight_against(), 0);
  EXPECT_EQ(batch(at_step(9, fails(RungId::kSmallerBatch, "smaller", scenario::Outcome::kCrashed, "segfault"))).score(),
            0);
  EXPECT_EQ(batch(at_step(2, fails(RungId::kSmallerBatch, "smaller", scenario::Outcome::kFailed, "memory_exhausted")))
                .weight_against(),
            2);
}

// Note [The run without the command's overrides]: the scenario training
// without them shows the overrides; the config bisection's confirmed answer
// weighs for the hypothesis its setting belongs to, or for the overrides
// when no hypothesis is about it.
TEST(HypothesesTest, TheRunWithoutTheOverridesAndTheBisectionsAnswerNameTheSetting) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "nonfinite_loss";
  l.rungs = {fails(RungId::kAsGiven, "as given", scenario::Outcome::kDiverged, "nonfinite_loss"),
             works(RungId::kWithoutOverrides, "without the overrides")};
  EXPECT_EQ(conclude_ladder(l).conclusion, "overrides");
  l.override_cause = {"train.lr=50"};
  LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "optimizer");
  EXPECT_EQ(find(j, HypothesisId::kOptimizer).score(), 4);  // the run without the override, and the answer
  EXPECT_EQ(find(j, HypothesisId::kOptimizer).support.at(1).text,
            "the config bisection's confirmed answer: `train.lr=50` (a setting of this hypothesis)");
  EXPECT_TRUE(find(j, HypothesisId::kOverrides).support.empty());
  l.override_cause = {"train.lr=50", "arch.width=3"};  // one setting no hypothesis is about
  j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "overrides");
  EXPECT_EQ(find(j, HypothesisId::kOverrides).score(), 4);
  l.rungs[1] = fails(RungId::kWithoutOverrides, "without", scenario::Outcome::kDiverged, "nonfinite_loss");
  l.override_cause.clear();
  EXPECT_EQ(find(conclude_ladder(l), HypothesisId::kOverrides).score(), -2);
}

// Note [Evidence by direction]: rungs_about states what the weighing does.
// Every rung, passing or failing (at the failure's step or later), beside
// each context rung, under each kind of failure: the hypotheses whose
// evidence cites it are exactly those its row names, over all the ladders.
TEST(HypothesesTest, TheRungsAboutEachHypothesisAreWhatTheWeighingReads) {
  const std::pair<FailureKind, std::string> kinds[] = {{FailureKind::kCrashOrError, "nonfinite_loss"},
                                                      {FailureKind::kSilent, "not_learning"},
                                                      {FailureKind::kKernel, "illegal_memory_access"},
                                                      {FailureKind::kResources, "leak_across_runs"}};
  const std::vector<std::vector<RungEvidence>> contexts = {
      {},
      {works(RungId::kSynthetic, "context")},
      {works(RungId::kRealNoWorkers, "context")},
      {works(RungId::kLearnsSynthetic, "context")}};
  std::set<std::pair<int, int>> seen;  // (rung, hypothesis)
  for (int r = 0; r <= static_cast<int>(RungId::kLearnsReal); ++r) {
    const auto id = static_cast<RungId>(r);
    const std::string name = "R" + std::to_string(r);
    for (const auto& [kind, klass] : kinds) {
      std::vector<RungEvidence> tries = {works(id, name), at_step(2, fails(id, name, scenario::Outcome::kFailed, klass)),
                                         at_step(5, fails(id, name, scenario::Outcome::kFailed, klass))};
      for (auto& t : tries) t.rate = 1;
      std::vector<std::vector<RungEvidence>> with = contexts;
      with.push_back({fails(RungId::kSynthetic, "context", scenario::Outcome::kFailed, klass)});
      for (const auto& context : with) {
        for (const auto& t : tries) {
          if (id == RungId::kAsGiven || (!context.empty() && context[0].id == id)) continue;
          Ladder l;
          l.kind = kind;
          l.klass = klass;
          l.real_data = true;
          l.failure_step = 2;
          l.rungs = context;
          l.rungs.push_back(at_step(2, fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, klass)));
          l.rungs.push_back(t);
          for (const auto& h : conclude_ladder(l).ranked) {
            for (const auto* lines : {&h.support, &h.refute}) {
              for (const auto& e : *lines) {
                if (e.text.find(name + ":") != std::string::npos) seen.insert({r, static_cast<int>(h.id)});
              }
            }
          }
        }
      }
    }
  }
  std::set<std::pair<int, int>> stated;
  for (int h = 0; h <= static_cast<int>(HypothesisId::kOverrides); ++h) {
    for (const auto r : rungs_about(static_cast<HypothesisId>(h))) stated.insert({static_cast<int>(r), h});
  }
  for (const auto& [r, h] : seen) {
    EXPECT_TRUE(stated.count({r, h})) << "rung " << r << " weighs on " << to_string(static_cast<HypothesisId>(h))
                                      << " but its row does not say so";
  }
  for (const auto& [r, h] : stated) {
    EXPECT_TRUE(seen.count({r, h})) << "rung " << r << "'s row names " << to_string(static_cast<HypothesisId>(h))
                                    << " but no ladder weighs it there";
  }
}

// Note [The first batch, repeated]: one batch repeated that trains puts a
// crash in the data stream; one that fails as early puts it in the model or
// its optimizer, and refutes the data.
TEST(HypothesesTest, TheFirstBatchRepeatedSeparatesTheDataStreamFromTheModel) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "nonfinite_activation";
  l.failure_step = 3;
  l.rungs = {at_step(3, fails(RungId::kAsGiven, "as given", scenario::Outcome::kDiverged, "nonfinite_activation")),
             works(RungId::kFixedBatch, "one batch")};
  LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "data");
  EXPECT_EQ(find(j, HypothesisId::kModel).weight_against(), 1);
  l.rungs[1] = at_step(3, fails(RungId::kFixedBatch, "one batch", scenario::Outcome::kDiverged, "nonfinite_activation"));
  j = conclude_ladder(l);
  EXPECT_EQ(find(j, HypothesisId::kData).score(), -2);
  EXPECT_EQ(j.conclusion, "unsure");  // the model or its optimizer: the learning rate decides
  EXPECT_EQ(j.tied, (std::vector<HypothesisId>{HypothesisId::kModel, HypothesisId::kOptimizer}));
}

// Note [The first batch, repeated], on a failure that is the batch's own
// content: a sample that cannot be read in the first batch fails it
// repeated too, and that points at the data, not at the model. With no
// synthetic data to compare (a worker that serves none), the data is still
// the conclusion and its samples are searched (Note [The samples, named]).
TEST(HypothesesTest, AFirstBatchThatCannotBeReadIsTheDataAndItsSamplesAreSearched) {
  Ladder l = data_invalid_on_real_data();
  l.failure_step = 0;
  RungEvidence synthetic;
  synthetic.id = RungId::kSynthetic;
  synthetic.blocked = true;  // the worker does not serve synthetic_data
  l.rungs = {synthetic, at_step(0, fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, "data_invalid")),
             at_step(0, fails(RungId::kFixedBatch, "one batch", scenario::Outcome::kFailed, "data_invalid"))};
  LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "data");
  EXPECT_FALSE(j.data_dependent);
  EXPECT_TRUE(j.find_samples);
  EXPECT_EQ(find(j, HypothesisId::kData).weight_against(), 0);
  EXPECT_EQ(find(j, HypothesisId::kData).score(), 3);
  EXPECT_TRUE(find(j, HypothesisId::kModel).support.empty());
  // The same rungs on a failure the model makes: one batch refutes the data,
  // and no sample is searched.
  l.klass = "nonfinite_activation";
  l.data_invalid = false;
  l.rungs[1] = at_step(0, fails(RungId::kAsGiven, "as given", scenario::Outcome::kDiverged, "nonfinite_activation"));
  l.rungs[2] = at_step(0, fails(RungId::kFixedBatch, "one batch", scenario::Outcome::kDiverged, "nonfinite_activation"));
  j = conclude_ladder(l);
  EXPECT_EQ(find(j, HypothesisId::kData).score(), -2);
  EXPECT_FALSE(j.find_samples);
}

// A silent failure or growth across runs has no bad sample to find, even
// with the data on top.
TEST(HypothesesTest, NoSampleIsSearchedForASilentFailure) {
  Ladder l;
  l.kind = FailureKind::kSilent;
  l.klass = "labels_degenerate";
  l.real_data = true;
  l.rungs = {fails(RungId::kAsGiven, "as given", scenario::Outcome::kFailed, "labels_degenerate")};
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "labels");
  EXPECT_FALSE(j.find_samples);
}

// A tie names the rungs that could have separated it and why they did not run.
TEST(HypothesesTest, AnUnsureDiagnosisSaysWhichRungCouldHaveDecided) {
  Ladder l;
  l.kind = FailureKind::kCrashOrError;
  l.klass = "nonfinite_loss";
  RungEvidence na;
  na.id = RungId::kSynthetic;
  na.name = "Full trainer on synthetic data";
  na.result = "n/a (the worker does not serve `synthetic_data`)";
  na.blocked = true;
  RungEvidence moot;  // n/a by nature here: no rung that could decide
  moot.id = RungId::kCudnnDisabled;
  moot.name = "cuDNN disabled";
  moot.result = "n/a (no cuDNN on cpu)";
  l.rungs = {fails(RungId::kAsGiven, "as given", scenario::Outcome::kDiverged, "nonfinite_loss"), na, moot,
             works(RungId::kOps, "ops")};
  const LadderConclusion j = conclude_ladder(l);
  EXPECT_EQ(j.conclusion, "unsure");
  EXPECT_EQ(j.could_decide,
            std::vector<std::string>{"Full trainer on synthetic data: n/a (the worker does not serve `synthetic_data`)"});
}

TEST(HypothesesTest, EachSettingBelongsToAtMostOneHypothesis) {
  EXPECT_EQ(hypothesis_of_key("train.lr"), HypothesisId::kOptimizer);
  EXPECT_EQ(hypothesis_of_key("train.grad_clip"), HypothesisId::kOptimizer);
  EXPECT_EQ(hypothesis_of_key("data.batch_size"), HypothesisId::kMemory);
  EXPECT_EQ(hypothesis_of_key("hardware.cudnn_benchmark"), HypothesisId::kCudnn);
  EXPECT_EQ(hypothesis_of_key("train.precision"), HypothesisId::kAmp);
  EXPECT_FALSE(hypothesis_of_key("train.lrx").has_value());
  EXPECT_FALSE(hypothesis_of_key("train.max_steps").has_value());
  EXPECT_FALSE(hypothesis_of_key("optim.step_size").has_value());  // a user's own key, untranslated
}

// A Lightning key passed to the user's training as written is a setting of
// the hypothesis its dbh key belongs to; a key of the user's own is none's.
TEST(HypothesesTest, AnOverrideInLightningsKeyBelongsWhereItsDbhKeyDoes) {
  EXPECT_EQ(hypothesis_of_override("trainer.gradient_clip_val=1e-12"), HypothesisId::kOptimizer);
  EXPECT_EQ(hypothesis_of_override("trainer.precision=16-mixed"), HypothesisId::kAmp);
  EXPECT_EQ(hypothesis_of_override("train.lr=70"), HypothesisId::kOptimizer);
  EXPECT_FALSE(hypothesis_of_override("trainer.gradient_clip_val=-1").has_value());  // not a value it maps
  EXPECT_FALSE(hypothesis_of_override("trainer.max_steps=5").has_value());
  EXPECT_FALSE(hypothesis_of_override("optim.step_size=50").has_value());
  EXPECT_FALSE(hypothesis_of_override("trainer.gradient_clip_val").has_value());
}

}  // namespace
}  // namespace dbh::harness::diagnose

namespace dbh::harness::diagnose {
namespace {

// Note [A rung is checked against what its trial did]: a trial that ran
// something else than its rung asked is no evidence of what the rung asks.
TEST(RungDeparture, ARungIsEvidenceOnlyOfWhatItsTrialDid) {
  supervisor::TrialAnalysis a;
  EXPECT_EQ(rung_departure(RungId::kOps, a), "");
  a.steps_completed = a.ops_steps = 3;  // the ops check's own steps (`step_end` with `ops`)
  EXPECT_EQ(rung_departure(RungId::kOps, a), "");
  a.ops_steps = 0;
  a.steps_completed = 4;
  EXPECT_EQ(rung_departure(RungId::kOps, a),
            "its trial trained 4 step(s), but the ops rung trains none (train.mode=ops not applied)");
  EXPECT_NE(rung_departure(RungId::kModelStep, a).find("the rung trains one"), std::string::npos);
  a.steps_completed = 1;
  EXPECT_EQ(rung_departure(RungId::kModelStep, a), "");
  EXPECT_EQ(rung_departure(RungId::kSynthetic, a), "");
  // A synthetic rung whose trial failed reading a sample.
  a.steps_completed = 0;
  a.failed_sample = 3;
  for (const RungId id : {RungId::kModelStep, RungId::kSynthetic, RungId::kLearnsSynthetic}) {
    EXPECT_NE(rung_departure(id, a).find("failed reading a sample"), std::string::npos);
  }
  // The real-data rungs read samples by design.
  EXPECT_EQ(rung_departure(RungId::kRealNoWorkers, a), "");
  EXPECT_EQ(rung_departure(RungId::kAsGiven, a), "");
  // Reads alone are no departure: a generated dataset served through the
  // adapter reports them too.
  a.failed_sample.reset();
  a.samples_read = {0, 1};
  EXPECT_EQ(rung_departure(RungId::kSynthetic, a), "");
}

// A rung whose training never started (a crash before its first step that
// the scenario's own run, which trained, did not have) is no evidence that
// the pipeline "fails the same way" without the real data.
TEST(RungDeparture, ARungThatNeverStartedIsNoEvidenceOfTheScenariosFailure) {
  supervisor::TrialAnalysis scenario_run;
  scenario_run.outcome = scenario::Outcome::kFailed;
  scenario_run.failure.klass = "hmean_zero";
  scenario_run.failure.step = 5;
  scenario_run.steps_completed = 6;
  supervisor::TrialAnalysis crashed;
  crashed.outcome = scenario::Outcome::kFailed;
  crashed.failure.klass = "premature_exit";
  crashed.failure.message = "FileNotFoundError: annotations.json\nsecond line";
  const std::string why = start_departure(RungId::kLearnsSynthetic, crashed, scenario_run);
  EXPECT_EQ(why, "its trial ended before its first step (`premature_exit`: FileNotFoundError: annotations.json "
                 "second line), but the scenario's own run trained 6 step(s): it never started what the rung asks, "
                 "so it says nothing of the scenario's failure");
  for (const RungId id : {RungId::kModelStep, RungId::kSynthetic, RungId::kRealNoWorkers, RungId::kLearnsReal}) {
    EXPECT_NE(start_departure(id, crashed, scenario_run), "") << static_cast<int>(id);
  }
  // The ops rung trains nothing by design; the scenario as given is the run itself.
  EXPECT_EQ(start_departure(RungId::kOps, crashed, scenario_run), "");
  EXPECT_EQ(start_departure(RungId::kAsGiven, crashed, scenario_run), "");
  // The same class as the scenario's: it fails the same way.
  crashed.failure.klass = "hmean_zero";
  EXPECT_EQ(start_departure(RungId::kSynthetic, crashed, scenario_run), "");
  crashed.failure.klass = "premature_exit";
  // A failure at a step (a NaN at step 0) started: it is evidence.
  crashed.failure.step = 0;
  EXPECT_EQ(start_departure(RungId::kSynthetic, crashed, scenario_run), "");
  crashed.failure.step.reset();
  // A trial that trained a step before it ended started.
  crashed.steps_completed = 1;
  EXPECT_EQ(start_departure(RungId::kSynthetic, crashed, scenario_run), "");
  crashed.steps_completed = 0;
  // When the scenario's own run never trained either, a crash at start is its failure too.
  scenario_run.steps_completed = 0;
  EXPECT_EQ(start_departure(RungId::kSynthetic, crashed, scenario_run), "");
  scenario_run.steps_completed = 6;
  // A rung that passed, or could not tell, departs from nothing.
  crashed.outcome = scenario::Outcome::kPassed;
  EXPECT_EQ(start_departure(RungId::kSynthetic, crashed, scenario_run), "");
  crashed.outcome = scenario::Outcome::kUnresolved;
  EXPECT_EQ(start_departure(RungId::kSynthetic, crashed, scenario_run), "");
}

}  // namespace
}  // namespace dbh::harness::diagnose

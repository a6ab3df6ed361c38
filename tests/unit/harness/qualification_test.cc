// What a qualification concludes from what it measured
// (harness/qualify/qualification.h: judge_qualification), and the verdict
// line it prints, without running a trial.
#include <gtest/gtest.h>

#include "harness/qualify/qualification.h"

namespace dbh::harness::qualify {
namespace {

QualifyTrial trial(int64_t batch, int64_t accumulation, const std::string& precision, bool passed,
                   const std::string& klass = "", double step_seconds = 1.0) {
  QualifyTrial t;
  t.batch = batch;
  t.accumulation = accumulation;
  t.precision = precision;
  t.passed = passed;
  t.outcome = passed ? "passed" : "failed";
  t.klass = klass;
  t.peak = passed ? int64_t{1} << 30 : 0;
  t.step_seconds = step_seconds;
  return t;
}

// A precision whose search confirmed batch × accumulation at `step_seconds` a step.
PrecisionSearchResult confirmed(const std::string& precision, int64_t batch, int64_t accumulation,
                                double step_seconds) {
  PrecisionSearchResult r;
  r.precision = precision;
  r.max_batch = batch;
  r.confirm = trial(batch, accumulation, precision, true, "", step_seconds);
  r.at_max = r.confirm;
  r.confirmed = true;
  return r;
}

PrecisionSearchResult unconfirmed(const std::string& precision) {
  PrecisionSearchResult r;
  r.precision = precision;
  return r;
}

// A source setup of batch 8 × 1 in `precision` that ran out of memory.
Qualification qualification(const std::string& precision) {
  Qualification q;
  q.scenario_name = "s";
  q.budget = int64_t{12} << 30;
  q.effective = 8;
  q.device = "cuda";
  q.source = trial(8, 1, precision, false, "cuda_oom");
  return q;
}

TEST(QualificationVerdictTest, TheSourcesPrecisionIsKeptWhenItQualifiesEvenIfAnotherIsFaster) {
  Qualification q = qualification("fp32");
  q.searches = {confirmed("fp32", 4, 2, 2.0), confirmed("fp16", 8, 1, 0.5), confirmed("bf16", 8, 1, 0.4)};
  const auto v = judge_qualification(q);
  ASSERT_TRUE(v.qualifies());
  EXPECT_EQ(q.searches[*v.best].precision, "fp32");
  EXPECT_EQ(v.other_failure, "");
}

TEST(QualificationVerdictTest, OtherwiseTheConfirmedPrecisionWithTheHighestThroughputIsRecommended) {
  Qualification q = qualification("fp32");
  q.searches = {unconfirmed("fp32"), confirmed("fp16", 8, 1, 0.5), confirmed("bf16", 4, 2, 0.3)};
  // bf16: 8 samples in 0.3 s beats fp16's 8 in 0.5 s.
  const auto v = judge_qualification(q);
  ASSERT_TRUE(v.qualifies());
  EXPECT_EQ(q.searches[*v.best].precision, "bf16");
  q.searches[2].confirm.step_seconds = 0.6;
  EXPECT_EQ(q.searches[*judge_qualification(q).best].precision, "fp16");
}

TEST(QualificationVerdictTest, NothingConfirmedDoesNotQualify) {
  Qualification q = qualification("fp32");
  q.searches = {unconfirmed("fp32"), unconfirmed("fp16")};
  const auto v = judge_qualification(q);
  EXPECT_FALSE(v.qualifies());
  EXPECT_EQ(v.other_failure, "");  // running out of memory is what was measured
  EXPECT_EQ(qualification_summary(q, v), "DOES NOT QUALIFY");
}

TEST(QualificationVerdictTest, TheFirstFailureOtherThanMemoryIsNamedAndMemoryFailuresAreNot) {
  Qualification q = qualification("fp32");
  PrecisionSearchResult fp32 = unconfirmed("fp32");
  fp32.measured = {trial(4, 1, "fp32", false, "host_oom"), trial(2, 1, "fp32", false, "nan_loss"),
                   trial(1, 1, "fp32", false, "worker_crash")};
  PrecisionSearchResult fp16 = unconfirmed("fp16");
  fp16.measured = {trial(1, 1, "fp16", false, "cudnn_no_engine")};
  q.searches = {fp32, fp16};
  const auto v = judge_qualification(q);
  EXPECT_FALSE(v.qualifies());
  EXPECT_EQ(v.other_failure, "nan_loss at batch 2 (fp32)");
  EXPECT_EQ(qualification_summary(q, v),
            "DOES NOT QUALIFY (not answered: training fails for another reason than memory, nan_loss at batch 2 "
            "(fp32))");
  // The source runs first: its own failure is the one named.
  q.source = trial(8, 1, "fp32", false, "worker_crash");
  EXPECT_EQ(judge_qualification(q).other_failure, "worker_crash at batch 8 (fp32)");
}

TEST(QualificationVerdictTest, TheHeadroomLeavesOutWhatWasInUseBeforeTheAllocator) {
  Qualification q = qualification("fp32");
  PrecisionSearchResult r = confirmed("fp32", 4, 2, 1.0);
  r.context = int64_t{1} << 30;
  q.searches = {r};
  const auto v = judge_qualification(q);
  ASSERT_TRUE(v.qualifies());
  EXPECT_EQ(qualification_headroom(q, q.searches[0], int64_t{8} << 30), int64_t{3} << 30);
  EXPECT_EQ(qualification_summary(q, v), "QUALIFIES: batch 4 x 2 accumulation (fp32), peak 1.0 GiB, headroom 10.0 GiB");
  q.estimate_note = "an estimate";
  EXPECT_NE(qualification_summary(q, v).find("(host-memory estimate"), std::string::npos);
}

}  // namespace
}  // namespace dbh::harness::qualify

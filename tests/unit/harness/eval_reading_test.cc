// Note [Reading an evaluation]: each case of numbers gets its own reading.
#include <gtest/gtest.h>

#include "harness/report/eval_reading.h"

namespace dbh::harness {
namespace {

report::EvalFacts base() {
  report::EvalFacts f;
  f.images = 10;
  f.gt = 40;
  return f;
}

TEST(EvalReadingTest, NoDetectionsOnASaturatedMapNamesUntrainedWeightsAndNormalisation) {
  report::EvalFacts f = base();
  f.max_probability = 1.0;
  f.mean_text_fraction = 0.97;
  const auto r = report::read_evaluation(f);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r[0].id, "saturated_map");
  EXPECT_NE(r[0].meaning.find("97 %"), std::string::npos) << r[0].meaning;
  EXPECT_NE(r[0].next.find("normalised"), std::string::npos) << r[0].next;
  // A few image-sized regions kept as boxes are the same reading.
  f.det = 8;
  EXPECT_EQ(report::read_evaluation(f)[0].id, "saturated_map");
  EXPECT_NE(report::read_evaluation(f)[0].meaning.find("no detection matches a word"), std::string::npos);
}

TEST(EvalReadingTest, EachCaseOfNumbersHasItsOwnReading) {
  report::EvalFacts below = base();
  below.max_probability = 0.1;
  EXPECT_EQ(report::read_evaluation(below)[0].id, "map_below_threshold");
  report::EvalFacts dropped = base();
  dropped.max_probability = 0.8;
  dropped.mean_text_fraction = 0.05;
  EXPECT_EQ(report::read_evaluation(dropped)[0].id, "boxes_dropped");
  report::EvalFacts off = base();
  off.det = 12;
  EXPECT_EQ(report::read_evaluation(off)[0].id, "nothing_matches");
  report::EvalFacts fp = base();
  fp.det = 100;
  fp.matched = 30;
  fp.precision = 0.3;
  fp.recall = 0.75;
  EXPECT_EQ(report::read_evaluation(fp)[0].id, "false_positives");
  report::EvalFacts missed = fp;
  missed.precision = 0.9;
  missed.recall = 0.2;
  EXPECT_EQ(report::read_evaluation(missed)[0].id, "missed_words");
  report::EvalFacts good = fp;
  good.precision = 0.85;
  good.recall = 0.8;
  good.hmean = 0.82;
  EXPECT_EQ(report::read_evaluation(good)[0].id, "scored");
  report::EvalFacts empty = base();
  empty.gt = 0;
  EXPECT_EQ(report::read_evaluation(empty)[0].id, "nothing_to_score");
}

}  // namespace
}  // namespace dbh::harness

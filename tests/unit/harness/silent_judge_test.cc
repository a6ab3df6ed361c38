// Note [Silent-failure monitors]: the judgement of one step's readings,
// without a tensor — what each check finds, the evidence it gives, and the
// collapsed-prediction count across steps and runs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/monitors/silent_judge.h"

namespace dbh::harness {
namespace {

using monitors::SilentFinding;
using monitors::SilentJudge;
using monitors::SilentOptions;
using monitors::SilentReadings;

SilentReadings::Image image(double mean, double min, double max) {
  SilentReadings::Image im;
  im.mean = mean;
  im.min = min;
  im.max = max;
  return im;
}

// Two samples with text in their labels and in their words, a lively map.
SilentReadings healthy() {
  SilentReadings r;
  r.images = {image(120, 0, 255), image(90, 3, 250)};
  r.inside = {400, 250};
  r.positives = {400, 250};
  r.in_boxes = {400, 250};
  r.has_probabilities = true;
  r.prob_min = 0.001;
  r.prob_max = 0.97;
  r.prob_mean = 0.2;
  r.words = {3, 2};
  r.ids = {"img_1", "img_2"};
  return r;
}

SilentReadings collapsed_low() {
  SilentReadings r = healthy();
  r.prob_min = 0.0001;
  r.prob_max = 0.004;
  r.prob_mean = 0.001;
  return r;
}

TEST(SilentJudgeTest, AHealthyStepFindsNothingAndRecordsWhatItRead) {
  SilentJudge judge;
  EXPECT_FALSE(judge.judge(0, healthy()).has_value());
  EXPECT_DOUBLE_EQ(judge.stats()["input_mean"].get<double>(), 105.0);
  EXPECT_DOUBLE_EQ(judge.stats()["input_min"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(judge.stats()["text_pixels"].get<double>(), 650.0);
  EXPECT_DOUBLE_EQ(judge.stats()["prob_max"].get<double>(), 0.97);
  judge.clear_stats();
  EXPECT_TRUE(judge.stats().empty());
}

TEST(SilentJudgeTest, EveryImageBlackIsInputDenormalisedNamingTheImages) {
  SilentReadings r = healthy();
  r.images = {image(0.5, 0, 4), image(1.0, 0, 9)};
  const auto found = SilentJudge().judge(7, r);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->check, "input_denormalised");
  EXPECT_EQ(found->kind, "input");
  EXPECT_EQ(found->site, "image");
  EXPECT_EQ(found->message, "input black after de-normalisation at step 7 (all 2 images)");
  EXPECT_EQ(found->detail["black"].get<int64_t>(), 2);
  ASSERT_GE(found->evidence.size(), 2u);
  EXPECT_NE(found->evidence[1].find("img_1 0.5 / 0.0 / 4.0"), std::string::npos) << found->evidence[1];
  // One image with content is not a black batch.
  r.images[1] = image(80, 0, 255);
  EXPECT_FALSE(SilentJudge().judge(7, r).has_value());
}

TEST(SilentJudgeTest, PixelsAboveWhiteReadAsRawValuesNeverScaled) {
  SilentReadings r = healthy();
  r.images = {image(300, 270, 400), image(310, 280, 420)};
  const auto found = SilentJudge().judge(0, r);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->check, "input_denormalised");
  EXPECT_NE(found->evidence[0].find("never scaled to [0, 1]"), std::string::npos) << found->evidence[0];
}

TEST(SilentJudgeTest, WordsWithoutKernelPixelsAreLabelsWithoutText) {
  SilentReadings r = healthy();
  r.inside = {400, 0};
  r.positives = {400, 30};
  const auto found = SilentJudge().judge(3, r);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->check, "labels_degenerate");
  EXPECT_EQ(found->site, "gt_shrink");
  EXPECT_EQ(found->detail["sample"].get<std::string>(), "img_2");
  EXPECT_NE(found->evidence[0].find("30 in all, every one masked out"), std::string::npos) << found->evidence[0];
  // A sample without legible words has nothing to learn either way.
  r.words = {3, 0};
  EXPECT_FALSE(SilentJudge().judge(3, r).has_value());
}

TEST(SilentJudgeTest, KernelsMostlyOutsideTheirWordsAreLabelsOffTheWords) {
  SilentReadings r = healthy();
  r.in_boxes = {40, 250};  // 90 % of img_1's kernel pixels outside its words
  const auto found = SilentJudge().judge(2, r);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->check, "labels_degenerate");
  EXPECT_NE(found->message.find("labels off the words"), std::string::npos) << found->message;
  EXPECT_DOUBLE_EQ(found->detail["outside_share"].get<double>(), 0.9);
  r.in_boxes = {300, 250};  // 25 %: within what a shrunk, rotated kernel allows
  EXPECT_FALSE(SilentJudge().judge(2, r).has_value());
}

TEST(SilentJudgeTest, PredictionsCollapseAfterKConsecutiveStepsPastTheWarmUp) {
  SilentOptions o;
  o.collapse_after = 2;
  o.collapse_steps = 3;
  SilentJudge judge(o);
  EXPECT_FALSE(judge.judge(0, collapsed_low()));  // warm-up
  EXPECT_FALSE(judge.judge(1, collapsed_low()));
  EXPECT_FALSE(judge.judge(2, collapsed_low()));
  EXPECT_FALSE(judge.judge(3, healthy()));  // a lively step starts the count again
  EXPECT_FALSE(judge.judge(4, collapsed_low()));
  EXPECT_FALSE(judge.judge(5, collapsed_low()));
  const auto found = judge.judge(6, collapsed_low());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->check, "predictions_collapsed");
  EXPECT_EQ(found->message, "predictions collapsed to 0 over steps 4–6");
  EXPECT_EQ(found->detail["since"].get<int64_t>(), 4);
  EXPECT_EQ(found->detail["steps"].get<int64_t>(), 3);
  EXPECT_NE(found->evidence[1].find("hold 5 legible words"), std::string::npos) << found->evidence[1];
}

TEST(SilentJudgeTest, EachRunCountsAfreshAndAStepWithoutTextNeitherCountsNorResets) {
  SilentOptions o;
  o.collapse_after = 0;
  o.collapse_steps = 2;
  SilentJudge judge(o);
  EXPECT_FALSE(judge.judge(0, collapsed_low()));
  judge.new_run();
  EXPECT_FALSE(judge.judge(0, collapsed_low()));  // the count started again
  SilentReadings empty = collapsed_low();
  empty.words = {0, 0};  // nothing to find: a map of zeros is right
  EXPECT_FALSE(judge.judge(1, empty));
  const auto found = judge.judge(2, collapsed_low());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->detail["since"].get<int64_t>(), 0);
}

TEST(SilentJudgeTest, ChecksTurnedOffFindNothing) {
  SilentOptions o;
  o.input = o.labels = o.predictions = false;
  o.collapse_after = 0;
  o.collapse_steps = 1;
  SilentReadings r = collapsed_low();
  r.images = {image(0, 0, 0)};
  r.inside = {0, 0};
  EXPECT_FALSE(SilentJudge(o).judge(0, r).has_value());
}

}  // namespace
}  // namespace dbh::harness

// Note [One failure identity] (harness/bisect/reproduction.cc): what makes a
// probe's failure the failure being searched, on hand-built probe results.
#include <gtest/gtest.h>

#include <string>

#include "harness/bisect/parts.h"

namespace dbh::harness::bisect {
namespace {

probe::ProbeResult failing(const std::string& klass, const std::string& message, int64_t step) {
  probe::ProbeResult p;
  p.verdict = probe::Verdict::kFail;
  p.analysis.outcome = scenario::Outcome::kFailed;
  p.analysis.failure.klass = klass;
  p.analysis.failure.message = message;
  p.analysis.failure.step = step;
  p.analysis.steps_completed = step;
  return p;
}

// A label fault that degrades every sample names whichever sample is judged
// first; a seed moves it. The same class is the same failure, whatever
// sample or step its message names.
TEST(FailureIdentity, TheSampleWhereASymptomShowedFirstIsEvidenceNotIdentity) {
  const auto first = failing("labels_degenerate", "labels of img_006.jpg hold no positive pixel", 3);
  const Signature sig = signature_of(first, model::DecoderKind::kFpn, false);
  EXPECT_TRUE(sig.files.empty()) << sig.text();
  const auto other_seed = failing("labels_degenerate", "labels of img_002.jpg hold no positive pixel", 5);
  EXPECT_EQ(difference(other_seed, sig), "");
  EXPECT_EQ(judge(other_seed, sig), probe::Verdict::kFail);
  EXPECT_EQ(judge(failing("not_learning", "the loss did not fall", 5), sig), probe::Verdict::kDifferent);
}

// An image that cannot be read is the failure itself: another file is
// another failure.
TEST(FailureIdentity, AnUnreadableFileIsTheCause) {
  EXPECT_TRUE(file_is_the_cause("data_invalid"));
  EXPECT_FALSE(file_is_the_cause("labels_degenerate"));
  const auto broken = failing("data_invalid", "images/img_006.jpg: cannot decode the image", 0);
  const Signature sig = signature_of(broken, model::DecoderKind::kFpn, false);
  EXPECT_EQ(sig.files, (std::vector<std::string>{"img_006.jpg"}));
  EXPECT_EQ(difference(failing("data_invalid", "images/img_002.jpg: cannot decode the image", 0), sig),
            "its message does not name img_006.jpg");
}

// The step belongs to a replay of one configuration only.
TEST(FailureIdentity, TheStepCountsOnlyForAReplay) {
  const auto at3 = failing("nonfinite_loss", "non-finite loss at step 3", 3);
  const auto at5 = failing("nonfinite_loss", "non-finite loss at step 5", 5);
  EXPECT_EQ(difference(at5, signature_of(at3, model::DecoderKind::kFpn, false)), "");
  EXPECT_EQ(difference(at5, signature_of(at3, model::DecoderKind::kFpn, true)), "failed at step 5 instead of 3");
}

}  // namespace
}  // namespace dbh::harness::bisect

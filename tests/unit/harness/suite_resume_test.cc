// dbh suite --resume: whether a scenario the journal records as finished is
// run again, decided over values (rerun_reason).

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "harness/bisect/probe.h"
#include "harness/cli/suite_outputs.h"

namespace dbh::harness {
namespace {

InputManifest Inputs(const std::string& weights_digest) {
  InputManifest m;
  m.entries = {{"scenario", "abc"}, {"weights.pt", weights_digest}};
  return m;
}

nlohmann::json Finished(const std::string& hash, const InputManifest& inputs) {
  return {{"type", "finished"}, {"scenario", "s"}, {"hash", hash}, {"inputs", inputs.hash()}};
}

TEST(RerunReason, TheSameConfigurationOnTheSameInputsIsNotRunAgain) {
  EXPECT_EQ(rerun_reason(Finished("h1", Inputs("w1")), "h1", Inputs("w1")), "");
}

TEST(RerunReason, AnEditedScenarioOrOtherOverridesRunAgain) {
  EXPECT_EQ(rerun_reason(Finished("h1", Inputs("w1")), "h2", Inputs("w1")),
            "its scenario or overrides changed since it finished");
}

TEST(RerunReason, OtherInputsRunAgain) {
  EXPECT_NE(rerun_reason(Finished("h1", Inputs("w1")), "h1", Inputs("w2")).find("its inputs changed"),
            std::string::npos);
}

TEST(RerunReason, AnEarlierRecordWithoutADigestOrInputsThatCannotBeComparedRunAgain) {
  nlohmann::json old = Finished("h1", Inputs("w1"));
  old.erase("inputs");
  EXPECT_EQ(rerun_reason(old, "h1", Inputs("w1")), "an earlier dbh recorded no digest of its inputs");
  InputManifest uncomparable = Inputs("w1");
  uncomparable.not_cacheable = "the training's source tree is too large to list";
  EXPECT_EQ(rerun_reason(Finished("h1", Inputs("w1")), "h1", uncomparable), uncomparable.not_cacheable);
}

}  // namespace
}  // namespace dbh::harness

// dbh suite --resume: whether a scenario the journal records as finished is
// run again, decided over values (rerun_reason).

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/probe/probe.h"
#include "harness/cli/suite_outputs.h"

namespace dbh::harness {
namespace {

probe::InputManifest Inputs(const std::string& weights_digest) {
  probe::InputManifest m;
  m.entries = {{"scenario", "abc"}, {"weights.pt", weights_digest}};
  return m;
}

nlohmann::json Finished(const std::string& hash, const probe::InputManifest& inputs) {
  return {{"type", "finished"}, {"scenario", "s"}, {"hash", hash}, {"inputs", inputs.hash()}};
}

TEST(RerunReason, TheSameConfigurationOnTheSameInputsIsNotRunAgain) {
  EXPECT_EQ(cli::rerun_reason(Finished("h1", Inputs("w1")), "h1", Inputs("w1")), "");
}

TEST(RerunReason, AnEditedScenarioOrOtherOverridesRunAgain) {
  EXPECT_EQ(cli::rerun_reason(Finished("h1", Inputs("w1")), "h2", Inputs("w1")),
            "its scenario or overrides changed since it finished");
}

TEST(RerunReason, OtherInputsRunAgain) {
  EXPECT_NE(cli::rerun_reason(Finished("h1", Inputs("w1")), "h1", Inputs("w2")).find("its inputs changed"),
            std::string::npos);
}

TEST(RerunReason, AnEarlierRecordWithoutADigestOrInputsThatCannotBeComparedRunAgain) {
  nlohmann::json old = Finished("h1", Inputs("w1"));
  old.erase("inputs");
  EXPECT_EQ(cli::rerun_reason(old, "h1", Inputs("w1")), "an earlier dbh recorded no digest of its inputs");
  probe::InputManifest uncomparable = Inputs("w1");
  uncomparable.not_cacheable = "the training's source tree is too large to list";
  EXPECT_EQ(cli::rerun_reason(Finished("h1", Inputs("w1")), "h1", uncomparable), uncomparable.not_cacheable);
}

}  // namespace
}  // namespace dbh::harness

namespace dbh::harness {
namespace {

TEST(ResumeState, TheJournalOfThisSuiteGivesWhatStartedAndFinished) {
  const std::vector<nlohmann::json> records = {
      {{"type", "suite"}, {"shard", "0/2 (--shard)"}},
      {{"type", "started"}, {"scenario", "a"}},
      {{"type", "finished"}, {"scenario", "a"}, {"outcome", "passed"}},
      {{"type", "started"}, {"scenario", "b"}},
  };
  const cli::ResumeState s = cli::resume_state(records, {"a", "b", "c"}, "0/2");
  EXPECT_EQ(s.foreign, "");
  EXPECT_EQ(s.started, (std::set<std::string>{"a", "b"}));
  ASSERT_EQ(s.finished.count("a"), 1u);
  EXPECT_EQ(s.finished.at("a")["outcome"], "passed");
  EXPECT_EQ(s.finished.count("b"), 0u);  // interrupted: run again
}

TEST(ResumeState, AnotherShardsJournalIsForeign) {
  const cli::ResumeState s = cli::resume_state({{{"type", "suite"}, {"shard", "1/2 (SLURM_ARRAY_TASK_ID)"}}}, {"a"}, "0/2");
  EXPECT_EQ(s.foreign, "a journal of shard 1/2, not of shard 0/2");
  EXPECT_EQ(cli::resume_state({{{"type", "suite"}, {"shard", ""}}}, {"a"}, "0/2").foreign,
            "a journal of a whole suite, not of shard 0/2");
}

TEST(ResumeState, AJournalNamingAScenarioThisSuiteDoesNotHoldIsForeign) {
  const cli::ResumeState s = cli::resume_state({{{"type", "finished"}, {"scenario", "zz"}}}, {"a"}, "");
  EXPECT_NE(s.foreign.find("naming scenario"), std::string::npos) << s.foreign;
  EXPECT_NE(s.foreign.find("which this suite does not hold"), std::string::npos) << s.foreign;
}

}  // namespace
}  // namespace dbh::harness

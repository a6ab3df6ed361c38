// `dbh tune`'s decision (harness/cli/tune_command.h): a verdict per measured
// choices record and the command's exit status, without a process.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/cli/tune_command.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

json Record(const char* source) {
  return {{"channels_last", {{"value", false}, {"source", source}}},
          {"threads", {{"value", 2}, {"source", source}}},
          {"timings", json::array()}};
}

TEST(TuneVerdictTest, EachRecordGetsItsVerdict) {
  EXPECT_EQ(judge_tuning(nullptr), TuneVerdict::kNothingToChoose);
  EXPECT_EQ(judge_tuning(Record("measured")), TuneVerdict::kMeasured);
  EXPECT_EQ(judge_tuning(Record("cached")), TuneVerdict::kCached);
  json untrusted = Record("default");
  untrusted["untrusted"] = "other processes kept 1.2 cores busy";
  EXPECT_EQ(judge_tuning(untrusted), TuneVerdict::kUntrusted);
  json failed = Record("default");
  failed["error"] = "the measuring worker ran past its deadline";
  EXPECT_EQ(judge_tuning(failed), TuneVerdict::kFailed);
  // Only one setting left to `auto`, measured now.
  json one = {{"threads", {{"value", 1}, {"source", "measured"}}}};
  EXPECT_EQ(judge_tuning(one), TuneVerdict::kMeasured);
}

TEST(TuneVerdictTest, ExitsOneWhenAScenarioWillRunWithPyTorchsDefaults) {
  EXPECT_EQ(tune_exit_code({}), 0);
  EXPECT_EQ(tune_exit_code({TuneVerdict::kMeasured, TuneVerdict::kCached, TuneVerdict::kNothingToChoose}), 0);
  EXPECT_EQ(tune_exit_code({TuneVerdict::kMeasured, TuneVerdict::kUntrusted}), 1);
  EXPECT_EQ(tune_exit_code({TuneVerdict::kFailed}), 1);
  for (const auto v : {TuneVerdict::kNothingToChoose, TuneVerdict::kCached, TuneVerdict::kMeasured,
                       TuneVerdict::kUntrusted, TuneVerdict::kFailed}) {
    EXPECT_NE(to_string(v), "?");
  }
}

}  // namespace
}  // namespace dbh::harness

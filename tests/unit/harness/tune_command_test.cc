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
  EXPECT_EQ(cli::judge_tuning(nullptr), cli::TuneVerdict::kNothingToChoose);
  EXPECT_EQ(cli::judge_tuning(Record("measured")), cli::TuneVerdict::kMeasured);
  EXPECT_EQ(cli::judge_tuning(Record("cached")), cli::TuneVerdict::kCached);
  json untrusted = Record("default");
  untrusted["untrusted"] = "other processes kept 1.2 cores busy";
  EXPECT_EQ(cli::judge_tuning(untrusted), cli::TuneVerdict::kUntrusted);
  json failed = Record("default");
  failed["error"] = "the measuring worker ran past its deadline";
  EXPECT_EQ(cli::judge_tuning(failed), cli::TuneVerdict::kFailed);
  // Only one setting left to `auto`, measured now.
  json one = {{"threads", {{"value", 1}, {"source", "measured"}}}};
  EXPECT_EQ(cli::judge_tuning(one), cli::TuneVerdict::kMeasured);
}

TEST(TuneVerdictTest, ExitsOneWhenAScenarioWillRunWithPyTorchsDefaults) {
  EXPECT_EQ(cli::tune_exit_code({}), 0);
  EXPECT_EQ(cli::tune_exit_code({cli::TuneVerdict::kMeasured, cli::TuneVerdict::kCached, cli::TuneVerdict::kNothingToChoose}), 0);
  EXPECT_EQ(cli::tune_exit_code({cli::TuneVerdict::kMeasured, cli::TuneVerdict::kUntrusted}), 1);
  EXPECT_EQ(cli::tune_exit_code({cli::TuneVerdict::kFailed}), 1);
  for (const auto v : {cli::TuneVerdict::kNothingToChoose, cli::TuneVerdict::kCached, cli::TuneVerdict::kMeasured,
                       cli::TuneVerdict::kUntrusted, cli::TuneVerdict::kFailed}) {
    EXPECT_NE(to_string(v), "?");
  }
}

}  // namespace
}  // namespace dbh::harness

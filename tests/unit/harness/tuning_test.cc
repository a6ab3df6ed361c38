// Measured choices: the `auto` values of train.channels_last and
// train.threads, and how a measurement's candidates are chosen from (Note
// [Measured choices] in harness/supervisor/tuning.h). The measuring itself is
// driven through the dbh binary in tests/integration/tuning_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/tuning.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json candidate(bool channels_last, int64_t threads, std::vector<double> seconds) {
  return {{"channels_last", channels_last}, {"threads", threads}, {"seconds", seconds}};
}

TEST(ChooseCandidateTest, TheFastestByItsBestStepWins) {
  const json c = json::array({candidate(false, 2, {1.0, 0.9}), candidate(true, 2, {0.52, 0.5}),
                              candidate(false, 1, {0.8, 0.85}), candidate(true, 1, {0.7, 2.0})});
  EXPECT_EQ(supervisor::choose_candidate(c, false, 2), 1);
}

// Note [A measurement to trust]: 10 % faster by the best step, but each
// candidate's steps spread over 30 %: a tie, which keeps PyTorch's default.
TEST(ChooseCandidateTest, ADifferenceInsideTheSpreadIsATie) {
  json c = json::array({candidate(false, 2, {1.0, 1.3, 1.1}), candidate(false, 1, {0.9, 1.2, 1.0})});
  EXPECT_EQ(supervisor::choose_candidate(c, false, 2), 0);
  // The same difference with steady steps stands out.
  c = json::array({candidate(false, 2, {1.0, 1.01, 1.0}), candidate(false, 1, {0.9, 0.91, 0.9})});
  EXPECT_EQ(supervisor::choose_candidate(c, false, 2), 1);
}

TEST(ChooseCandidateTest, PyTorchsDefaultWinsATieWithinTheMargin) {
  // channels-last 2 % faster than NCHW with every core: NCHW stays.
  json c = json::array({candidate(false, 2, {1.00}), candidate(true, 2, {0.98})});
  EXPECT_EQ(supervisor::choose_candidate(c, false, 2), 0);
  // 5 % faster: channels-last.
  c = json::array({candidate(false, 2, {1.00}), candidate(true, 2, {0.95})});
  EXPECT_EQ(supervisor::choose_candidate(c, false, 2), 1);
  // The default is the candidate with every core: with 4 cores, 2 threads is
  // a candidate like any other.
  c = json::array({candidate(false, 4, {1.00}), candidate(false, 2, {0.99})});
  EXPECT_EQ(supervisor::choose_candidate(c, false, 4), 0);
  EXPECT_EQ(supervisor::choose_candidate(c, false, 2), 1);
  // With channels-last fixed by the scenario, the default is channels-last
  // with every core.
  c = json::array({candidate(true, 4, {1.00}), candidate(true, 2, {0.99})});
  EXPECT_EQ(supervisor::choose_candidate(c, true, 4), 0);
  EXPECT_EQ(supervisor::choose_candidate(c, false, 4), 1);
}

TEST(ChooseCandidateTest, NothingTimedChoosesNothing) {
  EXPECT_EQ(supervisor::choose_candidate(json::array(), false, 2), -1);
  EXPECT_EQ(supervisor::choose_candidate(json::array({candidate(false, 2, {})}), false, 2), -1);
  EXPECT_EQ(supervisor::choose_candidate(json::object(), false, 2), -1);
}

class AutoSettings : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_dir("auto-settings"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& text) {
    const fs::path p = dir_ / "s.yaml";
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(AutoSettings, AutoIsTheDefaultAndExplicitValuesWin) {
  const scenario::Scenario d = scenario::load_scenario(write("name: s\n"));
  EXPECT_FALSE(d.train.channels_last.has_value());
  EXPECT_EQ(d.train.threads, scenario::TrainConfig::kAutoThreads);
  const json r = json::parse(scenario::resolved_json(d));
  EXPECT_EQ(r["train"]["channels_last"], "auto");
  EXPECT_EQ(r["train"]["threads"], "auto");

  const scenario::Scenario e = scenario::load_scenario(write("train:\n  channels_last: true\n  threads: 0\n"));
  ASSERT_TRUE(e.train.channels_last.has_value());
  EXPECT_TRUE(*e.train.channels_last);
  EXPECT_EQ(e.train.threads, 0);  // all cores, not measured
  const scenario::Scenario o = scenario::load_scenario(write("name: s\n"), {"train.channels_last=false", "train.threads=3"});
  EXPECT_EQ(o.train.channels_last, std::optional<bool>(false));
  EXPECT_EQ(o.train.threads, 3);
  // `auto` written out is the same as leaving it out.
  const scenario::Scenario a = scenario::load_scenario(write("train:\n  channels_last: auto\n  threads: auto\n"));
  EXPECT_FALSE(a.train.channels_last.has_value());
  EXPECT_EQ(a.train.threads, scenario::TrainConfig::kAutoThreads);
}

TEST_F(AutoSettings, OtherValuesNameTheKeyAndWhatIsAllowed) {
  auto error = [&](const std::string& text) {
    try {
      (void)scenario::load_scenario(write(text));
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string cl = error("train:\n  channels_last: sometimes\n");
  EXPECT_NE(cl.find("s.yaml:2:18: train.channels_last: expected auto, true or false, got"), std::string::npos) << cl;
  for (const char* bad : {"-1", "1025", "two", "[2]"}) {
    const std::string t = error(std::string("train:\n  threads: ") + bad + "\n");
    EXPECT_NE(t.find("train.threads: expected auto, 0 (all cores) or a number of threads up to 1024, got"),
              std::string::npos)
        << bad << ": " << t;
  }
}

}  // namespace
}  // namespace dbh::harness

// Silent failures through the dbh binary: every scenario under
// scenarios/silent/ through `dbh suite` (expectation met, report.md naming
// the class and its evidence), each silent fault → its failure class, the
// same runs without the fault passing (no false alarm), the input fault's
// other kinds, the monitors switched off, and placement errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/scenario/fault_catalog.h"
#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::read_text;
using testing::RemoveOnExit;
using testing::run_process;

testing::ProcessResult dbh(std::vector<std::string> args, double timeout_s = 300) {
  args.insert(args.begin(), DBH_BINARY);
  return run_process(args, DBH_SOURCE_DIR, timeout_s);
}

const fs::path kSilentDir = fs::path(DBH_SOURCE_DIR) / "scenarios" / "silent";

bool real_fixtures_present() {
  return fs::exists(fs::path(DBH_SOURCE_DIR) / "fixtures" / "real" / "annotations.json");
}

std::vector<std::string> silent_scenarios() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kSilentDir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

// Every silent fault of the catalog has a shipped scenario, and every silent
// failure class is the expectation of at least one.
TEST(SilentScenarios, CoverEverySilentFaultAndClass) {
  std::set<std::string> faults, classes;
  for (const auto& name : silent_scenarios()) {
    const harness::scenario::Scenario s = harness::scenario::load_scenario((kSilentDir / (name + ".yaml")).string());
    EXPECT_EQ(s.expect.outcome, harness::scenario::Outcome::kFailed) << name;
    ASSERT_TRUE(s.expect.failure_class.has_value()) << name;
    classes.insert(*s.expect.failure_class);
    for (const auto& f : s.faults)
      faults.insert(f.name);
  }
  for (const auto& spec : harness::scenario::fault_catalog()) {
    if (spec.from_at_step_on) {
      EXPECT_TRUE(faults.count(spec.name)) << spec.name << " has no scenario under scenarios/silent";
    }
  }
  for (const char* c : {"input_denormalised", "labels_degenerate", "predictions_collapsed", "not_learning"}) {
    EXPECT_TRUE(classes.count(c)) << c << " is no scenario's expectation";
  }
}

// One shipped silent scenario through `dbh suite`: the expectation is met, and
// report.json and report.md carry the class, the step and the evidence.
class SilentSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SilentSuiteTest, MeetsItsExpectationWithEvidence) {
  const fs::path file = kSilentDir / (GetParam() + ".yaml");
  const harness::scenario::Scenario s = harness::scenario::load_scenario(file.string());
  if (s.data.source == harness::scenario::DataSource::kReal && !real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const fs::path dir = fresh_dir("silent-suite-" + GetParam());
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"suite", file.string(), "--out", (dir / "out").string(), "-q"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json suite = json::parse(read_text(dir / "out" / "suite.json"));
  EXPECT_EQ(suite.at("scenarios"), 1);
  EXPECT_EQ(suite.at("expectations_met"), 1) << suite.dump(1);

  const fs::path run = dir / "out" / GetParam();
  const json j = json::parse(read_text(run / "report.json"));
  EXPECT_EQ(j.at("outcome"), "failed");
  EXPECT_TRUE(j.at("expectation").at("met").get<bool>()) << j.at("expectation").dump();
  const json& f = j.at("failure");
  ASSERT_TRUE(s.expect.failure_class.has_value());
  EXPECT_EQ(f.at("class"), *s.expect.failure_class);
  if (s.expect.step) {
    EXPECT_EQ(f.at("step"), *s.expect.step);
  }
  EXPECT_FALSE(f.at("message").get<std::string>().empty());
  const auto evidence = f.at("evidence").get<std::vector<std::string>>();
  ASSERT_GE(evidence.size(), 2u) << f.dump(1);
  // Every fault fired (a fault that never acted proves nothing).
  for (const auto& fault : j.at("faults"))
    EXPECT_TRUE(fault.at("fired").get<bool>()) << fault.dump();
  EXPECT_TRUE(fs::exists(run / ".FAILURE"));

  const std::string md = read_text(run / "report.md");
  EXPECT_NE(md.find("`" + *s.expect.failure_class + "`"), std::string::npos) << md;
  // As it reads rendered: Markdown's backslash escapes (img\_004.png) undone.
  std::string rendered;
  for (size_t i = 0; i < md.size(); ++i) {
    if (md[i] == '\\' && i + 1 < md.size() && std::ispunct(static_cast<unsigned char>(md[i + 1]))) ++i;
    rendered += md[i];
  }
  for (const auto& e : evidence)
    EXPECT_NE(rendered.find(e), std::string::npos) << "report.md lacks the evidence: " << e;
  // The evidence says what was measured, with numbers and the step.
  EXPECT_NE(evidence.front().find("step"), std::string::npos) << evidence.front();
  EXPECT_TRUE(std::any_of(evidence.front().begin(), evidence.front().end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  })) << evidence.front();
}

INSTANTIATE_TEST_SUITE_P(Shipped, SilentSuiteTest, ::testing::ValuesIn(silent_scenarios()), test_name);

// The same scenario without its fault (and expecting a pass) passes: the
// monitors do not fire on healthy runs with the very same settings.
class SilentControlTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SilentControlTest, WithoutTheFaultItPasses) {
  const fs::path file = kSilentDir / (GetParam() + ".yaml");
  const harness::scenario::Scenario s = harness::scenario::load_scenario(file.string());
  if (s.data.source == harness::scenario::DataSource::kReal && !real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const fs::path dir = fresh_dir("silent-control-" + GetParam());
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", file.string(), "faults=[]", "expect.outcome=passed", "expect.failure_class=null",
                      "expect.step=null", "--out", (dir / "out").string(), "-q"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const json j = json::parse(read_text(dir / "out" / "report.json"));
  EXPECT_EQ(j.at("outcome"), "passed") << j.at("failure").dump(1);
  EXPECT_EQ(j.at("steps_completed"), s.train.max_steps);
  // The monitors looked at every step: their readings are in the events.
  std::ifstream events(dir / "out" / "events.jsonl");
  int with_readings = 0;
  for (std::string line; std::getline(events, line);) {
    const json e = json::parse(line);
    if (e.at("type") != harness::proto::event::kStepEnd) continue;
    const json& silent = e.at("silent");
    if (silent.contains("text_pixels") && silent.contains("prob_max")) ++with_readings;
  }
  EXPECT_EQ(with_readings, s.train.max_steps);
}

INSTANTIATE_TEST_SUITE_P(Shipped, SilentControlTest, ::testing::ValuesIn(silent_scenarios()), test_name);

// wrong_normalisation's other kinds: the input monitor tells saturated input
// and raw, never normalised pixel values apart from black.
class SilentInputKindTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SilentInputKindTest, IsFoundWithItsKindInTheEvidence) {
  if (!real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const std::string kind = GetParam();
  const fs::path dir = fresh_dir("silent-kind-" + kind);
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", "scenarios/silent/wrong-normalisation.yaml", "faults.0.kind=" + kind, "train.max_steps=2",
                      "--out", (dir / "out").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json f = json::parse(read_text(dir / "out" / "report.json")).at("failure");
  EXPECT_EQ(f.at("class"), "input_denormalised");
  EXPECT_EQ(f.at("step"), 1);
  const std::string first = f.at("evidence").at(0);
  EXPECT_NE(first.find("saturated"), std::string::npos) << first;
  if (kind == "unnormalised") {
    EXPECT_NE(first.find("above white (255)"), std::string::npos) << first;
  } else {
    EXPECT_NE(first.find("input mean 255.000"), std::string::npos) << first;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, SilentInputKindTest, ::testing::Values("saturated", "unnormalised"), test_name);

// The failing batch is kept as overlays, as for a divergence: a black input
// shows up as black pictures in the report.
TEST(SilentFaultTest, TheFailingBatchIsWrittenAsOverlays) {
  if (!real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const fs::path dir = fresh_dir("silent-overlays");
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", "scenarios/silent/wrong-normalisation.yaml", "--out", (dir / "out").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  size_t pngs = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir / "out" / "main" / "overlays", ec)) {
    if (e.path().extension() == ".png" && fs::file_size(e.path()) > 0) ++pngs;
  }
  EXPECT_EQ(pngs, 2u) << "one overlay per sample of the failing batch";
  EXPECT_NE(read_text(dir / "out" / "report.md").find("main/overlays/"), std::string::npos);
}

// Localise mode (the replays of bisect) finds the same at the same step.
TEST(SilentFaultTest, LocaliseModeFindsTheSame) {
  if (!real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const fs::path dir = fresh_dir("silent-localise");
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", "scenarios/silent/wrong-normalisation.yaml", "monitors.mode=localise", "train.max_steps=2",
                      "--out", (dir / "out").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json j = json::parse(read_text(dir / "out" / "report.json"));
  EXPECT_EQ(j.at("failure").at("class"), "input_denormalised");
  EXPECT_EQ(j.at("failure").at("step"), 1);
  std::ifstream events(dir / "out" / "events.jsonl");
  bool localise = false;
  for (std::string line; std::getline(events, line);) {
    const json e = json::parse(line);
    if (e.at("type") == harness::proto::event::kHealth && e.value("check", "") == "input_denormalised")
      localise = e.value("mode", "") == "localise";
  }
  EXPECT_TRUE(localise) << "the health event says which mode found it";
}

// With the silent checks off the same broken run "passes": what the monitors
// add, and the switch that turns them off.
TEST(SilentFaultTest, SwitchedOffTheBrokenRunPasses) {
  if (!real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const fs::path dir = fresh_dir("silent-off");
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", "scenarios/silent/all-dont-care.yaml", "monitors.silent=false", "train.max_steps=2",
                      "--out", (dir / "out").string(), "-q"});
  EXPECT_EQ(r.exit_code, 1) << "the expectation (labels_degenerate) is not met\n" << r.out << r.err;
  const json j = json::parse(read_text(dir / "out" / "report.json"));
  EXPECT_EQ(j.at("outcome"), "passed");
  EXPECT_EQ(j.at("steps_completed"), 2);
}

// Only the named checks run: with labels off and the predictions check still
// in its warm-up, shifted labels go unnoticed.
TEST(SilentFaultTest, OnlyTheListedChecksRun) {
  if (!real_fixtures_present()) GTEST_SKIP() << "fixtures/real is absent";
  const fs::path dir = fresh_dir("silent-some");
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", "scenarios/silent/label-shift.yaml", "monitors.silent=[input, predictions]",
                      "train.max_steps=2", "--out", (dir / "out").string(), "-q"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(json::parse(read_text(dir / "out" / "report.json")).at("outcome"), "passed");
}

// A fault placed where it cannot act is a scenario error (exit 2) before
// anything runs.
TEST(SilentFaultTest, PlacementErrorsStopBeforeAnythingRuns) {
  const fs::path dir = fresh_dir("silent-placement");
  RemoveOnExit cleanup(dir);
  const auto r = dbh({"run", "scenarios/silent/label-swap.yaml", "data.batch_size=1", "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("faults[0]: expected label_swap with data.batch_size >= 2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  const auto r2 = dbh({"run", "scenarios/silent/label-shift.yaml", "faults.0.dx=500", "--out", (dir / "out").string()});
  EXPECT_EQ(r2.exit_code, 2) << r2.out << r2.err;
  EXPECT_NE(r2.err.find("faults[0].dx: expected a shift of at most data.size (128) pixels, got 500"), std::string::npos)
      << r2.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

}  // namespace
}  // namespace dbh

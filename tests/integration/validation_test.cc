// Validation during training (train.eval_every, data.val): the evaluation is
// in the events, metrics.csv, report.json and report.md; metric expectations
// and the h-mean monitors turn "trains but learns nothing" into a failure.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::write_text;

fs::path fresh_dir(const std::string& name) { return testing::fresh_dir("dbh-val-" + name); }

// A short run on the real fixtures, validated on the last 3 of them.
fs::path write_scenario(const fs::path& dir, const std::string& extra) {
  const fs::path p = dir / "s.yaml";
  std::ofstream(p) << "include: " << DBH_SOURCE_DIR << "/scenarios/base/tiny-cpu.yaml\n"
                   << "data: {source: real, path: " << DBH_SOURCE_DIR
                   << "/fixtures/real, size: 128, val: {holdout: 3, size: 128, side: long, batch_size: 3}}\n"
                   << "train: {max_steps: 4, eval_every: 2}\n"
                   << extra;
  return p;
}

testing::ProcessResult dbh(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {DBH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_process(argv, DBH_SOURCE_DIR, 300);
}

TEST(ValidationTest, EvaluationsReachEveryReport) {
  const fs::path dir = fresh_dir("reports");
  const fs::path out = dir / "out";
  const auto r = dbh({"run", write_scenario(dir, "").string(), "--out", out.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(read_text(out / "report.json"));
  const auto& ev = j.at("evaluation");
  EXPECT_EQ(ev.at("evaluator_self_check"), 1.0);
  ASSERT_EQ(ev.at("evaluations").size(), 2u) << ev.dump(2);
  EXPECT_EQ(ev["evaluations"][0]["step"], 2);
  EXPECT_EQ(ev["evaluations"][1]["step"], 4);
  for (const auto& e : ev["evaluations"]) {
    EXPECT_EQ(e["images"], 3);  // the held-out samples
    EXPECT_GT(e["gt"].get<int64_t>(), 0);
    EXPECT_LE(e["matched"].get<int64_t>(), e["gt"].get<int64_t>());
    EXPECT_LE(e["matched"].get<int64_t>(), e["det"].get<int64_t>());
  }
  ASSERT_EQ(ev.at("overlays").size(), 3u);
  for (const auto& o : ev["overlays"]) EXPECT_TRUE(fs::exists(out / "main" / o.get<std::string>())) << o;
  EXPECT_TRUE(fs::exists(out / "hmean.png"));
  const std::string csv = read_text(out / "metrics.csv");
  EXPECT_NE(csv.find(",hmean,precision,recall\n"), std::string::npos);
  EXPECT_NE(read_text(out / "report.md").find("evaluator self-check on the ground truth"), std::string::npos);
  // The held-out samples are not trained on.
  const std::string events = read_text(out / "events.jsonl");
  for (const char* held_out : {"img_008", "img_009", "img_010"}) {
    EXPECT_EQ(events.find(std::string("\"") + held_out), std::string::npos) << held_out << " was trained on";
  }
  fs::remove_all(dir);
}

TEST(ValidationTest, AMetricExpectationFailsARunThatLearnsNothing) {
  const fs::path dir = fresh_dir("min-hmean");
  const auto r = dbh({"run", write_scenario(dir, "expect: {min_hmean: 0.5, loss_drop: 0.99}\n").string(), "--out",
                      (dir / "out").string(), "-q"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("min_hmean: expected at least 0.500, got 0.000 after step 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loss_drop: expected the loss to fall by at least 99.0 %, got"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(ValidationTest, HmeanStuckAtZeroIsASilentFailure) {
  const fs::path dir = fresh_dir("zero");
  const auto r = dbh({"run",
                      write_scenario(dir, "monitors: {hmean_zero_after: 2}\n"
                                          "expect: {outcome: failed, failure_class: hmean_zero, step: 3}\n")
                          .string(),
                      "--out", (dir / "out").string(), "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;  // the evaluation after step 3 (0-based) is the last
  const auto j = nlohmann::json::parse(read_text(dir / "out" / "report.json"));
  EXPECT_EQ(j["outcome"], "failed");
  EXPECT_EQ(j["failure"]["class"], "hmean_zero");
  EXPECT_EQ(j["failure"]["step"], 3);
  EXPECT_NE(j["failure"]["message"].get<std::string>().find("stayed 0.000 for the last 2 evaluations"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dbh

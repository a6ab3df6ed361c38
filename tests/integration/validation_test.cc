// Validation during training (train.eval_every, data.val): the evaluation is
// in the events, metrics.csv, report.json and report.md; metric expectations
// and the h-mean monitors turn "trains but learns nothing" into a failure.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::write_text;

// A new folder for one test, removed when the test program exits (a test's
// training writes checkpoints: about 100 MB a run).
fs::path fresh_dir(const std::string& name) {
  return testing::removed_at_exit(testing::fresh_dir("dbh-val-" + name));
}

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

// Note [One validation]: `dbh train --val-data` validates with the worker's
// code, at its cadence (every --eval-every steps and after the last), and its
// metrics.csv carries the numbers in `dbh run`'s columns.
TEST(ValidationTest, DbhTrainValidatesAtTheCadenceDbhRunDoes) {
  const fs::path dir = fresh_dir("train");
  const fs::path out = dir / "out";
  const std::string fixtures = std::string(DBH_SOURCE_DIR) + "/fixtures/real";
  const auto r = dbh({"train", "--data", fixtures, "--val-data", fixtures, "--eval-every", "2", "--val-size", "128",
                      "--val-side", "long", "--steps", "3", "--size", "64", "--batch-size", "1", "--threads", "1",
                      "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("validation after step 2: hmean "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation after step 3: hmean "), std::string::npos) << r.out;
  std::istringstream csv(read_text(out / "metrics.csv"));
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].substr(rows[1].size() - 3), ",,,") << rows[1];  // after step 1: none
  for (const size_t i : {size_t{2}, size_t{3}}) {
    // hmean, precision and recall: three numbers in [0, 1].
    const std::string& row = rows[i];
    const size_t recall_at = row.rfind(','), precision_at = row.rfind(',', recall_at - 1),
                 hmean_at = row.rfind(',', precision_at - 1);
    for (const auto& [from, to] : {std::pair{hmean_at, precision_at}, std::pair{precision_at, recall_at},
                                  std::pair{recall_at, row.size()}}) {
      const std::string cell = row.substr(from + 1, to - from - 1);
      ASSERT_FALSE(cell.empty()) << row;
      EXPECT_GE(std::stod(cell), 0.0) << row;
      EXPECT_LE(std::stod(cell), 1.0) << row;
    }
  }
  const auto summary = nlohmann::json::parse(read_text(out / "summary.json"));
  ASSERT_TRUE(summary.contains("last_validation")) << summary.dump(2);
  EXPECT_EQ(summary["last_validation"]["step"], 3);
  EXPECT_EQ(summary["last_validation"]["images"], 10);
  EXPECT_GT(summary["last_validation"]["gt"].get<int64_t>(), 0);
  // --eval-every without --val-data is refused, as the scenario key is.
  const auto alone = dbh({"train", "--eval-every", "2", "--steps", "1", "--size", "64", "--out", (dir / "o2").string()});
  EXPECT_EQ(alone.exit_code, 2) << alone.out << alone.err;
  EXPECT_NE(alone.err.find("--eval-every"), std::string::npos) << alone.err;
  EXPECT_FALSE(fs::exists(dir / "o2"));
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
  // Note [One metrics.csv]: the header `dbh train` writes too.
  EXPECT_EQ(csv.rfind("run,step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,rss_bytes,loss_bits,hmean,"
                      "precision,recall\n", 0),
            0u)
      << csv.substr(0, 200);
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

// A validation set without a scorable word (the fixtures' last two images
// hold no text) is nothing to score, never a broken evaluator: its own class,
// with the hold-out named in the evidence.
TEST(ValidationTest, AValidationSetWithoutWordsIsNothingToScoreNotABrokenEvaluator) {
  const fs::path dir = fresh_dir("no-words");
  const fs::path s = dir / "s.yaml";
  std::ofstream(s) << "include: " << DBH_SOURCE_DIR << "/scenarios/base/tiny-cpu.yaml\n"
                   << "data: {source: real, path: " << DBH_SOURCE_DIR << "/fixtures/real, val: {holdout: 2}}\n"
                   << "train: {max_steps: 2}\n";
  const auto r = dbh({"run", s.string(), "--out", (dir / "out").string(), "-q"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto j = nlohmann::json::parse(read_text(dir / "out" / "report.json"));
  EXPECT_EQ(j["failure"]["class"], "validation_unscorable") << j["failure"].dump(2);
  EXPECT_NE(j["failure"]["message"].get<std::string>().find("nothing to score"), std::string::npos);
  EXPECT_NE(read_text(dir / "out" / "report.md").find("The validation set holds nothing to score"), std::string::npos);
  fs::remove_all(dir);
}

// The whole pipeline learns: scenarios/validation/learns-on-fixtures.yaml
// trains ResNet-18 + FPN from scratch on two fixture images and validates on
// all ten (its own expectations: passed, h-mean at least 0.05, loss down by
// half); the h-mean rises over the evaluations; `dbh eval` scores the final
// checkpoint on the fixtures with detections matched on the trained images;
// `bisect config` finds the setting that makes its h-mean collapse.
// About 20 minutes on 2 cores: `ctest --preset training` (label `training`,
// which sets DBH_TRAINING_TESTS=1); skips visibly elsewhere.
TEST(LearningSlowTest, ResNet18FpnLearnsTheFixturesAndEvalScoresItsCheckpoint) {
  const char* on = std::getenv("DBH_TRAINING_TESTS");
  if (on == nullptr || std::string(on) != "1") {
    GTEST_SKIP() << "trains for about 20 minutes on 2 cores: runs under ctest --preset training (DBH_TRAINING_TESTS=1)";
  }
  const fs::path dir = fresh_dir("learns");
  const fs::path out = dir / "run";
  std::vector<std::string> argv = {DBH_BINARY, "run", "scenarios/validation/learns-on-fixtures.yaml", "--out",
                                   out.string(), "-q"};
  const auto r = testing::run_process(argv, DBH_SOURCE_DIR, 3600);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(read_text(out / "report.json"));
  const auto& evals = j.at("evaluation").at("evaluations");
  ASSERT_EQ(evals.size(), 5u) << evals.dump(2);
  EXPECT_EQ(evals[0]["step"], 100);
  const double first = evals[0]["hmean"].get<double>();
  const double last = evals[evals.size() - 1]["hmean"].get<double>();
  EXPECT_GE(last, 0.05) << evals.dump(2);
  EXPECT_GT(last, first) << evals.dump(2);

  const fs::path checkpoint = out / "main" / "checkpoint-r0-s500.pt";
  ASSERT_TRUE(fs::exists(checkpoint));
  const fs::path scored = dir / "eval";
  const auto e = testing::run_process({DBH_BINARY, "eval", "--weights", checkpoint.string(), "--data", "fixtures/real",
                                       "--size", "256", "--side", "long", "--threads", "2", "--overlays", "10",
                                       "--out", scored.string(), "-q"},
                                      DBH_SOURCE_DIR, 600);
  ASSERT_EQ(e.exit_code, 0) << e.out << e.err;
  const auto k = nlohmann::json::parse(read_text(scored / "eval.json"));
  // The same weights at the same settings: the last validation's h-mean (up to
  // a box that the input layout's rounding tips over a threshold).
  EXPECT_NEAR(k["overall"]["hmean"].get<double>(), last, 0.02) << k["overall"].dump();
  for (const auto& image : k["images"]) {
    if (image["file"] == "img_003.png" || image["file"] == "img_004.png") {
      EXPECT_GT(image["counts"]["matched"].get<int64_t>(), 0) << image["file"] << ": no detection on a trained image";
    }
  }
  EXPECT_EQ(k["overlays"].size(), 10u);

  // Which setting makes the h-mean collapse: fine-tuning the checkpoint for
  // 10 SGD steps keeps it (>= 0.1); four changed settings lose it, and
  // `bisect config` names the learning rate.
  const fs::path good = dir / "good.yaml";
  std::ofstream(good) << "name: hmean-fine-tune\ninclude: " << DBH_SOURCE_DIR
                      << "/scenarios/validation/learns-on-fixtures.yaml\nmodel: {weights: " << checkpoint.string()
                      << "}\ntrain: {max_steps: 10, eval_every: 10, checkpoint_every: 0, optimizer: sgd, lr: 0.001}\n"
                      << "expect: {outcome: passed, min_hmean: 0.1, loss_drop: null}\n";
  const fs::path bad = dir / "bad.yaml";
  std::ofstream(bad) << "name: hmean-fine-tune-new-settings\ninclude: " << good.string()
                     << "\ntrain: {lr: 0.05, momentum: 0.8, weight_decay: 0.0005}\ndata: {val: {unclip_ratio: 1.6}}\n";
  const auto b = testing::run_process({DBH_BINARY, "bisect", "config", "--good", good.string(), "--bad", bad.string(),
                                       "--out", (dir / "bisect").string(), "--cache", (dir / "cache").string(), "-q"},
                                      DBH_SOURCE_DIR, 1800);
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  const auto bj = nlohmann::json::parse(read_text(dir / "bisect" / "bisect.json"));
  EXPECT_EQ(bj["result"]["difference"], nlohmann::json::array({"train.lr=0.05"})) << bj.dump(2);
  EXPECT_EQ(bj["result"]["differing_keys"], 4);

  // The silent fault that needs a model that finds text: post-processing
  // settings that keep no box, while the reference settings keep the boxes.
  const fs::path pp = dir / "pp.yaml";
  std::ofstream(pp) << "name: broken-postprocess\ninclude: " << good.string()
                    << "\nfaults:\n  - name: broken_postprocess\n"
                    << "expect: {outcome: failed, failure_class: postprocess_drops_all, min_hmean: null}\n";
  const auto p = testing::run_process({DBH_BINARY, "run", pp.string(), "--out", (dir / "pp").string(), "-q"},
                                      DBH_SOURCE_DIR, 600);
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  const std::string pp_report = read_text(dir / "pp" / "report.md");
  EXPECT_NE(pp_report.find("where the reference settings keep "), std::string::npos) << pp_report;
  EXPECT_EQ(pp_report.find("where the reference settings keep 0 "), std::string::npos) << pp_report;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dbh

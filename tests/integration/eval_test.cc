// `dbh eval` through the real binary: a briefly trained checkpoint and an
// untrained weights file scored on the real fixtures, the report's
// structure and arithmetic, the overlays, and bad input.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "model/eval/overlay.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

testing::ProcessResult dbh(std::vector<std::string> args, double timeout_s = 300) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process(args, DBH_SOURCE_DIR, timeout_s);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// One folder for the whole suite: the checkpoints are shared by the tests.
class EvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-eval-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
    // An untrained model: one step at a negligible learning rate leaves the
    // initial weights (only BatchNorm statistics see one batch).
    const auto init = dbh({"train", "--data", "fixtures/real", "--steps", "1", "--lr", "1e-9",
                           "--size", "64", "--batch-size", "1", "--threads", "2", "--out",
                           (root_ / "init").string(), "-q"});
    ASSERT_EQ(init.exit_code, 0) << init.out << init.err;
    init_checkpoint_ = root_ / "init" / "checkpoint-final.pt";
    ASSERT_TRUE(fs::exists(init_checkpoint_));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static fs::path root_;
  static fs::path init_checkpoint_;
};
fs::path EvalTest::root_;
fs::path EvalTest::init_checkpoint_;

int64_t count_status(const json& list, const std::string& status) {
  return std::count_if(list.begin(), list.end(),
                       [&](const json& e) { return e["status"] == status; });
}

// Note [Reading an evaluation]: an untrained model's saturated map scores
// 0.000; the command line and eval.md say what that means and what to check,
// and eval.html shows the same page with its overlays embedded.
TEST_F(EvalTest, AnUntrainedModelIsReadAsASaturatedMapAndEvalHtmlEmbedsTheOverlays) {
  const fs::path out = root_ / "reading";
  const auto r = dbh({"eval", "--weights", init_checkpoint_.string(), "--data", "fixtures/real", "--size", "64",
                      "--out", out.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("reading: no detection"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on a saturated probability map"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("next: this is what untrained, diverged or mismatched weights produce"), std::string::npos)
      << r.out;
  const json j = json::parse(testing::read_text(out / "eval.json"));
  ASSERT_FALSE(j["reading"].empty());
  EXPECT_EQ(j["reading"][0]["id"], "saturated_map");
  const std::string md = testing::read_text(out / "eval.md");
  EXPECT_NE(md.find("## Reading"), std::string::npos) << md;
  const std::string html = testing::read_text(out / "eval.html");
  EXPECT_NE(html.find("saturated probability map"), std::string::npos);
  size_t embedded = 0;
  for (size_t at = html.find("src=\"data:image/png;base64,"); at != std::string::npos;
       at = html.find("src=\"data:image/png;base64,", at + 1)) {
    ++embedded;
  }
  EXPECT_EQ(embedded, j["overlays"].size()) << "every overlay embedded";
}

// Note [Memory exhaustion is never an internal error]: an evaluation too
// large for the machine's memory (here a 4 GB address-space limit) is exit 2
// with what to change, never exit 3, and leaves no output folder.
TEST_F(EvalTest, RunningOutOfMemoryIsExit2AndKeepsNothing) {
  const fs::path out = root_ / "oom";
  const auto r = testing::run_process({"/bin/sh", "-c", "ulimit -v 4000000 && exec \"$0\" \"$@\"", DBH_BINARY, "eval",
                                       "--weights", init_checkpoint_.string(), "--data", "fixtures/real", "--size",
                                       "8192", "--out", out.string(), "-q"},
                                      DBH_SOURCE_DIR, 300);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("ran out of memory: the input is too large for this machine"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// Pixels close to a pure colour (BGR), as the anti-aliased outlines draw it.
int64_t pixels_near(const cv::Mat& bgr, const cv::Vec3b& colour) {
  int64_t n = 0;
  for (int y = 0; y < bgr.rows; ++y) {
    for (int x = 0; x < bgr.cols; ++x) {
      const cv::Vec3b& p = bgr.at<cv::Vec3b>(y, x);
      n += std::abs(p[0] - colour[0]) + std::abs(p[1] - colour[1]) + std::abs(p[2] - colour[2]) < 30;
    }
  }
  return n;
}

TEST_F(EvalTest, TrainedCheckpointGivesAConsistentReportAndOverlays) {
  const fs::path train = root_ / "train";
  const auto t = dbh({"train", "--data", "fixtures/real", "--steps", "3", "--size", "256",
                      "--batch-size", "1", "--threads", "2", "--out", train.string(), "-q"});
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  const fs::path checkpoint = train / "checkpoint-final.pt";
  ASSERT_TRUE(fs::exists(checkpoint));

  const fs::path out = root_ / "eval-trained";
  // Evaluated at short side 128 (not the reference 736) to keep the test
  // short; the resize and its mapping back are what is exercised.
  const auto r = dbh({"eval", "--weights", checkpoint.string(), "--data", "fixtures/real", "--size",
                      "128", "--threads", "2", "--overlays", "3", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("dbh eval: P "), std::string::npos) << r.out;
  const json j = read_json(out / "eval.json");
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["command"], "eval");
  EXPECT_EQ(j["weights"]["format"], "checkpoint");
  EXPECT_EQ(j["weights"]["step"], 3);
  EXPECT_EQ(j["weights"]["loaded"], j["weights"]["tensors"]);
  EXPECT_TRUE(j["weights"]["missing"].empty());
  EXPECT_EQ(j["model"]["encoder"], "resnet18");
  EXPECT_EQ(j["model"]["decoder"], "fpn");
  EXPECT_EQ(j["settings"]["size"], 128);
  EXPECT_EQ(j["data"]["images"], 10);
  ASSERT_EQ(j["images"].size(), 10u);
  EXPECT_GT(j["timing"]["inference_images_per_s"].get<double>(), 0.0);

  // Per image: counts agree with the listed polygons and their fates.
  int64_t gt = 0, det = 0, matched = 0, words = 0;
  for (const json& image : j["images"]) {
    const std::string file = image["file"];
    EXPECT_NE(r.out.find(file), std::string::npos) << "no progress line for " << file;
    const json& c = image["counts"];
    EXPECT_LE(c["matched"].get<int64_t>(), c["gt"].get<int64_t>()) << file;
    EXPECT_LE(c["matched"].get<int64_t>(), c["det"].get<int64_t>()) << file;
    const json& g = image["ground_truth"];
    const json& d = image["detections"];
    EXPECT_EQ(count_status(g, "matched") + count_status(g, "unmatched"), c["gt"].get<int64_t>()) << file;
    EXPECT_EQ(count_status(d, "matched") + count_status(d, "unmatched"), c["det"].get<int64_t>()) << file;
    EXPECT_EQ(count_status(g, "matched"), c["matched"].get<int64_t>()) << file;
    EXPECT_EQ(count_status(d, "matched"), c["matched"].get<int64_t>()) << file;
    for (const json& w : g) {
      EXPECT_EQ(w["polygon"].size(), 4u);
      if (w["ignore"].get<bool>()) {
        EXPECT_EQ(w["status"], "dont_care") << file;
      }
    }
    for (const json& e : d) {
      EXPECT_GE(e["score"].get<double>(), 0.0);
      EXPECT_LE(e["score"].get<double>(), 1.0);
      for (const json& p : e["polygon"]) {
        EXPECT_GE(p[0].get<double>(), 0.0);
        EXPECT_LE(p[0].get<double>(), image["width"].get<double>());
      }
    }
    for (const char* key : {"precision", "recall", "hmean"}) {
      EXPECT_GE(image[key].get<double>(), 0.0);
      EXPECT_LE(image[key].get<double>(), 1.0);
    }
    EXPECT_EQ(image["input_width"].get<int64_t>() % 32, 0);
    EXPECT_EQ(std::min(image["input_width"].get<int64_t>(), image["input_height"].get<int64_t>()), 128);
    gt += c["gt"].get<int64_t>();
    det += c["det"].get<int64_t>();
    matched += c["matched"].get<int64_t>();
    words += static_cast<int64_t>(g.size());
  }
  EXPECT_EQ(words, 662);  // every word of the fixtures, don't-care included
  EXPECT_EQ(gt, 542);     // the legible ones
  const json& overall = j["overall"];
  EXPECT_EQ(overall["gt"], gt);
  EXPECT_EQ(overall["det"], det);
  EXPECT_EQ(overall["matched"], matched);
  EXPECT_DOUBLE_EQ(overall["recall"].get<double>(), static_cast<double>(matched) / static_cast<double>(gt));
  EXPECT_DOUBLE_EQ(overall["precision"].get<double>(),
                   det == 0 ? 0.0 : static_cast<double>(matched) / static_cast<double>(det));

  // Overlays: the three lowest H-means, drawn on the image (not blank), with
  // the ground truth in green.
  ASSERT_EQ(j["overlays"].size(), 3u);
  double worst_shown = 0;
  std::map<std::string, const json*> by_file;
  for (const json& image : j["images"]) by_file[image["file"]] = &image;
  for (const json& o : j["overlays"]) {
    const fs::path png = out / o["file"].get<std::string>();
    ASSERT_TRUE(fs::exists(png)) << png;
    const cv::Mat overlay = cv::imread(png.string(), cv::IMREAD_COLOR);
    ASSERT_FALSE(overlay.empty()) << png;
    const json& image = *by_file.at(o["image"]);
    EXPECT_EQ(overlay.cols, image["width"].get<int>());
    EXPECT_EQ(overlay.rows, image["height"].get<int>());
    EXPECT_FALSE(model::looks_all_black(overlay)) << png;
    EXPECT_GT(pixels_near(overlay, {0, 255, 0}), 100) << "no ground truth drawn on " << png;
    worst_shown = std::max(worst_shown, o["hmean"].get<double>());
  }
  for (const json& image : j["images"]) {
    const bool shown = std::any_of(j["overlays"].begin(), j["overlays"].end(),
                                   [&](const json& o) { return o["image"] == image["file"]; });
    if (!shown) {
      EXPECT_GE(image["hmean"].get<double>(), worst_shown) << image["file"];
    }
  }
  const std::string md = [&] {
    std::ifstream in(out / "eval.md");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  EXPECT_NE(md.find("## Per image"), std::string::npos);
  EXPECT_NE(md.find("overlays/01-"), std::string::npos);

  // An untrained model, as a plain weights file, scores differently.
  const fs::path random_weights = root_ / "random.pt";
  const auto save = dbh({"eval", "--weights", init_checkpoint_.string(), "--data", "fixtures/real",
                         "--size", "64", "--threads", "2", "--overlays", "0", "--save-weights",
                         random_weights.string(), "--out", (root_ / "eval-init").string(), "-q"});
  ASSERT_EQ(save.exit_code, 0) << save.out << save.err;
  const fs::path random_out = root_ / "eval-random";
  const auto rr = dbh({"eval", "--weights", random_weights.string(), "--data", "fixtures/real",
                       "--size", "128", "--threads", "2", "--overlays", "0", "--out",
                       random_out.string(), "-q"});
  ASSERT_EQ(rr.exit_code, 0) << rr.out << rr.err;
  const json random = read_json(random_out / "eval.json");
  EXPECT_EQ(random["weights"]["format"], "weights");
  EXPECT_EQ(random["weights"]["loaded"], j["weights"]["tensors"]);
  EXPECT_FALSE(fs::exists(random_out / "overlays"));
  ASSERT_EQ(random["images"].size(), j["images"].size());
  double largest_change = 0;
  for (size_t i = 0; i < j["images"].size(); ++i) {
    const json& a = j["images"][i]["probability"];
    const json& b = random["images"][i]["probability"];
    largest_change = std::max(largest_change,
                              std::abs(a["mean"].get<double>() - b["mean"].get<double>()));
  }
  EXPECT_GT(largest_change, 0.01) << "the trained and the untrained model give the same maps";
}

TEST_F(EvalTest, BadInputExitsTwoAndLeavesNothingBehind) {
  const fs::path out = root_ / "bad-out";
  const std::string ckpt = init_checkpoint_.string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const fs::path truncated = root_ / "truncated.pt";
  fs::copy_file(init_checkpoint_, truncated);
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  const std::vector<Case> cases = {
      {{"--weights", (root_ / "missing.pt").string(), "--data", "fixtures/real"}, "--weights: expected"},
      {{"--weights", truncated.string(), "--data", "fixtures/real"}, "--weights: expected"},
      {{"--weights", ckpt, "--data", "fixtures/bad/no_annotations"}, "expected annotations.json"},
      {{"--weights", ckpt, "--data", (root_ / "nowhere").string()}, "--data: expected a dataset folder"},
      {{"--weights", ckpt, "--data", "fixtures/real", "--size", "100"},
       "--size: expected a positive multiple of 32, got 100"},
      {{"--weights", ckpt, "--data", "fixtures/bad/missing_image_file"}, "defect"},
      {{"--weights", ckpt, "--data", "fixtures/real", "--decoder", "pan"},
       "the file holds resnet18 + fpn"},
      // Other shapes are an error even when partial loading is allowed.
      {{"--weights", ckpt, "--data", "fixtures/real", "--encoder", "resnet50", "--allow-partial"},
       "with another shape"},
      {{"--weights", (fs::path(DBH_SOURCE_DIR) / "fixtures/real/annotations.json").string(), "--data",
        "fixtures/real"},
       "--weights"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"eval", "--threads", "2", "--out", out.string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    if (std::find(c.args.begin(), c.args.end(), "--size") == c.args.end()) {
      args.insert(args.end(), {"--size", "64"});
    }
    const auto r = dbh(args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << joined << "\n" << r.err;
    EXPECT_FALSE(fs::exists(out)) << joined << " left " << out;
  }
  // A deeper encoder: every tensor it lacks is named, and it exits 2 …
  const auto r = dbh({"eval", "--weights", ckpt, "--data", "fixtures/real", "--encoder", "resnet34",
                      "--size", "64", "--out", out.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not loaded (missing from the file): encoder.layer1.2.conv1.weight"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--allow-partial"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  // … unless partial loading is allowed: it evaluates, saying so.
  const auto partial = dbh({"eval", "--weights", ckpt, "--data", "fixtures/real", "--encoder",
                            "resnet34", "--size", "64", "--threads", "2", "--overlays", "0",
                            "--allow-partial", "--out", out.string(), "-q"});
  ASSERT_EQ(partial.exit_code, 0) << partial.err;
  EXPECT_NE(partial.err.find("keep their initial values"), std::string::npos) << partial.err;
  const json j = read_json(out / "eval.json");
  EXPECT_FALSE(j["weights"]["missing"].empty());
  EXPECT_EQ(j["model"]["encoder"], "resnet34");
}

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Ctrl-C in the middle of an evaluation: exit 130, and the folder it claimed
// (its lock, its owner record, any overlay) is gone.
// One rule for weights in every command (ModelStateReport::exact): a file of
// a deeper model holds every tensor of a shallower one under the same names
// and shapes (ResNet-34's first blocks are ResNet-18's), yet it is another
// architecture: refused by eval (with --allow-partial too) and by train
// --weights, naming what the file holds.
TEST_F(EvalTest, AFileOfADeeperModelIsRefusedEverywhereNamingItsArchitecture) {
  const auto deep = dbh({"train", "--data", "fixtures/real", "--encoder", "34", "--steps", "1", "--size", "64",
                         "--batch-size", "1", "--threads", "2", "--out", (root_ / "r34").string(), "-q"});
  ASSERT_EQ(deep.exit_code, 0) << deep.out << deep.err;
  const std::string file = (root_ / "r34" / "checkpoint-final.pt").string();
  for (const bool partial : {false, true}) {
    std::vector<std::string> args = {"eval", "--weights", file, "--data", "fixtures/real", "--size", "64",
                                     "--threads", "2", "--out", (root_ / "r34-eval").string()};
    if (partial) args.push_back("--allow-partial");
    const auto r = dbh(args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("tensors of a larger model that resnet18 + fpn lacks"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the file holds resnet34 + fpn"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(root_ / "r34-eval"));
  }
  const auto t = dbh({"train", "--weights", file, "--data", "fixtures/real", "--steps", "1", "--size", "64",
                      "--threads", "2", "--out", (root_ / "r34-train").string(), "-q"});
  EXPECT_EQ(t.exit_code, 2) << t.out << t.err;
  EXPECT_NE(t.err.find("tensors of a larger model"), std::string::npos) << t.err;
}

TEST_F(EvalTest, InterruptedEvaluationLeavesNothingBehind) {
  const fs::path out = root_ / "interrupted";
  const fs::path log = root_ / "interrupted.log";
  const pid_t pid = testing::spawn_process({DBH_BINARY, "eval", "--weights", init_checkpoint_.string(), "--data",
                                            "fixtures/real", "--size", "736", "--threads", "2", "--out",
                                            out.string()},
                                           DBH_SOURCE_DIR, log.string());
  // Interrupted once the first image is scored, while the others are not.
  bool started = false;
  for (int i = 0; i < 1200 && !started; ++i) {
    started = file_text(log).find("[ 1/") != std::string::npos;
    if (!started) ::usleep(100 * 1000);
  }
  ASSERT_TRUE(started) << file_text(log);
  ::kill(pid, SIGINT);
  const auto r = testing::wait_process(pid, 120);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 130) << file_text(log);
  EXPECT_NE(file_text(log).find("interrupted by SIGINT"), std::string::npos) << file_text(log);
  EXPECT_FALSE(fs::exists(out)) << "an interrupted evaluation left " << out;
}

// --save-weights never overwrites the --weights file (a checkpoint would lose
// its optimizer state) nor a file that is not a LibTorch archive.
TEST_F(EvalTest, SaveWeightsNeverReplacesTheWeightsOrAUsersFile) {
  const fs::path ckpt = root_ / "own.pt";
  fs::copy_file(init_checkpoint_, ckpt, fs::copy_options::overwrite_existing);
  const std::string before = file_text(ckpt);
  const fs::path notes = root_ / "notes.txt";
  {
    std::ofstream(notes) << "my notes\n";
  }
  const fs::path out = root_ / "save-refused";
  // Another run's checkpoint: replaced by weights it would lose its optimizer and step.
  const fs::path other = root_ / "other-run-checkpoint.pt";
  fs::copy_file(init_checkpoint_, other, fs::copy_options::overwrite_existing);
  const std::string other_before = file_text(other);
  for (const auto& [target, message] :
       std::vector<std::pair<fs::path, std::string>>{{ckpt, "expected a file other than --weights"},
                                                      {other, "got a training checkpoint"},
                                                      {notes, "an existing file that is not one"},
                                                      {root_, "expected a new file or a weights file to replace"}}) {
    const auto r = dbh({"eval", "--weights", ckpt.string(), "--data", "fixtures/real", "--size", "64",
                        "--threads", "2", "--overlays", "0", "--save-weights", target.string(), "--out",
                        out.string(), "-q"});
    EXPECT_EQ(r.exit_code, 2) << target << "\n" << r.err;
    EXPECT_NE(r.err.find("dbh eval: --save-weights " + target.string() + ": expected"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << target;
  }
  EXPECT_EQ(file_text(ckpt), before) << "the --weights file was changed";
  EXPECT_EQ(file_text(other), other_before) << "another run's checkpoint was changed";
  EXPECT_EQ(file_text(notes), "my notes\n");
  for (const auto& e : fs::directory_iterator(root_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary file left: " << e.path();
  }
}

// `dbh train --weights` reads a dbh checkpoint as `dbh eval` does (it used to
// load none of its tensors and train from scratch); a file of another
// architecture is bad input that names itself, and leaves no folder.
TEST_F(EvalTest, TrainLoadsACheckpointAsWeightsAndRefusesAnotherArchitecture) {
  const fs::path out = root_ / "train-from-checkpoint";
  const auto ok = dbh({"train", "--weights", init_checkpoint_.string(), "--steps", "1", "--size", "64",
                       "--batch-size", "1", "--threads", "2", "--out", out.string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("loaded 164 tensors"), std::string::npos) << ok.out;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
  // Another decoder, whose tensors of the same name have other shapes: as
  // PyTorch's load_state_dict, refused (nothing is trained, nothing written).
  const fs::path pan = root_ / "train-pan";
  const auto other = dbh({"train", "--weights", init_checkpoint_.string(), "--decoder", "pan", "--steps", "1",
                          "--size", "64", "--batch-size", "1", "--threads", "2", "--out", pan.string(), "-q"});
  EXPECT_EQ(other.exit_code, 2) << other.out << other.err;
  EXPECT_NE(other.err.find("expected a file holding tensors of resnet18 + pan (--encoder, --decoder), got a file of "
                           "another model ("),
            std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("another shape: decoder.fusion"), std::string::npos) << other.err;
  EXPECT_FALSE(fs::exists(pan));
  // A deeper encoder holds every tensor of the file and more: part of the
  // model, refused unless --allow-partial, then trained with the rest said.
  const fs::path r34 = root_ / "train-r34";
  const std::vector<std::string> deeper = {"train", "--weights", init_checkpoint_.string(), "--encoder", "34",
                                           "--steps", "1", "--size", "64", "--batch-size", "1", "--threads", "2",
                                           "--out", r34.string(), "-q"};
  const auto strict = dbh(deeper);
  EXPECT_EQ(strict.exit_code, 2) << strict.out << strict.err;
  EXPECT_NE(strict.err.find("--allow-partial to train from part), got a part of it (164 tensors loaded; missing: "
                            "encoder.layer1.2."),
            std::string::npos)
      << strict.err;
  EXPECT_FALSE(fs::exists(r34));
  std::vector<std::string> allowed = deeper;
  allowed.push_back("--allow-partial");
  const auto partial = dbh(allowed);
  ASSERT_EQ(partial.exit_code, 0) << partial.err;
  EXPECT_NE(partial.err.find("tensors of resnet34 + fpn; the others keep their initial values"), std::string::npos)
      << partial.err;
  // Resuming at or past the last step trains nothing: refused, not "0 steps".
  const fs::path done = root_ / "train-resume-done";
  const auto finished = dbh({"train", "--resume", init_checkpoint_.string(), "--steps", "1", "--size", "64",
                             "--batch-size", "1", "--out", done.string()});
  EXPECT_EQ(finished.exit_code, 2) << finished.out << finished.err;
  EXPECT_NE(finished.err.find("dbh train: --steps: expected more than the 1 steps --resume " +
                              init_checkpoint_.string() + " has already trained, got 1"),
            std::string::npos)
      << finished.err;
  EXPECT_FALSE(fs::exists(done));
  // Resuming a resnet18 checkpoint as a resnet50 run.
  const fs::path bad = root_ / "train-resume-r50";
  const auto r = dbh({"train", "--resume", init_checkpoint_.string(), "--encoder", "50", "--steps", "2", "--size",
                      "64", "--out", bad.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("dbh train: --resume " + init_checkpoint_.string() +
                       ": expected a file of resnet50 + fpn (--encoder, --decoder), got one that does not load"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(bad));
}

// A scenario's model.weights reads checkpoints as `dbh train --weights` does:
// a checkpoint fills the whole model (no warning), another decoder loads the
// encoder and the run says what kept its initial values (before, a checkpoint
// loaded nothing and the run trained a random model under its name).
TEST_F(EvalTest, ScenarioWeightsLoadACheckpointAndSayWhatTheyCouldNot) {
  auto scenario = [&](const std::string& name, const std::string& extra) {
    const fs::path p = root_ / (name + ".yaml");
    std::ofstream(p) << "name: " << name << "\ninclude: " << DBH_SOURCE_DIR << "/scenarios/base/tiny-cpu.yaml"
                     << "\nmodel:\n  weights: " << init_checkpoint_.string() << "\n" << extra
                     << "train: {max_steps: 1}\n";
    return p.string();
  };
  auto warnings = [](const fs::path& events) {
    std::ifstream in(events);
    std::string out;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"type\":\"warning\"") != std::string::npos) out += line + "\n";
    }
    return out;
  };
  const fs::path same = root_ / "weights-same";
  const auto a = dbh({"run", scenario("same", ""), "--out", same.string(), "-q"});
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_EQ(warnings(same / "events.jsonl"), "");
  const fs::path r34 = root_ / "weights-r34";
  const auto b = dbh({"run", scenario("r34", "  encoder: resnet34\n"), "--out", r34.string(), "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  const std::string w = warnings(r34 / "events.jsonl");
  EXPECT_NE(w.find("tensors loaded; missing: encoder.layer1.2."), std::string::npos) << w;
  EXPECT_NE(w.find("keep their initial values"), std::string::npos) << w;
  // Another decoder's tensors of another shape are never loaded: the
  // scenario is refused when it loads (bad input, exit 2, nothing written),
  // naming the key where it is written, instead of training a mostly random
  // decoder or reporting a training failure.
  const fs::path pan = root_ / "weights-pan";
  const auto c = dbh({"run", scenario("pan", "  decoder: pan\n"), "--out", pan.string(), "-q"});
  EXPECT_EQ(c.exit_code, 2) << c.out << c.err;
  EXPECT_NE(c.err.find("pan.yaml:4:12: model.weights: expected parameters of the scenario's model (resnet18 with "
                       "the pan decoder), got a checkpoint file of another model"),
            std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("another shape: decoder.fusion"), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(pan));
  // A checkpoint at the last step leaves nothing to resume: refused the same way.
  const auto d = dbh({"run", scenario("resume", ""), "train.resume_from=" + init_checkpoint_.string(),
                      "train.max_steps=1", "--out", (root_ / "resume-done").string(), "-q"});
  EXPECT_EQ(d.exit_code, 2) << d.out << d.err;
  EXPECT_NE(d.err.find("train.resume_from: expected a checkpoint before step 1 (train.max_steps)"), std::string::npos)
      << d.err;
  EXPECT_FALSE(fs::exists(root_ / "resume-done"));
  // … and the report says it too, not only the event stream.
  std::ifstream md(r34 / "report.md");
  const std::string report((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(report.find("Warnings from the worker:"), std::string::npos) << report;
  EXPECT_NE(report.find("keep their initial values"), std::string::npos) << report;
}

}  // namespace
}  // namespace dbh

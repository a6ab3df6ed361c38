// The pages of `dbh eval` from an evaluation's values, without a model:
// what eval.json and eval.md say of each image and of the whole.
#include <gtest/gtest.h>

#include <string>

#include "harness/cli/eval_page.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

model::Polygon square(float x, float y, float side) {
  return {{x, y}, {x + side, y}, {x + side, y + side}, {x, y + side}};
}

// One image: a word found, a don't-care word, a false positive.
struct Evaluated {
  cli::EvalCommandOptions options;
  model::ModelStateReport loaded;
  model::ScanResult scan;
  model::DatasetEvaluation result;

  Evaluated() {
    options.weights = "/ckpt/last.pt";
    options.data = "/data/val";
    loaded.format = "checkpoint";
    loaded.step = 120;
    loaded.loaded = 164;
    model::ImageAnnotation a;
    a.file = "img_1.jpg";
    a.words = {{"0001", square(10, 10, 20), "cat", false, 0}, {"0002", square(60, 10, 20), "###", true, 0}};
    scan.format = "UFO JSON";
    scan.images = {a};
    model::ImageEvaluation e;
    e.file = "img_1.jpg";
    e.resize.width = 100;
    e.resize.height = 50;
    e.gt = {a.words[0].points, a.words[1].points};
    e.gt_ignore = {false, true};
    e.detections = {{square(11, 11, 19), 0.9}, {square(40, 30, 10), 0.8}};
    e.match.counts = {1, 2, 1};
    e.match.gt_status = {model::MatchStatus::kMatched, model::MatchStatus::kDontCare};
    e.match.gt_match = {0, -1};
    e.match.det_status = {model::MatchStatus::kMatched, model::MatchStatus::kUnmatched};
    e.match.det_match = {0, -1};
    e.metrics = {0.5, 1.0, 2.0 / 3.0, e.match.counts};
    e.probability = {0.1, 0.95, 0.2};
    result.images = {e};
    result.overall = e.metrics;
    result.timing.inference_s = 0.5;
    result.timing.postprocess_s = 0.004;
  }

  cli::EvalPage page() const {
    return cli::EvalPage{options, "resnet18+fpn", 18, model::DecoderKind::kFpn, "/ckpt/last.pt", loaded, 170,
                         scan, result, {}, 3, 1.25, nlohmann::ordered_json::array(),
                         report::read_evaluation(cli::eval_facts(result, {})),
                         nlohmann::ordered_json{{"os", "test"}}};
  }
};

TEST(EvalPageTest, EvalJsonSaysWhatBecameOfEveryPolygon) {
  const Evaluated ev;
  const auto j = cli::eval_json(ev.page());
  EXPECT_EQ(j.begin().key(), "schema_version");
  EXPECT_EQ(j["weights"]["step"].get<int64_t>(), 120);
  EXPECT_EQ(j["weights"]["tensors"].get<int64_t>(), 170);
  EXPECT_EQ(j["settings"]["threads"].get<int64_t>(), 3);
  EXPECT_EQ(j["environment"]["os"].get<std::string>(), "test");
  EXPECT_DOUBLE_EQ(j["timing"]["inference_images_per_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["timing"]["postprocess_ms_per_image"].get<double>(), 4.0);
  const auto& image = j["images"][0];
  EXPECT_EQ(image["ground_truth"][0]["id"].get<std::string>(), "0001");
  EXPECT_EQ(image["ground_truth"][0]["status"].get<std::string>(), "matched");
  EXPECT_EQ(image["ground_truth"][0]["detection"].get<int64_t>(), 0);
  EXPECT_EQ(image["ground_truth"][1]["status"].get<std::string>(), "dont_care");
  EXPECT_TRUE(image["ground_truth"][1]["detection"].is_null());
  EXPECT_TRUE(image["ground_truth"][1]["ignore"].get<bool>());
  EXPECT_EQ(image["detections"][1]["status"].get<std::string>(), "unmatched");
  EXPECT_EQ(image["detections"][0]["polygon"][0][0].get<double>(), 11.0);
  EXPECT_EQ(j["reading"][0]["id"].get<std::string>(), cli::EvalPage(ev.page()).reading.front().id);
}

TEST(EvalPageTest, EvalMarkdownLeadsWithTheScoreAndHasARowPerImage) {
  const Evaluated ev;
  const std::string md = cli::eval_markdown(ev.page());
  EXPECT_EQ(md.rfind("# Evaluation of last.pt\n\n**P 0.500 · R 1.000 · H 0.667**", 0), 0u) << md;
  EXPECT_NE(md.find("| img\\_1.jpg | 1 | 2 | 1 | 0.500 | 1.000 | 0.667 |"), std::string::npos) << md;
  EXPECT_NE(md.find("(checkpoint, step 120, 164 of 170 tensors)"), std::string::npos) << md;
  EXPECT_NE(md.find("3 threads"), std::string::npos) << md;
  EXPECT_EQ(md.find("## Worst images"), std::string::npos) << "no overlays were written";
}

TEST(EvalPageTest, WritesTheThreePagesAndNothingElse) {
  const Evaluated ev;
  const testing::ScratchDir dir("dbh-eval-page");
  cli::write_eval_pages(dir.path(), ev.page());
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_TRUE(entry.path().extension() == ".json" || entry.path().extension() == ".md" ||
                entry.path().extension() == ".html")
        << entry.path();
  }
  EXPECT_EQ(files, 3u);
  EXPECT_EQ(nlohmann::json::parse(testing::read_text(dir / "eval.json"))["command"].get<std::string>(), "eval");
  EXPECT_EQ(testing::read_text(dir / "eval.md"), cli::eval_markdown(ev.page()));
}

TEST(EvalPageTest, MetricsLineCountsTheMatches) {
  EXPECT_EQ(cli::metrics_line(Evaluated().result.overall),
            "P 0.500  R 1.000  H 0.667  (gt 1, det 2, matched 1)");
}

}  // namespace
}  // namespace dbh::harness

// Test-time inference and evaluation: resize, normalisation, evaluation
// mode, scaling back, detailed matching, the evaluator self-check and
// loading checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "model/data/dataset.h"
#include "model/data/image_decode.h"
#include "model/data/scan.h"
#include "model/eval/infer.h"
#include "model/label/label_maps.h"
#include "model/train/trainer.h"
#include "tests/support/paths.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;

const std::string kRealFixtures = std::string(DBH_SOURCE_DIR) + "/fixtures/real";

// A fresh folder under the test temp dir, removed when the object goes.
class TempFolder {
 public:
  explicit TempFolder(const std::string& name)
      : path_(fs::path(::testing::TempDir()) / ("dbh-infer-" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Polygon rect(double x0, double y0, double x1, double y1) {
  return {{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}};
}

// ---------------------------------------------------------------- resize

struct ResizeCase {
  int64_t width;
  int64_t height;
  int64_t size;
  ResizeSide side;
};

void PrintTo(const ResizeCase& c, std::ostream* os) {
  *os << c.width << "x" << c.height << ", " << to_string(c.side) << " side " << c.size;
}

class TestTimeResizeTest : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(TestTimeResizeTest, SidesAreMultiplesOf32AspectIsKeptScaleMapsBack) {
  const auto c = GetParam();
  const TestResize r = test_time_resize(c.width, c.height, c.size, c.side);
  EXPECT_EQ(r.width, c.width);
  EXPECT_EQ(r.height, c.height);
  // Network input: multiples of 32 holding the content with < 32 px padding.
  EXPECT_EQ(r.input_width % 32, 0);
  EXPECT_EQ(r.input_height % 32, 0);
  EXPECT_GE(r.input_width, r.resized_width);
  EXPECT_GE(r.input_height, r.resized_height);
  EXPECT_LT(r.input_width - r.resized_width, 32);
  EXPECT_LT(r.input_height - r.resized_height, 32);
  // The chosen side is exactly `size`.
  const bool width_is_chosen =
      (c.side == ResizeSide::kShort) == (c.width <= c.height);
  EXPECT_EQ(width_is_chosen ? r.resized_width : r.resized_height, c.size);
  // One scale for both axes: each content side is the original side times
  // the scale, rounded.
  EXPECT_LE(std::abs(static_cast<double>(r.resized_width) - c.width * r.scale), 0.5);
  EXPECT_LE(std::abs(static_cast<double>(r.resized_height) - c.height * r.scale), 0.5);
  const double aspect = static_cast<double>(c.width) / static_cast<double>(c.height);
  const double kept = static_cast<double>(r.resized_width) / static_cast<double>(r.resized_height);
  EXPECT_NEAR(kept, aspect, aspect * 1.0 / static_cast<double>(std::min(r.resized_width, r.resized_height)));
  // Dividing by the scale maps the content corner back to the image corner.
  EXPECT_NEAR(static_cast<double>(r.resized_width) / r.scale, static_cast<double>(c.width),
              0.5 / r.scale + 1e-9);
  EXPECT_NEAR(static_cast<double>(r.resized_height) / r.scale, static_cast<double>(c.height),
              0.5 / r.scale + 1e-9);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, TestTimeResizeTest,
    ::testing::Values(ResizeCase{556, 257, 736, ResizeSide::kShort},   // fixture img_001
                      ResizeCase{257, 556, 736, ResizeSide::kShort},   // portrait
                      ResizeCase{1280, 720, 736, ResizeSide::kShort},  // ICDAR 2015
                      ResizeCase{1280, 720, 1152, ResizeSide::kShort},
                      ResizeCase{736, 736, 736, ResizeSide::kShort},   // no-op
                      ResizeCase{640, 480, 256, ResizeSide::kShort},
                      ResizeCase{3000, 100, 64, ResizeSide::kShort},   // very elongated
                      ResizeCase{1280, 720, 960, ResizeSide::kLong},
                      ResizeCase{720, 1280, 960, ResizeSide::kLong},
                      ResizeCase{33, 17, 32, ResizeSide::kLong}),
    [](const ::testing::TestParamInfo<ResizeCase>& info) {
      const auto& c = info.param;
      return std::to_string(c.width) + "x" + std::to_string(c.height) + "_" + to_string(c.side) +
             "_" + std::to_string(c.size);
    });

TEST(TestTimeResizeTest, RejectsSizesThatAreNotMultiplesOf32) {
  EXPECT_THROW(test_time_resize(640, 480, 100, ResizeSide::kShort), c10::Error);
  EXPECT_THROW(test_time_resize(640, 480, 0, ResizeSide::kShort), c10::Error);
  EXPECT_THROW(test_time_resize(0, 480, 736, ResizeSide::kShort), c10::Error);
}

// The network sees at test time exactly what training's letterbox gives it:
// with the long side at the training size, the content matches bit for bit.
TEST(PreprocessTest, MatchesTheTrainingNormalisationBitForBit) {
  DatasetOptions options;
  options.root = kRealFixtures;
  options.size = 384;
  const Dataset dataset(options);
  for (const int64_t index : {0, 2, 4}) {
    const ImageAnnotation& ann = dataset.images()[static_cast<size_t>(index)];
    const cv::Mat image = decode_image(image_path(kRealFixtures, ann.file));
    ASSERT_FALSE(image.empty()) << ann.file;
    const TestResize r = test_time_resize(image.cols, image.rows, 384, ResizeSide::kLong);
    const torch::Tensor x = preprocess_image(image, r);
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{3, r.input_height, r.input_width}));
    const Sample sample = dataset.get(index);
    EXPECT_DOUBLE_EQ(sample.scale, r.scale) << ann.file;
    const auto train = torch::from_blob(sample.image.data, {384, 384, 3}, torch::kFloat32)
                           .permute({2, 0, 1});
    // Content and the padding below/right of it, up to the smaller canvas.
    const int64_t h = std::min<int64_t>(r.input_height, 384);
    const int64_t w = std::min<int64_t>(r.input_width, 384);
    EXPECT_TRUE(torch::equal(x.slice(1, 0, h).slice(2, 0, w), train.slice(1, 0, h).slice(2, 0, w)))
        << ann.file;
  }
}

TEST(PreprocessTest, RejectsAnImageOfAnotherSize) {
  const cv::Mat image(100, 200, CV_8UC3, cv::Scalar(0, 0, 0));
  EXPECT_THROW(preprocess_image(image, test_time_resize(201, 100, 64, ResizeSide::kShort)),
               c10::Error);
  const cv::Mat gray(100, 200, CV_8UC1, cv::Scalar(0));
  const auto x = preprocess_image(gray, test_time_resize(200, 100, 64, ResizeSide::kShort));
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{3, 64, 128}));
}

// ------------------------------------------------------- scaling back

// P = 1 on a box in network coordinates: the detection, mapped back by the
// scale, lies on the same box in original coordinates.
TEST(DetectionsFromProbabilityTest, MapsBoxesBackToOriginalCoordinates) {
  const TestResize r = test_time_resize(556, 257, 736, ResizeSide::kShort);
  const Polygon original = rect(100, 60, 400, 120);  // a 300×60 word
  torch::Tensor prob = torch::zeros({1, r.input_height, r.input_width});
  const auto at = [&](double v) { return static_cast<int64_t>(std::lround(v * r.scale)); };
  prob[0].slice(0, at(60), at(120)).slice(1, at(100), at(400)).fill_(1.0f);
  PostprocessOptions options;
  options.unclip_ratio = 0.0;  // the box itself, not its dilation
  const auto dets = detections_from_probability(prob, r, options);
  ASSERT_EQ(dets.size(), 1u);
  EXPECT_GT(polygon_iou(dets[0].polygon, original), 0.97);
  double cx = 0, cy = 0;
  for (const auto& p : dets[0].polygon) {
    cx += p.x / 4;
    cy += p.y / 4;
  }
  EXPECT_NEAR(cx, 250.0, 1.0);
  EXPECT_NEAR(cy, 90.0, 1.0);
  EXPECT_NEAR(dets[0].score, 1.0, 1e-6);
  // Dividing by the padded map size instead of the scale would put it
  // elsewhere: the two differ for this image.
  EXPECT_NE(r.input_width / r.scale, 556.0);
}

TEST(DetectionsFromProbabilityTest, IgnoresThePadding) {
  const TestResize r = test_time_resize(556, 257, 736, ResizeSide::kShort);
  ASSERT_GT(r.input_width - r.resized_width, 4);
  torch::Tensor prob = torch::zeros({r.input_height, r.input_width});
  // A blob entirely in the right padding.
  prob.slice(0, 100, 200).slice(1, r.resized_width, r.input_width).fill_(1.0f);
  EXPECT_TRUE(detections_from_probability(prob, r).empty());
  const auto stats = probability_stats(prob, r, 0.3);
  EXPECT_EQ(stats.max, 0.0);
  EXPECT_THROW(detections_from_probability(torch::zeros({r.input_height, r.input_width + 32}), r),
               c10::Error);
}

// The shrunk ground truth kernels as the probability map of every fixture
// image, at network resolution: post-processing, scaling back and matching
// together find the words again.
TEST(DetectionsFromProbabilityTest, OracleMapsFindTheFixtureWordsAgain) {
  const ScanResult scan = scan_dataset(kRealFixtures, OnInvalid::kError);
  ASSERT_TRUE(scan.readable);
  std::vector<EvalCounts> counts, by_map_size;
  for (const auto& image : scan.images) {
    const TestResize r = test_time_resize(image.width, image.height, 736, ResizeSide::kShort);
    std::vector<TextInstance> texts;
    std::vector<Polygon> gt;
    std::vector<bool> ignore;
    for (const auto& w : image.words) {
      Polygon scaled = w.points;
      for (auto& p : scaled) p = {p.x * r.scale, p.y * r.scale};
      texts.push_back(TextInstance{scaled, w.ignore});
      gt.push_back(w.points);
      ignore.push_back(w.ignore);
    }
    const LabelMaps maps = make_label_maps(texts, static_cast<int>(r.input_height),
                                           static_cast<int>(r.input_width));
    const torch::Tensor prob =
        torch::from_blob(maps.gt_shrink.data, {r.input_height, r.input_width}, torch::kFloat32);
    std::vector<Polygon> det, wrong;
    for (const auto& d : detections_from_probability(prob, r)) {
      det.push_back(d.polygon);
      // What dividing by the padded map size (x / map_w · orig_w) would give.
      Polygon w = d.polygon;
      for (auto& p : w) {
        p = {p.x * static_cast<double>(r.resized_width) / static_cast<double>(r.input_width),
             p.y * static_cast<double>(r.resized_height) / static_cast<double>(r.input_height)};
      }
      wrong.push_back(w);
    }
    counts.push_back(match_image_detailed(gt, ignore, det).counts);
    by_map_size.push_back(match_image_detailed(gt, ignore, wrong).counts);
  }
  const EvalResult overall = summarize(counts);
  EXPECT_GT(overall.hmean, 0.99) << "P " << overall.precision << " R " << overall.recall;
  // Scaling back by the padded map size (off by < 32 px over 1000–1600 px)
  // already loses a tenth of them: the check above can fail.
  EXPECT_LT(summarize(by_map_size).hmean, overall.hmean - 0.05) << summarize(by_map_size).hmean;
}

// ----------------------------------------------------------- eval mode

class EvalModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    torch::set_num_threads(2);
    // Running statistics far from a batch's own: evaluation mode and
    // training mode then give clearly different maps.
    torch::NoGradGuard no_grad;
    for (auto& item : net_->named_buffers()) {
      if (item.key().find("running_mean") != std::string::npos) {
        item.value().uniform_(-0.5, 0.5);
      } else if (item.key().find("running_var") != std::string::npos) {
        item.value().uniform_(0.5, 2.0);
      }
    }
  }
  DbNet net_{DbNetOptions()};
};

TEST_F(EvalModeTest, MapsAreIndependentOfBatchCompositionAndRepeatable) {
  const torch::Tensor image = torch::randn({1, 3, 64, 96});
  const torch::Tensor others = torch::randn({3, 3, 64, 96}) * 3 + 1;
  net_->train();
  const torch::Tensor alone = predict_probability(net_, image);
  EXPECT_TRUE(net_->is_training()) << "the caller's mode must be restored";
  ASSERT_EQ(alone.sizes(), (std::vector<int64_t>{1, 1, 64, 96}));
  EXPECT_TRUE(torch::equal(predict_probability(net_, image), alone)) << "two calls differ";
  const torch::Tensor batch =
      torch::cat({others.slice(0, 0, 1), image, others.slice(0, 1, 3)}, 0);
  const torch::Tensor together = predict_probability(net_, batch);
  const double diff = (together[1] - alone[0]).abs().max().item<double>();
  // Batched convolutions accumulate in another order (oneDNN picks kernels
  // by batch size), so the maps agree to float rounding, not bit for bit.
  EXPECT_LE(diff, 1e-4) << "the map depends on the other images of the batch";
  net_->eval();
  EXPECT_TRUE(torch::equal(predict_probability(net_, image), alone));
  EXPECT_FALSE(net_->is_training());

  // Training mode (batch statistics) would have changed it: the check above
  // can fail.
  net_->train();
  torch::NoGradGuard no_grad;
  const double train_diff =
      (net_->forward(batch).probability[1] - alone[0]).abs().max().item<double>();
  EXPECT_GT(train_diff, 1e-2);
}

TEST_F(EvalModeTest, RejectsInputsOfTheWrongShape) {
  EXPECT_THROW(predict_probability(net_, torch::randn({1, 3, 60, 64})), c10::Error);
  EXPECT_THROW(predict_probability(net_, torch::randn({3, 64, 64})), c10::Error);
  EXPECT_THROW(predict_probability(net_, torch::randn({1, 3, 64, 64}, torch::kFloat64)), c10::Error);
}

// Grouping by input size never changes a result: batch 4 and batch 1 agree.
TEST_F(EvalModeTest, EvaluateGivesTheSameResultForAnyBatchSize) {
  const ScanResult scan = scan_dataset(kRealFixtures, OnInvalid::kError);
  ASSERT_TRUE(scan.readable);
  const auto options = InferenceOptions().size(64).side(ResizeSide::kLong);
  const DatasetEvaluation one =
      evaluate(net_, kRealFixtures, scan.images, InferenceOptions(options).batch_size(1));
  int64_t calls = 0;
  const DatasetEvaluation four = evaluate(
      net_, kRealFixtures, scan.images, InferenceOptions(options).batch_size(4),
      [&](const ImageEvaluation&, int64_t done, int64_t total) {
        ++calls;
        EXPECT_EQ(done, calls);
        EXPECT_EQ(total, static_cast<int64_t>(scan.images.size()));
      });
  EXPECT_EQ(calls, static_cast<int64_t>(scan.images.size()));
  EXPECT_EQ(one.timing.batches, static_cast<int64_t>(scan.images.size()));
  EXPECT_LT(four.timing.batches, one.timing.batches);
  ASSERT_EQ(one.images.size(), four.images.size());
  for (size_t i = 0; i < one.images.size(); ++i) {
    const auto& a = one.images[i];
    const auto& b = four.images[i];
    EXPECT_EQ(a.file, scan.images[i].file);
    EXPECT_EQ(a.file, b.file);
    EXPECT_NEAR(a.probability.mean, b.probability.mean, 1e-6) << a.file;
    EXPECT_NEAR(a.probability.max, b.probability.max, 1e-6) << a.file;
    EXPECT_EQ(a.detections.size(), b.detections.size()) << a.file;
    EXPECT_EQ(a.gt.size(), scan.images[i].words.size());
  }
  EXPECT_EQ(one.overall.counts.gt, four.overall.counts.gt);
  EXPECT_EQ(one.overall.counts.det, four.overall.counts.det);
}

// ------------------------------------------------------------- matching

TEST(MatchImageDetailedTest, AgreesWithMatchImageAndRecordsEveryPolygon) {
  const ScanResult scan = scan_dataset(kRealFixtures, OnInvalid::kError);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> shift(-0.6, 0.6);
  int64_t matched = 0, dont_care = 0, unmatched = 0;
  for (const auto& image : scan.images) {
    std::vector<Polygon> gt, det;
    std::vector<bool> ignore;
    for (const auto& w : image.words) {
      gt.push_back(w.points);
      ignore.push_back(w.ignore);
      // Each word moved by up to 60 % of its size: some still match.
      double x0 = w.points[0].x, x1 = x0, y0 = w.points[0].y, y1 = y0;
      for (const auto& p : w.points) {
        x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
        y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
      }
      const double dx = shift(rng) * (x1 - x0), dy = shift(rng) * (y1 - y0);
      Polygon moved = w.points;
      for (auto& p : moved) p = {p.x + dx, p.y + dy};
      det.push_back(moved);
    }
    det.push_back(rect(5, 5, 5, 30));  // zero area: invalid
    const ImageMatch m = match_image_detailed(gt, ignore, det);
    const EvalCounts expected = match_image(gt, ignore, det);
    EXPECT_EQ(m.counts.gt, expected.gt) << image.file;
    EXPECT_EQ(m.counts.det, expected.det) << image.file;
    EXPECT_EQ(m.counts.matched, expected.matched) << image.file;
    EXPECT_EQ(m.det_status.back(), MatchStatus::kInvalid);
    ASSERT_EQ(m.gt_status.size(), gt.size());
    ASSERT_EQ(m.det_status.size(), det.size());
    for (size_t g = 0; g < gt.size(); ++g) {
      if (m.gt_status[g] == MatchStatus::kMatched) {
        const auto d = static_cast<size_t>(m.gt_match[g]);
        EXPECT_EQ(m.det_match[d], static_cast<int64_t>(g));
        EXPECT_GT(polygon_iou(gt[g], det[d]), 0.5);
        ++matched;
      } else {
        EXPECT_EQ(m.gt_match[g], -1);
      }
      if (ignore[g]) {
        EXPECT_EQ(m.gt_status[g], MatchStatus::kDontCare);
      }
    }
    for (size_t d = 0; d < det.size(); ++d) {
      dont_care += m.det_status[d] == MatchStatus::kDontCare;
      unmatched += m.det_status[d] == MatchStatus::kUnmatched;
    }
  }
  // The shifts leave every kind of outcome represented.
  EXPECT_GT(matched, 50);
  EXPECT_GT(dont_care, 10);
  EXPECT_GT(unmatched, 50);
}

TEST(ImageMetricsTest, FollowsTheOfficialPerImageConvention) {
  EvalCounts c;
  EXPECT_DOUBLE_EQ(image_metrics(c).hmean, 1.0);  // nothing to find, nothing found
  c.det = 2;
  EXPECT_DOUBLE_EQ(image_metrics(c).precision, 0.0);
  EXPECT_DOUBLE_EQ(image_metrics(c).recall, 1.0);
  c = EvalCounts{4, 0, 0};
  EXPECT_DOUBLE_EQ(image_metrics(c).hmean, 0.0);
  c = EvalCounts{4, 2, 2};
  const EvalResult r = image_metrics(c);
  EXPECT_DOUBLE_EQ(r.precision, 1.0);
  EXPECT_DOUBLE_EQ(r.recall, 0.5);
  EXPECT_NEAR(r.hmean, 2.0 / 3.0, 1e-12);
}

// ------------------------------------------------------------ self-check

TEST(EvaluatorSelfCheckTest, GroundTruthAsDetectionsScoresOneOnTheFixtures) {
  // UFO JSON, through the Dataset the trainer uses.
  DatasetOptions options;
  options.root = kRealFixtures;
  options.size = 128;
  const Dataset dataset(options);
  int64_t ignored = 0;
  for (const auto& image : dataset.images()) {
    for (const auto& w : image.words) ignored += w.ignore;
  }
  ASSERT_GT(ignored, 0) << "the fixtures should exercise don't-care words";
  EXPECT_DOUBLE_EQ(evaluator_self_check(dataset), 1.0);

  // The ICDAR 2015 copy of the same annotations.
  TempFolder icdar("self-check-icdar");
  fs::copy(fs::path(kRealFixtures) / "icdar", icdar.path() / "icdar", fs::copy_options::recursive);
  fs::create_directory_symlink(fs::path(kRealFixtures) / "images", icdar.path() / "images");
  const ScanResult scan = scan_dataset(icdar.path().string(), OnInvalid::kError);
  ASSERT_TRUE(scan.readable);
  ASSERT_EQ(scan.format, "ICDAR 2015 txt");
  ASSERT_EQ(scan.images.size(), dataset.images().size());
  EXPECT_DOUBLE_EQ(evaluator_self_check(scan.images), 1.0);
}

TEST(EvaluatorSelfCheckTest, DetectsABrokenDontCareRule) {
  // A care word lying inside a don't-care word: its own detection is
  // don't-care, so the word is missed and the check drops below 1. This is
  // what a dataset (or evaluator) violating the check's precondition shows.
  ImageAnnotation image;
  image.file = "x.png";
  image.words.push_back(WordAnnotation{"1", rect(0, 0, 100, 40), "###", true});
  image.words.push_back(WordAnnotation{"2", rect(10, 10, 50, 30), "word", false});
  image.words.push_back(WordAnnotation{"3", rect(200, 0, 300, 40), "other", false});
  EXPECT_LT(evaluator_self_check({image}), 1.0);
  image.words.erase(image.words.begin());
  EXPECT_DOUBLE_EQ(evaluator_self_check({image}), 1.0);
  EXPECT_DOUBLE_EQ(evaluator_self_check(std::vector<ImageAnnotation>{}), 0.0);
}

// --------------------------------------------------------------- loading

bool same_state(DbNet& a, DbNet& b) {
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    if (!torch::equal(item.value(), pb[item.key()])) return false;
  }
  const auto bb = b->named_buffers();
  for (const auto& item : a->named_buffers()) {
    if (!torch::equal(item.value(), bb[item.key()])) return false;
  }
  return true;
}

TEST(LoadModelStateTest, ReadsCheckpointsAndWeightsFilesCompletely) {
  TempFolder dir("load");
  torch::manual_seed(3);
  DbNet trained;
  Trainer trainer(trained, TrainOptions().max_steps(2));
  const std::string checkpoint = (dir.path() / "checkpoint.pt").string();
  trainer.save_checkpoint(checkpoint);
  const std::string weights = (dir.path() / "weights.pt").string();
  trained->save_weights(weights);
  const auto total = static_cast<int64_t>(trained->parameters().size() + trained->buffers().size());

  for (const auto& [path, format] : {std::pair{checkpoint, "checkpoint"}, std::pair{weights, "weights"}}) {
    torch::manual_seed(4);
    DbNet fresh;
    ASSERT_FALSE(same_state(trained, fresh));
    const ModelStateReport report = load_model_state(fresh, path);
    EXPECT_EQ(report.format, format);
    EXPECT_TRUE(report.complete()) << path;
    EXPECT_EQ(report.loaded, total);
    EXPECT_TRUE(report.unexpected.empty());
    EXPECT_EQ(report.step, std::string(format) == "checkpoint" ? 0 : -1);
    EXPECT_TRUE(same_state(trained, fresh)) << path;
  }
}

TEST(LoadModelStateTest, ListsWhatAnotherArchitectureLacks) {
  TempFolder dir("load-other");
  DbNet r18;
  const std::string path = (dir.path() / "r18.pt").string();
  r18->save_weights(path);

  // Another decoder: its tensors are missing, the file's are unexpected.
  DbNet pan(DbNetOptions().decoder(DecoderKind::kPan));
  const auto pan_report = load_model_state(pan, path);
  EXPECT_FALSE(pan_report.complete());
  EXPECT_FALSE(pan_report.missing.empty());
  EXPECT_FALSE(pan_report.unexpected.empty());
  for (const auto& name : pan_report.missing) EXPECT_EQ(name.rfind("decoder.", 0), 0u) << name;

  // Another encoder depth: extra blocks missing, same-named tensors reshaped.
  DbNet r50(DbNetOptions().encoder(ResNetOptions().depth(50)));
  const auto r50_report = load_model_state(r50, path);
  EXPECT_FALSE(r50_report.mismatched.empty());
  EXPECT_NE(r50_report.mismatched.front().find(": model ["), std::string::npos)
      << r50_report.mismatched.front();
  EXPECT_FALSE(r50_report.missing.empty());

  // Not an archive at all.
  const std::string junk = (dir.path() / "junk.pt").string();
  std::ofstream(junk) << "not a checkpoint";
  EXPECT_THROW(load_model_state(r18, junk), c10::Error);
}

}  // namespace
}  // namespace dbh::model

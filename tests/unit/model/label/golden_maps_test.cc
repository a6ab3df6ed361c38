// Golden label maps for two real fixture images (fixtures/golden/, written by
// `dbh data show fixtures/real --index I --no-augment --size 256`). Any change
// to reading, letterboxing or label generation that moves a pixel by more than
// one grey level shows up here.
#include <gtest/gtest.h>

#include <filesystem>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "model/data/augment.h"
#include "model/data/scan.h"
#include "model/label/label_maps.h"
#include "tests/support/paths.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;

class GoldenMapsTest : public ::testing::TestWithParam<int> {};

TEST_P(GoldenMapsTest, MatchTheCommittedMaps) {
  const fs::path root = fs::path(DBH_SOURCE_DIR) / "fixtures" / "real";
  const auto scan = scan_dataset(root.string(), OnInvalid::kSkip);
  ASSERT_TRUE(scan.defects.empty());
  const int index = GetParam();
  ASSERT_LT(index, static_cast<int>(scan.images.size()));
  const auto& ann = scan.images[static_cast<size_t>(index)];
  AnnotatedImage in;
  in.image = decode_image((root / "images" / ann.file).string());
  ASSERT_FALSE(in.image.empty());
  for (const auto& w : ann.words) in.texts.push_back(TextInstance{w.points, w.ignore});
  const AnnotatedImage boxed = letterbox(in, 256);
  const LabelMaps maps = make_label_maps(boxed.texts, 256, 256);
  const std::string stem = fs::path(ann.file).stem().string();
  const std::pair<const char*, const cv::Mat*> all[] = {{"gt_shrink", &maps.gt_shrink},
                                                        {"gt_shrink_mask", &maps.gt_shrink_mask},
                                                        {"gt_thresh", &maps.gt_thresh},
                                                        {"gt_thresh_mask", &maps.gt_thresh_mask}};
  for (const auto& [name, map] : all) {
    const fs::path golden = fs::path(DBH_SOURCE_DIR) / "fixtures" / "golden" / (stem + "_256_" + name + ".png");
    const cv::Mat expected = cv::imread(golden.string(), cv::IMREAD_GRAYSCALE);
    ASSERT_FALSE(expected.empty()) << golden;
    cv::Mat got;
    map->convertTo(got, CV_8U, 255.0);
    cv::Mat diff;
    cv::absdiff(got, expected, diff);
    double max_diff = 0;
    cv::minMaxLoc(diff, nullptr, &max_diff);
    EXPECT_LE(max_diff, 1.0) << name << " of " << ann.file << " differs from " << golden;
    EXPECT_GT(cv::countNonZero(got), 0) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(RealFixtures, GoldenMapsTest, ::testing::Values(2, 5),
                         [](const auto& info) { return "sample" + std::to_string(info.param); });

}  // namespace
}  // namespace dbh::model

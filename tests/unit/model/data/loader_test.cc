#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "model/data/dataset.h"
#include "tests/support/files.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;

// Writes a small UFO dataset of rendered words to a temporary folder.
fs::path make_dataset(const std::string& name, int images) {
  const fs::path root = dbh::testing::removed_at_exit(fs::path(::testing::TempDir()) / ("dbh-loader-" + name));
  fs::remove_all(root);
  fs::create_directories(root / "images");
  std::ofstream json(root / "annotations.json");
  json << "{\"images\": {";
  for (int i = 0; i < images; ++i) {
    cv::Mat img(120 + 10 * i, 200, CV_8UC3, cv::Scalar(230, 230, 230));
    cv::putText(img, "WORD" + std::to_string(i), {20, 60}, cv::FONT_HERSHEY_SIMPLEX, 1.2,
                cv::Scalar(10, 10, 10), 3);
    const std::string file = "img_" + std::to_string(i) + ".png";
    cv::imwrite((root / "images" / file).string(), img);
    json << (i ? "," : "") << "\"" << file << "\": {\"img_w\": 200, \"img_h\": " << img.rows
         << ", \"words\": {\"0001\": {\"points\": [[15,25],[150,25],[150,70],[15,70]], "
            "\"transcription\": \"WORD\", \"illegibility\": false}}}";
  }
  json << "}}";
  return root;
}

TEST(LoaderTest, BatchesAreIdenticalForAnyNumberOfWorkers) {
  torch::set_num_threads(1);
  DatasetOptions o;
  o.root = make_dataset("workers", 5).string();
  o.size = 128;
  o.augment = true;
  o.seed = 9;
  auto ds = std::make_shared<const Dataset>(o);
  std::vector<Batch> inline_batches;
  {
    Loader loader(ds, LoaderOptions{2, 0, 2, 4, true});
    for (int m = 0; m < 4; ++m) inline_batches.push_back(loader.get(m));
  }
  for (int64_t workers : {1, 2, 3}) {
    Loader loader(ds, LoaderOptions{2, workers, 2, 4, true});
    for (int m = 0; m < 4; ++m) {
      const Batch b = loader.get(m);
      EXPECT_EQ(b.sample_ids, inline_batches[static_cast<size_t>(m)].sample_ids);
      EXPECT_TRUE(torch::equal(b.image, inline_batches[static_cast<size_t>(m)].image))
          << workers << " workers, batch " << m;
      EXPECT_TRUE(torch::equal(b.targets.gt_thresh,
                               inline_batches[static_cast<size_t>(m)].targets.gt_thresh));
    }
  }
}

TEST(LoaderTest, AnySampleCanBeRegeneratedAlone) {
  DatasetOptions o;
  o.root = make_dataset("alone", 4).string();
  o.size = 128;
  o.augment = true;
  o.seed = 3;
  const Dataset ds(o);
  const Batch b = ds.collate({2, 0, 3}, /*epoch=*/1);
  const Batch alone = ds.collate({3}, /*epoch=*/1);
  EXPECT_TRUE(torch::equal(b.image[2], alone.image[0]));
  // A different epoch draws a different augmentation.
  const Batch other = ds.collate({3}, /*epoch=*/2);
  EXPECT_FALSE(torch::equal(other.image[0], alone.image[0]));
}

TEST(LoaderTest, EveryEpochVisitsEverySampleOnce) {
  std::vector<int64_t> seen;
  for (int64_t m = 0; m < 4; ++m) {
    for (auto i : batch_indices(8, 2, 5, m)) seen.push_back(i);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(LoaderTest, BatchesHaveTheDocumentedShapesAndRanges) {
  DatasetOptions o;
  o.root = make_dataset("shapes", 3).string();
  o.size = 96;
  const Dataset ds(o);
  const Batch b = ds.collate({0, 1});
  EXPECT_EQ(b.image.sizes(), (std::vector<int64_t>{2, 3, 96, 96}));
  EXPECT_EQ(b.targets.gt_shrink.sizes(), (std::vector<int64_t>{2, 1, 96, 96}));
  EXPECT_EQ(validate_batch(b), "");
  EXPECT_GT(b.targets.gt_shrink.sum().item<double>(), 0.0);  // the word is labelled
}

TEST(LoaderTest, ValidationHookNamesTheBadSample) {
  DatasetOptions o;
  o.root = make_dataset("hook", 2).string();
  o.size = 64;
  const Dataset ds(o);
  Batch b = ds.collate({0, 1});
  b.image[1][0][5][5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(validate_batch(b), "img_1.png: image has a non-finite value");
  Batch c = ds.collate({0, 1});
  c.targets.gt_shrink_mask[0][0][0][0] = 0.5;
  EXPECT_EQ(validate_batch(c), "img_0.png: gt_shrink_mask not binary");
}

TEST(LoaderTest, UnreadableImageIsACleanErrorNamingTheFile) {
  const auto root = make_dataset("broken", 2);
  DatasetOptions o;
  o.root = root.string();
  o.size = 64;
  const auto ds = std::make_shared<const Dataset>(o);
  {
    std::ofstream truncate(root / "images" / "img_1.png", std::ios::trunc);
    truncate << "not a png";
  }
  Loader loader(ds, LoaderOptions{2, 2, 2, 0, false});
  try {
    loader.get(0);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("img_1.png: cannot decode the image"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dbh::model

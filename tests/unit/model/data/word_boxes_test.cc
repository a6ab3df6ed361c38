// Batch::words and Batch::word_boxes, the annotation side the silent-failure
// monitors compare the label maps with: on the bundled real fixtures, with
// and without augmentation, at several sizes, every text kernel lies inside
// the box of a counted word, and a sample has kernels exactly when it has
// counted words. The monitors' labels check relies on both (no false alarm on
// healthy labels). Also the synthetic boxes batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "model/data/batch.h"
#include "model/data/dataset.h"
#include "tests/support/paths.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(DBH_SOURCE_DIR) / "fixtures" / "real";

// Kernel pixels of sample `i` inside none of its boxes (dilated by one pixel).
int64_t kernel_pixels_outside_boxes(const Batch& b, int64_t i) {
  const auto g = b.targets.gt_shrink[i][0];  // [H, W]
  auto covered = torch::zeros_like(g, torch::kBool);
  const auto ys = torch::arange(g.size(0)).view({-1, 1});
  const auto xs = torch::arange(g.size(1)).view({1, -1});
  for (int64_t k = 0; k < b.word_boxes.size(1); ++k) {
    const auto box = b.word_boxes[i][k];
    const float x0 = box[0].item<float>(), y0 = box[1].item<float>(), x1 = box[2].item<float>(),
                y1 = box[3].item<float>();
    if (x0 > x1) continue;  // padding
    covered = covered.logical_or(
        (ys >= y0 - 1).logical_and(ys <= y1 + 1).logical_and(xs >= x0 - 1).logical_and(xs <= x1 + 1));
  }
  return (g > 0).logical_and(covered.logical_not()).sum().item<int64_t>();
}

TEST(WordBoxesTest, KernelsLieInsideTheCountedWordsOfTheRealFixtures) {
  if (!fs::exists(kFixtures / "annotations.json")) GTEST_SKIP() << "fixtures/real is absent";
  torch::set_num_threads(1);
  int64_t samples_with_words = 0;
  for (const int64_t size : {128, 320}) {
    for (const bool augment : {false, true}) {
      DatasetOptions o;
      o.root = kFixtures.string();
      o.size = size;
      o.augment = augment;
      o.seed = 3;
      const Dataset ds(o);
      for (int64_t epoch = 0; epoch < (augment ? 3 : 1); ++epoch) {
        std::vector<int64_t> all(static_cast<size_t>(ds.size()));
        for (int64_t i = 0; i < ds.size(); ++i)
          all[static_cast<size_t>(i)] = i;
        const Batch b = ds.collate(all, epoch);
        ASSERT_EQ(b.words.size(), static_cast<size_t>(ds.size()));
        ASSERT_EQ(b.word_boxes.dim(), 3);
        ASSERT_EQ(b.word_boxes.size(0), ds.size());
        for (int64_t i = 0; i < ds.size(); ++i) {
          const std::string where = b.sample_ids[static_cast<size_t>(i)] + " at " + std::to_string(size) +
                                    (augment ? " augmented, epoch " + std::to_string(epoch) : "");
          const int64_t words = b.words[static_cast<size_t>(i)];
          const int64_t boxes = (b.word_boxes[i].select(1, 0) <= b.word_boxes[i].select(1, 2)).sum().item<int64_t>();
          EXPECT_EQ(boxes, words) << where;
          const double inside_mask = (b.targets.gt_shrink[i] * b.targets.gt_shrink_mask[i]).sum().item<double>();
          const double kernels = b.targets.gt_shrink[i].sum().item<double>();
          EXPECT_EQ(kernel_pixels_outside_boxes(b, i), 0) << where;
          if (words == 0) {
            EXPECT_EQ(kernels, 0.0) << where << ": kernels without a counted word";
          } else {
            ++samples_with_words;
            EXPECT_GT(inside_mask, 0.0) << where << ": " << words << " words but no kernel inside the mask";
          }
        }
      }
    }
  }
  EXPECT_GT(samples_with_words, 10) << "the fixtures should exercise the check";
}

TEST(WordBoxesTest, SyntheticBoxesCarryTheirBoxes) {
  const Batch b = synthetic_boxes_batch(4, 64, 64, 7);
  ASSERT_EQ(b.words.size(), 4u);
  ASSERT_EQ(b.word_boxes.sizes(), (std::vector<int64_t>{4, 3, 4}));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_GE(b.words[static_cast<size_t>(i)], 1);
    EXPECT_LE(b.words[static_cast<size_t>(i)], 3);
    EXPECT_GT(b.targets.gt_shrink[i].sum().item<double>(), 0.0);
    EXPECT_EQ(kernel_pixels_outside_boxes(b, i), 0) << "sample " << i;
  }
  // The boxes travel with the batch.
  const Batch moved = b.to(torch::kCPU);
  EXPECT_EQ(moved.words, b.words);
  EXPECT_TRUE(torch::equal(moved.word_boxes, b.word_boxes));
  // Random data has no words.
  const Batch random = synthetic_random_batch(2, 32, 32, 1);
  EXPECT_TRUE(random.words.empty());
  EXPECT_FALSE(random.word_boxes.defined());
}

}  // namespace
}  // namespace dbh::model

// Reading a dataset folder: every image name must stay inside the dataset
// folder as written (absolute names and ".." steps; links in the dataset are
// the user's and followed), and each image file is annotated once. Either defect refuses the
// dataset under every policy, names the annotation file and the entry, and
// nothing outside the dataset is read.
#include "model/data/scan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

namespace dbh::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class ScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::weakly_canonical(fs::path(::testing::TempDir())) / (std::string("dbh_scan_") + info->name());
    fs::remove_all(dir_);
    ds_ = dir_ / "ds";
    fs::create_directories(ds_ / "images");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A 16×12 PNG.
  static void image(const fs::path& p) {
    fs::create_directories(p.parent_path());
    ASSERT_TRUE(cv::imwrite(p.string(), cv::Mat(12, 16, CV_8UC3, cv::Scalar(30, 60, 90))));
  }

  // One UFO image record with one valid word, as JSON text.
  static std::string record() {
    return R"({"img_w": 16, "img_h": 12, "words": {"0001": {"points": [[1, 1], [10, 1], [10, 8], [1, 8]]}}})";
  }

  // annotations.json naming `names` in this order, one per line (line 3 on).
  void annotations(const std::vector<std::string>& names) {
    std::string text = "{\n\"images\": {\n";
    for (size_t i = 0; i < names.size(); ++i) {
      text += nlohmann::json(names[i]).dump() + ": " + record() + (i + 1 < names.size() ? ",\n" : "\n");
    }
    text += "}\n}\n";
    std::ofstream(ds_ / "annotations.json", std::ios::binary) << text;
  }

  std::vector<Defect> of_kind(const ScanResult& r, DefectKind kind) {
    std::vector<Defect> out;
    std::copy_if(r.defects.begin(), r.defects.end(), std::back_inserter(out),
                 [&](const Defect& d) { return d.kind == kind; });
    return out;
  }

  fs::path dir_;
  fs::path ds_;
};

std::vector<std::string> files_of(const ScanResult& r) {
  std::vector<std::string> out;
  for (const auto& im : r.images) out.push_back(im.file);
  return out;
}

TEST_F(ScanTest, NamesThatLeaveTheDatasetAreRefusedUnderEveryPolicy) {
  image(ds_ / "images" / "a.png");
  image(dir_ / "secret.png");
  image(dir_ / "ds2" / "images" / "a.png");  // a sibling whose path extends the dataset's
  const std::vector<std::string> outside = {
      "../../secret.png",                                 // ".." out of the dataset
      "../../../../../../../../../../../../etc/passwd",  // ".." far past the root
      "/etc/passwd",                                     // absolute
      (dir_ / "secret.png").string(),                    // absolute, an image
      (dir_ / "ds2" / "images" / "a.png").string(),      // string prefix, not a component prefix
      "missing/../../../secret.png",                     // through a folder that does not exist
  };
  for (const auto& name : outside) {
    annotations({"a.png", name});
    for (const OnInvalid policy : {OnInvalid::kError, OnInvalid::kSkip, OnInvalid::kClip}) {
      const ScanResult r = scan_dataset(ds_.string(), policy);
      EXPECT_FALSE(r.readable) << name;
      const auto found = of_kind(r, DefectKind::kOutsideDataset);
      ASSERT_EQ(found.size(), 1u) << name;
      EXPECT_EQ(found[0].image, name);
      EXPECT_EQ(found[0].file, (ds_ / "annotations.json").string());
      EXPECT_EQ(found[0].line, 4) << found[0].message;
      EXPECT_THAT(found[0].message, HasSubstr((ds_ / "annotations.json").string() + ":4: image \""));
      EXPECT_THAT(found[0].message, HasSubstr("expected a file inside the dataset folder " + ds_.string()));
      EXPECT_EQ(r.defects.front().kind, DefectKind::kOutsideDataset) << "the refusal comes first";
      // Never offered to a reader, never decoded.
      EXPECT_THAT(files_of(r), ::testing::ElementsAre("a.png")) << name;
      EXPECT_EQ(r.images_usable, 1);
      EXPECT_EQ(r.images_listed, 2);
    }
    EXPECT_THROW(image_path(ds_.string(), name), DataError) << name;
  }
}

TEST_F(ScanTest, MessagesSayHowTheNameLeaves) {
  image(dir_ / "secret.png");
  EXPECT_THAT(resolve_image(ds_.string(), "/etc/passwd").problem,
              HasSubstr("got an absolute path that leads out of it, to /etc/passwd"));
  EXPECT_THAT(resolve_image(ds_.string(), "../../secret.png").problem,
              HasSubstr("got a path whose \"..\" steps lead out of it, to " + (dir_ / "secret.png").string()));
  EXPECT_THAT(resolve_image(ds_.string(), std::string("a.png\0/../../../x", 17)).problem,
              HasSubstr("a name with a NUL byte at offset 5"));
}

// Links are the user's own: an images/ folder, a file or a subfolder linked
// to another disk is read where it leads (only the names the annotations
// write must stay inside).
TEST_F(ScanTest, LinksInTheDatasetAreFollowedWhereverTheyLead) {
  image(ds_ / "images" / "a.png");
  image(dir_ / "elsewhere" / "b.png");
  fs::create_symlink(dir_ / "elsewhere" / "b.png", ds_ / "images" / "b.png");    // a file link
  fs::create_directory_symlink(dir_ / "elsewhere", ds_ / "images" / "sub");       // a folder link
  annotations({"a.png", "b.png", "sub/b.png"});
  EXPECT_EQ(resolve_image(ds_.string(), "b.png").problem, "");
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kSkip);
  // b.png and sub/b.png are one file: annotated twice, which is refused.
  EXPECT_FALSE(r.readable);
  EXPECT_TRUE(of_kind(r, DefectKind::kOutsideDataset).empty());
  ASSERT_EQ(of_kind(r, DefectKind::kDuplicateImage).size(), 1u);

  annotations({"a.png", "sub/b.png"});
  const ScanResult ok = scan_dataset(ds_.string(), OnInvalid::kError);
  EXPECT_TRUE(ok.readable);
  EXPECT_TRUE(ok.defects.empty()) << ok.defects.front().message;
  EXPECT_EQ(ok.images_usable, 2);

  // The whole images/ folder on another disk.
  fs::remove_all(ds_ / "images");
  image(dir_ / "disk" / "a.png");
  fs::create_directory_symlink(dir_ / "disk", ds_ / "images");
  annotations({"a.png"});
  const ScanResult linked = scan_dataset(ds_.string(), OnInvalid::kError);
  EXPECT_TRUE(linked.readable);
  EXPECT_EQ(linked.images_usable, 1);
}

TEST_F(ScanTest, NamesThatStayInsideTheDatasetAreRead) {
  image(ds_ / "images" / "a.png");
  image(ds_ / "extra" / "c.png");
  image(ds_ / "images" / "real.png");
  fs::create_symlink("real.png", ds_ / "images" / "alias.png");  // a relative link inside
  annotations({"a.png", (ds_ / "images" / "b.png").string(), "../extra/c.png", "alias.png"});
  image(ds_ / "images" / "b.png");
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kError);
  // alias.png and real.png are one file, but real.png is not annotated.
  EXPECT_TRUE(r.readable);
  EXPECT_TRUE(r.defects.empty()) << r.defects.front().message;
  EXPECT_EQ(r.images_usable, 4);
  EXPECT_EQ(image_path(ds_.string(), "../extra/c.png"), (ds_ / "images" / "../extra/c.png").string());
}

TEST_F(ScanTest, TwoNamesOfOneImageFileAreADuplicate) {
  image(ds_ / "images" / "a.png");
  image(ds_ / "images" / "b.png");
  annotations({"a.png", "b.png", "./a.png"});
  for (const OnInvalid policy : {OnInvalid::kError, OnInvalid::kSkip, OnInvalid::kClip}) {
    const ScanResult r = scan_dataset(ds_.string(), policy);
    EXPECT_FALSE(r.readable);
    const auto found = of_kind(r, DefectKind::kDuplicateImage);
    ASSERT_EQ(found.size(), 1u);
    // JSON keys are read in key order: "./a.png" first, "a.png" second.
    EXPECT_EQ(found[0].image, "a.png");
    EXPECT_EQ(found[0].line, 3);
    EXPECT_THAT(found[0].message, HasSubstr("annotations.json:3: image \"a.png\": expected each image file "
                                            "annotated once, got this name and image \"./a.png\" (line 5) both for " +
                                            (ds_ / "images" / "a.png").string()));
  }
}

TEST_F(ScanTest, TwoGroundTruthFilesOfOneImageAreADuplicate) {
  image(ds_ / "images" / "img_1.png");
  fs::create_directories(ds_ / "icdar");
  std::ofstream(ds_ / "icdar" / "gt_img_1.txt") << "1,1,10,1,10,8,1,8,word\n";
  std::ofstream(ds_ / "icdar" / "img_1.txt") << "2,2,10,2,10,8,2,8,other\n";
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kSkip);
  EXPECT_FALSE(r.readable);
  ASSERT_EQ(r.defects.size(), 1u) << r.defects.front().message;
  EXPECT_EQ(r.defects[0].kind, DefectKind::kDuplicateImage);
  EXPECT_EQ(r.defects[0].image, "img_1.png");
  EXPECT_EQ(r.defects[0].file, (ds_ / "icdar" / "img_1.txt").string());
  EXPECT_THAT(r.defects[0].message,
              HasSubstr("expected one ground-truth file per image, got two for " +
                        (ds_ / "images" / "img_1.png").string() + ": " + (ds_ / "icdar" / "gt_img_1.txt").string() +
                        " and " + (ds_ / "icdar" / "img_1.txt").string()));

  // Different stems, one file (a link): the same image twice.
  fs::remove(ds_ / "icdar" / "img_1.txt");
  fs::create_symlink("img_1.png", ds_ / "images" / "img_2.png");
  std::ofstream(ds_ / "icdar" / "gt_img_2.txt") << "2,2,10,2,10,8,2,8,other\n";
  const ScanResult linked = scan_dataset(ds_.string(), OnInvalid::kError);
  EXPECT_FALSE(linked.readable);
  ASSERT_EQ(of_kind(linked, DefectKind::kDuplicateImage).size(), 1u);
  EXPECT_EQ(of_kind(linked, DefectKind::kDuplicateImage)[0].image, "img_2.png");

  // A hard link is another name of the same file too.
  fs::remove(ds_ / "images" / "img_2.png");
  fs::create_hard_link(ds_ / "images" / "img_1.png", ds_ / "images" / "img_2.png");
  const ScanResult hard = scan_dataset(ds_.string(), OnInvalid::kError);
  EXPECT_FALSE(hard.readable);
  ASSERT_EQ(of_kind(hard, DefectKind::kDuplicateImage).size(), 1u);
  EXPECT_EQ(of_kind(hard, DefectKind::kDuplicateImage)[0].image, "img_2.png");
}

// gt_img_1.txt with img_1.png and img_1.jpg beside it: which image it
// annotates is unknown, and training on a guess is refused.
TEST_F(ScanTest, AGroundTruthFileWithTwoCandidateImagesIsRefused) {
  image(ds_ / "images" / "img_1.png");
  image(ds_ / "images" / "img_1.jpg");
  fs::create_directories(ds_ / "icdar");
  std::ofstream(ds_ / "icdar" / "gt_img_1.txt") << "1,1,10,1,10,8,1,8,word\n";
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kSkip);
  EXPECT_FALSE(r.readable);
  ASSERT_EQ(of_kind(r, DefectKind::kDuplicateImage).size(), 1u);
  EXPECT_THAT(of_kind(r, DefectKind::kDuplicateImage)[0].message,
              HasSubstr("gt_img_1.txt: expected one image named img_1.* in " + (ds_ / "images").string() +
                        ", got img_1.png and img_1.jpg"));
}

// images/ that is a file: one problem of the dataset, which cannot be read,
// not "missing" for every image it lists.
TEST_F(ScanTest, AnImagesFolderThatIsAFileIsOneProblem) {
  fs::remove_all(ds_ / "images");
  std::ofstream(ds_ / "images") << "not a folder";
  annotations({"a.png", "b.png"});
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kSkip);
  EXPECT_FALSE(r.readable);
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].message, (ds_ / "images").string() + ": expected the dataset's folder of images, got a file");
}

TEST_F(ScanTest, DistinctImagesAreNotDuplicates) {
  image(ds_ / "images" / "img_1.png");
  image(ds_ / "images" / "img_10.png");
  fs::create_directories(ds_ / "icdar");
  std::ofstream(ds_ / "icdar" / "gt_img_1.txt") << "1,1,10,1,10,8,1,8,word\n";
  std::ofstream(ds_ / "icdar" / "gt_img_10.txt") << "1,1,10,1,10,8,1,8,word\n";
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kError);
  EXPECT_TRUE(r.readable);
  EXPECT_TRUE(r.defects.empty()) << r.defects.front().message;
  EXPECT_EQ(r.images.size(), 2u);
}

TEST_F(ScanTest, AKeyWrittenTwiceIsRefusedAndNamesBothLines) {
  image(ds_ / "images" / "a.png");
  annotations({"a.png", "a.png"});
  const ScanResult r = scan_dataset(ds_.string(), OnInvalid::kClip);
  EXPECT_FALSE(r.readable);
  ASSERT_EQ(r.defects.size(), 1u) << r.defects.front().message;
  EXPECT_EQ(r.defects[0].kind, DefectKind::kDuplicateImage);
  EXPECT_THAT(r.defects[0].message, HasSubstr("annotations.json:4: image \"a.png\": expected each image once in "
                                              "\"images\", got this key twice: at line 3 and line 4"));
  EXPECT_THAT(r.defects[0].message, Not(HasSubstr("both for")));
}

}  // namespace
}  // namespace dbh::model

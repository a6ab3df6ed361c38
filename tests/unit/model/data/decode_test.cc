#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "model/data/augment.h"
#include "tests/support/files.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;

fs::path temp(const std::string& name) {
  return dbh::testing::removed_at_exit(fs::path(::testing::TempDir()) / ("dbh-decode-" + name));
}

TEST(DecodeImageTest, SixteenBitGrayscaleBecomesEightBitBgr) {
  cv::Mat img(10, 20, CV_16UC1, cv::Scalar(65535));
  img(cv::Rect(0, 0, 10, 10)).setTo(cv::Scalar(257 * 100));
  const auto p = temp("16bit.png");
  ASSERT_TRUE(cv::imwrite(p.string(), img));
  const cv::Mat out = decode_image(p.string());
  ASSERT_EQ(out.type(), CV_8UC3);
  EXPECT_EQ(out.at<cv::Vec3b>(5, 5), cv::Vec3b(100, 100, 100));
  EXPECT_EQ(out.at<cv::Vec3b>(5, 15), cv::Vec3b(255, 255, 255));
}

TEST(DecodeImageTest, AlphaIsDropped) {
  cv::Mat img(8, 8, CV_8UC4, cv::Scalar(10, 20, 30, 0));
  const auto p = temp("alpha.png");
  ASSERT_TRUE(cv::imwrite(p.string(), img));
  const cv::Mat out = decode_image(p.string());
  ASSERT_EQ(out.type(), CV_8UC3);
  EXPECT_EQ(out.at<cv::Vec3b>(3, 3), cv::Vec3b(10, 20, 30));
}

TEST(DecodeImageTest, UnreadableFilesGiveAnEmptyImage) {
  const auto p = temp("broken.png");
  std::ofstream(p) << "not an image";
  EXPECT_TRUE(decode_image(p.string()).empty());
  EXPECT_TRUE(decode_image(temp("missing.png").string()).empty());
}

// A JPEG whose EXIF says "rotate 90° clockwise" (orientation 6).
fs::path jpeg_with_orientation_6() {
  cv::Mat img(20, 40, CV_8UC3, cv::Scalar(0, 0, 0));
  img(cv::Rect(0, 0, 20, 20)).setTo(cv::Scalar(255, 255, 255));
  std::vector<uchar> jpg;
  cv::imencode(".jpg", img, jpg);
  // APP1 segment: "Exif\0\0", little-endian TIFF header, one IFD entry.
  const std::vector<uchar> exif = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0,
                                   0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0};
  std::vector<uchar> out = {0xFF, 0xD8, 0xFF, 0xE1, 0, static_cast<uchar>(exif.size() + 2)};
  out.insert(out.end(), exif.begin(), exif.end());
  out.insert(out.end(), jpg.begin() + 2, jpg.end());
  const auto p = temp("exif6.jpg");
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  return p;
}

TEST(DecodeImageTest, ExifOrientationIsIgnoredUnlessAsked) {
  const auto p = jpeg_with_orientation_6();
  const cv::Mat stored = decode_image(p.string());
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(stored.cols, 40);  // the stored pixels, as annotations refer to them
  EXPECT_EQ(stored.rows, 20);
  const cv::Mat oriented = decode_image(p.string(), /*apply_exif=*/true);
  EXPECT_EQ(oriented.cols, 20);
  EXPECT_EQ(oriented.rows, 40);
}

}  // namespace
}  // namespace dbh::model

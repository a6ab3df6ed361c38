// Strict image decoding: a truncated or corrupt JPEG or PNG is an unreadable
// image (a named data defect), never a partly grey one; an intact file
// decodes exactly as OpenCV decodes it.
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "model/data/annotation.h"
#include "model/data/image_decode.h"

namespace dbh::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class StrictDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("dbh_strict_decode_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<uchar>& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

  fs::path dir_;
};

// A smooth random picture: real entropy-coded data, deterministic in `seed`.
cv::Mat picture(int type, uint64_t seed) {
  cv::Mat m(96, 128, type);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  cv::GaussianBlur(m, m, cv::Size(7, 7), 2.0);
  return m;
}

std::vector<uchar> encode(const std::string& ext, const cv::Mat& img, const std::vector<int>& params = {}) {
  std::vector<uchar> out;
  EXPECT_TRUE(cv::imencode(ext, img, out, params));
  return out;
}

std::vector<uchar> head(const std::vector<uchar>& bytes, size_t n) {
  return std::vector<uchar>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
}

// The offset of the first byte after the JPEG's start-of-scan segment.
size_t scan_data_offset(const std::vector<uchar>& jpg) {
  for (size_t i = 2; i + 3 < jpg.size();) {
    if (jpg[i] != 0xFF) break;
    const size_t length = (size_t{jpg[i + 2]} << 8) | jpg[i + 3];
    if (jpg[i + 1] == 0xDA) return i + 2 + length;
    i += 2 + length;
  }
  ADD_FAILURE() << "no start-of-scan marker";
  return jpg.size();
}

// A PNG chunk: length, type, data, CRC (right or deliberately wrong).
std::vector<uchar> png_chunk(const std::string& type, const std::string& data, bool good_crc) {
  std::vector<uchar> c;
  const auto n = static_cast<uint32_t>(data.size());
  for (int s : {24, 16, 8, 0}) c.push_back(static_cast<uchar>(n >> s));
  c.insert(c.end(), type.begin(), type.end());
  c.insert(c.end(), data.begin(), data.end());
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 4; i < c.size(); ++i) {
    crc ^= c[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) != 0 ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  crc ^= 0xFFFFFFFFu;
  if (!good_crc) crc ^= 1;
  for (int s : {24, 16, 8, 0}) c.push_back(static_cast<uchar>(crc >> s));
  return c;
}

TEST_F(StrictDecodeTest, TruncatedJpegIsADefectNotAGreyImage) {
  const std::vector<uchar> jpg = encode(".jpg", picture(CV_8UC3, 1));
  for (const size_t cut : {jpg.size() / 3, jpg.size() / 2, jpg.size() - 2}) {
    SCOPED_TRACE("kept " + std::to_string(cut) + " of " + std::to_string(jpg.size()) + " bytes");
    const std::vector<uchar> truncated = head(jpg, cut);
    // OpenCV returns an image (grey below the cut): the reason for strictness.
    ASSERT_FALSE(cv::imdecode(truncated, cv::IMREAD_COLOR).empty());
    EXPECT_EQ(check_jpeg_stream(truncated.data(), truncated.size()),
              "a decode warning: Premature end of JPEG file");
    const std::string path = write("img_003.jpg", truncated);
    DecodeFailure failure;
    EXPECT_TRUE(decode_image(path, false, &failure).empty());
    EXPECT_EQ(failure.expected, "a complete JPEG image");
    EXPECT_EQ(failure.got, "a decode warning: Premature end of JPEG file");
  }
}

TEST_F(StrictDecodeTest, CheckImageNamesTheTruncatedJpeg) {
  const std::vector<uchar> jpg = encode(".jpg", picture(CV_8UC3, 2));
  const std::string path = write("img_003.jpg", head(jpg, jpg.size() / 3));
  ImageAnnotation image{"img_003.jpg", 0, 0, {}};
  cv::Mat decoded(1, 1, CV_8UC3);
  const std::vector<Defect> defects = check_image(image, path, "annotations.json", &decoded);
  ASSERT_EQ(defects.size(), 1u);
  EXPECT_EQ(defects[0].kind, DefectKind::kUnreadableImage);
  EXPECT_EQ(defects[0].image, "img_003.jpg");
  EXPECT_THAT(defects[0].message,
              StartsWith("annotations.json: image \"img_003.jpg\": expected a complete JPEG image at "));
  EXPECT_THAT(defects[0].message, HasSubstr("got a decode warning: Premature end of JPEG file"));
  EXPECT_TRUE(decoded.empty());
}

TEST_F(StrictDecodeTest, JpegWithGarbageInTheMiddleIsADefect) {
  const std::vector<uchar> jpg = encode(".jpg", picture(CV_8UC3, 3));
  const size_t start = scan_data_offset(jpg);
  ASSERT_LT(start + 400, jpg.size());
  // Bytes overwritten in the entropy-coded data, and bytes inserted into it.
  // (JPEG has no checksum: corruption shows where it breaks the stream's
  // structure, as a run of random bytes this long does.)
  std::vector<uchar> overwritten = jpg;
  const size_t middle = start + (jpg.size() - start) / 2;
  cv::RNG rng(42);
  for (size_t i = 0; i < 200; ++i) overwritten[middle - 100 + i] = static_cast<uchar>(rng.uniform(0, 256));
  std::vector<uchar> inserted = jpg;
  const std::vector<uchar> junk(200, 0x5A);
  inserted.insert(inserted.begin() + static_cast<std::ptrdiff_t>(middle), junk.begin(), junk.end());
  for (const auto* broken : {&overwritten, &inserted}) {
    SCOPED_TRACE(broken == &overwritten ? "overwritten" : "inserted");
    ASSERT_FALSE(cv::imdecode(*broken, cv::IMREAD_COLOR).empty());
    const std::string path = write("img_007.jpg", *broken);
    DecodeFailure failure;
    EXPECT_TRUE(decode_image(path, false, &failure).empty());
    EXPECT_EQ(failure.expected, "a complete JPEG image");
    EXPECT_THAT(failure.got, StartsWith("a decode warning: Corrupt JPEG data"));
  }
}

TEST_F(StrictDecodeTest, BrokenJpegHeadersAreDecodeErrors) {
  const std::vector<uchar> text = {'n', 'o', 't', ' ', 'a', ' ', 'J', 'P', 'E', 'G'};
  EXPECT_EQ(check_jpeg_stream(text.data(), text.size()), "a decode error: Not a JPEG file: starts with 0x6e 0x6f");
  // A reserved marker right after the start of image.
  const std::vector<uchar> junk = {0xFF, 0xD8, 0xFF, 0x02, 0x00, 0x04, 0x00, 0x00};
  EXPECT_EQ(check_jpeg_stream(junk.data(), junk.size()), "a decode error: Unsupported marker type 0x02");
  DecodeFailure failure;
  EXPECT_TRUE(decode_image(write("junk.jpg", junk), false, &failure).empty());
  EXPECT_EQ(failure.expected, "a complete JPEG image");
  EXPECT_EQ(failure.got, "a decode error: Unsupported marker type 0x02");
}

TEST_F(StrictDecodeTest, TheStreamNotTheFileNameDecidesTheCheck) {
  const std::vector<uchar> jpg = encode(".jpg", picture(CV_8UC3, 4));
  DecodeFailure failure;
  EXPECT_TRUE(decode_image(write("looks_like.png", head(jpg, jpg.size() / 2)), false, &failure).empty());
  EXPECT_EQ(failure.got, "a decode warning: Premature end of JPEG file");
}

TEST_F(StrictDecodeTest, TruncatedPngIsADefectWhereverItIsCut) {
  const std::vector<uchar> png = encode(".png", picture(CV_8UC3, 5));
  // Inside IDAT, just before IEND, inside IEND.
  for (const size_t cut : {png.size() / 3, png.size() / 2, png.size() - 12, png.size() - 1}) {
    SCOPED_TRACE("kept " + std::to_string(cut) + " of " + std::to_string(png.size()) + " bytes");
    const std::vector<uchar> truncated = head(png, cut);
    EXPECT_THAT(check_png_stream(truncated.data(), truncated.size()), StartsWith("a truncated stream: it ends"));
    const std::string path = write("img_1.png", truncated);
    DecodeFailure failure;
    EXPECT_TRUE(decode_image(path, false, &failure).empty());
    ImageAnnotation image{"img_1.png", 0, 0, {}};
    const std::vector<Defect> defects = check_image(image, path, "annotations.json");
    ASSERT_EQ(defects.size(), 1u);
    EXPECT_EQ(defects[0].kind, DefectKind::kUnreadableImage);
    EXPECT_THAT(defects[0].message, HasSubstr("image \"img_1.png\": expected a "));
  }
  const std::vector<uchar> no_iend = head(png, png.size() - 12);
  EXPECT_EQ(check_png_stream(no_iend.data(), no_iend.size()),
            "a truncated stream: it ends at byte " + std::to_string(png.size() - 12) + ", before the IEND chunk");
}

TEST_F(StrictDecodeTest, PngChunkThatFailsItsCrcIsADefect) {
  const std::vector<uchar> png = encode(".png", picture(CV_8UC3, 6));
  // A text chunk after IHDR (8-byte signature + 25-byte IHDR) whose CRC is
  // wrong: OpenCV's libpng only warns and drops it.
  std::vector<uchar> broken = head(png, 33);
  const std::vector<uchar> text = png_chunk("tEXt", std::string("Comment") + '\0' + "bit rot", false);
  broken.insert(broken.end(), text.begin(), text.end());
  broken.insert(broken.end(), png.begin() + 33, png.end());
  ASSERT_FALSE(cv::imdecode(broken, cv::IMREAD_COLOR).empty());
  EXPECT_EQ(check_png_stream(broken.data(), broken.size()), "a corrupt chunk: tEXt at byte 33 does not match its CRC");
  DecodeFailure failure;
  EXPECT_TRUE(decode_image(write("img_2.png", broken), false, &failure).empty());
  EXPECT_EQ(failure.expected, "a complete PNG image");
  EXPECT_EQ(failure.got, "a corrupt chunk: tEXt at byte 33 does not match its CRC");
  // The same chunk with its right CRC is fine.
  std::vector<uchar> good = head(png, 33);
  const std::vector<uchar> good_text = png_chunk("tEXt", std::string("Comment") + '\0' + "fine", true);
  good.insert(good.end(), good_text.begin(), good_text.end());
  good.insert(good.end(), png.begin() + 33, png.end());
  EXPECT_EQ(check_png_stream(good.data(), good.size()), "");
  EXPECT_FALSE(decode_image(write("img_3.png", good)).empty());
}

TEST_F(StrictDecodeTest, BytesAfterIendAreIgnored) {
  std::vector<uchar> png = encode(".png", picture(CV_8UC1, 7));
  png.insert(png.end(), {'t', 'r', 'a', 'i', 'l', 'e', 'r'});
  EXPECT_EQ(check_png_stream(png.data(), png.size()), "");
  EXPECT_FALSE(decode_image(write("trailer.png", png)).empty());
}

TEST_F(StrictDecodeTest, IntactImagesDecodeExactlyAsOpenCvDecodesThem) {
  struct Case {
    const char* name;
    int type;
    std::vector<int> params;
  };
  const std::vector<Case> cases = {
      {"colour.jpg", CV_8UC3, {cv::IMWRITE_JPEG_QUALITY, 90}},
      {"grey.jpg", CV_8UC1, {}},
      {"progressive.jpg", CV_8UC3, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}},
      {"colour.png", CV_8UC3, {}},
      {"grey.png", CV_8UC1, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string ext = fs::path(c.name).extension().string();
    const std::vector<uchar> bytes = encode(ext, picture(c.type, 8), c.params);
    EXPECT_EQ(ext == ".jpg" ? check_jpeg_stream(bytes.data(), bytes.size())
                            : check_png_stream(bytes.data(), bytes.size()),
              "");
    const std::string path = write(c.name, bytes);
    DecodeFailure failure;
    const cv::Mat strict = decode_image(path, false, &failure);
    const cv::Mat opencv = cv::imread(path, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
    ASSERT_FALSE(strict.empty()) << failure.expected << " / " << failure.got;
    ASSERT_EQ(strict.type(), CV_8UC3);
    ASSERT_EQ(strict.size(), opencv.size());
    EXPECT_EQ(cv::norm(strict, opencv, cv::NORM_INF), 0.0);
  }
}

TEST_F(StrictDecodeTest, MissingFileSaysSo) {
  DecodeFailure failure;
  EXPECT_TRUE(decode_image((dir_ / "none.jpg").string(), false, &failure).empty());
  EXPECT_EQ(failure.expected, "an image file");
  EXPECT_EQ(failure.got, "nothing");
  // What is there when it is not an image file, named.
  fs::create_directories(dir_ / "folder.png");
  EXPECT_TRUE(decode_image((dir_ / "folder.png").string(), false, &failure).empty());
  EXPECT_EQ(failure.got, "a folder");
  ASSERT_EQ(::mkfifo((dir_ / "fifo.png").c_str(), 0644), 0);
  EXPECT_TRUE(decode_image((dir_ / "fifo.png").string(), false, &failure).empty());
  EXPECT_EQ(failure.got, "a FIFO");
}

// A file larger than any image dbh reads (sparse: no disk is used) is named
// before it is read, never read whole into memory.
TEST_F(StrictDecodeTest, AFileLargerThanAnyImageIsADefectBeforeReading) {
  const fs::path big = dir_ / "big.png";
  const cv::Mat small(4, 4, CV_8UC3, cv::Scalar(1, 2, 3));
  ASSERT_TRUE(cv::imwrite(big.string(), small));
  fs::resize_file(big, static_cast<uintmax_t>(kMaxImageFileBytes) + 1);
  DecodeFailure failure;
  EXPECT_TRUE(decode_image(big.string(), false, &failure).empty());
  EXPECT_EQ(failure.expected, "an image file of at most 512 MiB (what 8192 × 8192 pixels of 16-bit RGBA take)");
  EXPECT_EQ(failure.got, "a file of 513 MiB");
}

// A decompression bomb: 72 million pixels of zeros compress to a few
// kilobytes. The header's size is checked before anything is decoded, for
// PNG and JPEG alike; an image at the limit's side still decodes.
TEST_F(StrictDecodeTest, AnImageAboveThePixelLimitIsADefectBeforeDecoding) {
  const cv::Mat zeros(8000, 9000, CV_8UC1, cv::Scalar(0));
  for (const char* ext : {".png", ".jpg"}) {
    std::vector<uchar> bytes;
    ASSERT_TRUE(cv::imencode(ext, zeros, bytes));
    EXPECT_LT(bytes.size(), 4u << 20) << ext;
    const auto size = announced_image_size(bytes.data(), bytes.size());
    EXPECT_EQ(size.first, 9000) << ext;
    EXPECT_EQ(size.second, 8000) << ext;
    DecodeFailure failure;
    EXPECT_TRUE(decode_image(write(std::string("bomb") + ext, bytes), false, &failure).empty()) << ext;
    EXPECT_EQ(failure.expected, "an image of at most 67108864 pixels (8192 × 8192)") << ext;
    EXPECT_EQ(failure.got, "a header announcing 9000 × 8000") << ext;
  }
  std::vector<uchar> small;
  ASSERT_TRUE(cv::imencode(".png", cv::Mat(64, 8192, CV_8UC1, cv::Scalar(7)), small));
  EXPECT_EQ(announced_image_size(small.data(), small.size()), std::make_pair(int64_t{8192}, int64_t{64}));
  EXPECT_FALSE(decode_image(write("wide.png", small)).empty());
  const unsigned char junk[] = {0xFF, 0xD8, 0xFF, 0xDA, 0x00};
  EXPECT_EQ(announced_image_size(junk, sizeof(junk)), std::make_pair(int64_t{0}, int64_t{0}));
}

}  // namespace
}  // namespace dbh::model

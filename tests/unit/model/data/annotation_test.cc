#include "model/data/annotation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <random>
#include <set>
#include <string>

namespace dbh::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Writes test inputs into a fresh directory under the gtest temp dir.
class AnnotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("dbh_annotation_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  fs::path dir_;
};

std::vector<DefectKind> kinds(const std::vector<Defect>& defects) {
  std::vector<DefectKind> out;
  for (const Defect& d : defects) out.push_back(d.kind);
  return out;
}

const char kValidUfo[] = R"({
  "images": {
    "b.jpg": {
      "paragraphs": {}, "img_w": 200, "img_h": 100,
      "words": {
        "0002": {"transcription": "world", "points": [[60, 10], [100, 10], [100, 30], [60, 30]],
                 "illegibility": false, "orientation": "Horizontal", "language": ["en"],
                 "tags": ["Auto"], "confidence": null},
        "0001": {"transcription": null, "points": [[1.5, 2.25], [50, 2], [50, 30], [40, 31], [2, 30]],
                 "illegibility": true}
      },
      "chars": {}, "tags": [], "relations": {},
      "license_tag": {"usability": true, "public": false}
    },
    "a.jpg": {"img_w": 10, "img_h": 20, "words": {}}
  }
})";

TEST_F(AnnotationTest, UfoValidDocument) {
  const ReadResult r = read_ufo_json(write("ufo.json", kValidUfo));
  EXPECT_TRUE(r.defects.empty()) << r.defects[0].message;
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0].file, "a.jpg");  // Key order.
  EXPECT_EQ(r.images[0].width, 10);
  EXPECT_EQ(r.images[0].height, 20);
  const ImageAnnotation& b = r.images[1];
  EXPECT_EQ(b.file, "b.jpg");
  EXPECT_EQ(b.width, 200);
  EXPECT_EQ(b.height, 100);
  ASSERT_EQ(b.words.size(), 2u);
  EXPECT_EQ(b.words[0].id, "0001");
  EXPECT_TRUE(b.words[0].ignore);
  EXPECT_EQ(b.words[0].transcription, "");
  ASSERT_EQ(b.words[0].points.size(), 5u);
  EXPECT_DOUBLE_EQ(b.words[0].points[0].x, 1.5);
  EXPECT_DOUBLE_EQ(b.words[0].points[0].y, 2.25);
  EXPECT_EQ(b.words[1].id, "0002");
  EXPECT_FALSE(b.words[1].ignore);
  EXPECT_EQ(b.words[1].transcription, "world");
}

TEST_F(AnnotationTest, UfoIgnoreTags) {
  const ReadResult r = read_ufo_json(write("ufo.json", kValidUfo), {"Auto"});
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_TRUE(r.images[1].words[1].ignore);
}

TEST_F(AnnotationTest, UfoMissingWordsKeepsTheImage) {
  const ReadResult r = read_ufo_json(write(
      "ufo.json", R"({"images": {"a.jpg": {"img_w": 10, "img_h": 20}}})"));
  ASSERT_EQ(r.defects.size(), 1u);
  const Defect& d = r.defects[0];
  EXPECT_EQ(d.kind, DefectKind::kBadJsonShape);
  EXPECT_EQ(d.image, "a.jpg");
  EXPECT_THAT(d.message, HasSubstr("ufo.json"));
  EXPECT_THAT(d.message, HasSubstr("words: expected an object"));
  EXPECT_THAT(d.message, HasSubstr("got no such key"));
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_TRUE(r.images[0].words.empty());
}

TEST_F(AnnotationTest, UfoWrongTypes) {
  const ReadResult r = read_ufo_json(write("ufo.json", R"({"images": {
    "a.jpg": {"img_w": "640", "img_h": 480.0, "words": {
      "1": {"points": "0,0,1,1"},
      "2": {"points": [[0, 0], [1], [1, 1]]},
      "3": {"points": [[0, 0], [4, 0], [4, 4]], "transcription": 12,
            "illegibility": "no", "tags": "x"},
      "4": [1, 2],
      "5": {"transcription": "no points"}
    }},
    "b.jpg": [],
    "c.jpg": {"img_w": 1, "img_h": 1, "words": []}
  }})"));
  EXPECT_THAT(kinds(r.defects),
              ::testing::ElementsAre(
                  DefectKind::kBadJsonType,    // img_w string.
                  DefectKind::kBadJsonType,    // 1: points string.
                  DefectKind::kBadJsonShape,   // 2: point of one number.
                  DefectKind::kBadJsonType,    // 3: transcription.
                  DefectKind::kBadJsonType,    // 3: illegibility.
                  DefectKind::kBadJsonType,    // 3: tags.
                  DefectKind::kBadJsonType,    // 4: not an object.
                  DefectKind::kBadJsonShape,   // 5: no points.
                  DefectKind::kBadJsonType,    // b.jpg.
                  DefectKind::kBadJsonType));  // c.jpg words array.
  EXPECT_EQ(r.defects[1].word_id, "1");
  EXPECT_THAT(r.defects[1].message, HasSubstr("got string \"0,0,1,1\""));
  EXPECT_THAT(r.defects[2].message, HasSubstr("points[1]: expected 2"));
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0].width, 0);
  EXPECT_EQ(r.images[0].height, 480);
  ASSERT_EQ(r.images[0].words.size(), 1u);  // Only word 3 survives.
  EXPECT_EQ(r.images[0].words[0].id, "3");
  EXPECT_TRUE(r.images[0].words[0].ignore);  // Unknown legibility.
}

TEST_F(AnnotationTest, UfoNanLikeStringsAreTypeErrors) {
  const ReadResult r = read_ufo_json(write("ufo.json", R"({"images": {
    "a.jpg": {"img_w": 10, "img_h": 10, "words": {
      "1": {"points": [["NaN", 0], [4, 0], [4, 4]]},
      "2": {"points": [[0, 0], [4, "Infinity"], [4, 4]]}}}}})"));
  ASSERT_EQ(r.defects.size(), 2u);
  EXPECT_EQ(r.defects[0].kind, DefectKind::kBadJsonType);
  EXPECT_THAT(r.defects[0].message,
              HasSubstr("points[0][0]: expected a number, got string \"NaN\""));
  EXPECT_THAT(r.defects[1].message, HasSubstr("points[1][1]"));
  EXPECT_TRUE(r.images.at(0).words.empty());
}

TEST_F(AnnotationTest, UfoInvalidJsonReportsLineAndColumn) {
  const ReadResult r = read_ufo_json(
      write("ufo.json", "{\"images\": {\n  \"a.jpg\": {\"img_w\": NaN}\n}}\n"));
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].kind, DefectKind::kBadJsonShape);
  EXPECT_EQ(r.defects[0].line, 2);
  EXPECT_THAT(r.defects[0].message, HasSubstr("ufo.json:2:22: expected"));
  EXPECT_TRUE(r.images.empty());
}

// JSON silently keeps the last of two equal keys: every key written twice
// in one object is a defect naming both lines, however it is spelled.
TEST_F(AnnotationTest, UfoImageKeyWrittenTwiceIsADuplicateNamingBothLines) {
  const std::string path = write("ufo.json",
                                 "{\"images\": {\n"
                                 "  \"a.jpg\": {\"img_w\": 10, \"img_h\": 10, \"words\": {}},\n"
                                 "  \"b.jpg\": {\"img_w\": 10, \"img_h\": 10, \"words\": {}},\n"
                                 "  \"a.jpg\": {\"img_w\": 20, \"img_h\": 20, \"words\": {}}\n"
                                 "}}\n");
  const ReadResult r = read_ufo_json(path);
  ASSERT_EQ(r.defects.size(), 1u);
  const Defect& d = r.defects[0];
  EXPECT_EQ(d.kind, DefectKind::kDuplicateImage);
  EXPECT_EQ(to_string(d.kind), "duplicate_image");
  EXPECT_TRUE(refuses_dataset(d.kind));
  EXPECT_EQ(d.image, "a.jpg");
  EXPECT_EQ(d.line, 4);
  EXPECT_EQ(d.message, path + ":4: image \"a.jpg\": expected each image once in \"images\", got this key twice: "
                              "at line 2 and line 4 (entries 0 and 2 of \"images\"); a JSON reader silently keeps "
                              "only the last");
  // What is kept is the last, and its line is the last one's.
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0].file, "a.jpg");
  EXPECT_EQ(r.images[0].width, 20);
  EXPECT_EQ(r.images[0].line, 4);
  EXPECT_EQ(r.images[1].line, 3);
}

TEST_F(AnnotationTest, UfoEscapedSpellingOfAKeyIsTheSameKey) {
  // "a\u002ejpg" is "a.jpg" once decoded; a BOM does not shift the lines.
  const ReadResult r = read_ufo_json(write("ufo.json",
                                           "\xEF\xBB\xBF{\"images\": {\n"
                                           "  \"a.jpg\": {\"img_w\": 10, \"img_h\": 10, \"words\": {}},\n"
                                           "  \"a\\u002ejpg\": {\"img_w\": 10, \"img_h\": 10, \"words\": {}}}}"));
  ASSERT_EQ(r.defects.size(), 1u);
  EXPECT_EQ(r.defects[0].kind, DefectKind::kDuplicateImage);
  EXPECT_THAT(r.defects[0].message, HasSubstr("at line 2 and line 3"));
}

TEST_F(AnnotationTest, UfoWordIdsAndFieldsWrittenTwiceAreDuplicateKeys) {
  const ReadResult r = read_ufo_json(write("ufo.json",
                                           "{\"images\": {\"a.jpg\": {\"img_w\": 10, \"img_h\": 10,\n"
                                           "  \"img_w\": 12,\n"
                                           "  \"words\": {\n"
                                           "    \"0001\": {\"points\": [[0, 0], [4, 0], [4, 4]]},\n"
                                           "    \"0001\": {\"points\": [[1, 1], [5, 1], [5, 5]],\n"
                                           "               \"points\": [[2, 2], [6, 2], [6, 6]]}}}},\n"
                                           " \"images\": {\"b.jpg\": {\"img_w\": 10, \"img_h\": 10, \"words\": {}}}}\n"));
  ASSERT_EQ(r.defects.size(), 4u) << r.defects[0].message;
  EXPECT_EQ(r.defects[0].kind, DefectKind::kDuplicateKey);
  EXPECT_EQ(r.defects[0].image, "a.jpg");
  EXPECT_THAT(r.defects[0].message,
              HasSubstr(":2: image \"a.jpg\": \"img_w\": expected each key once per image, got it twice: at line 1 "
                        "and line 2"));
  EXPECT_EQ(r.defects[1].word_id, "0001");
  EXPECT_THAT(r.defects[1].message,
              HasSubstr(":5: image \"a.jpg\", word \"0001\": expected each word id once in \"words\", got this id "
                        "twice: at line 4 and line 5 (entries 0 and 1 of \"words\")"));
  EXPECT_EQ(r.defects[2].word_id, "0001");
  EXPECT_THAT(r.defects[2].message,
              HasSubstr(":6: image \"a.jpg\", word \"0001\": \"points\": expected each key once per word, got it "
                        "twice: at line 5 and line 6"));
  EXPECT_EQ(r.defects[3].kind, DefectKind::kDuplicateKey);
  EXPECT_THAT(r.defects[3].message,
              HasSubstr(":7: root: expected each key once per object, got \"images\" twice: at line 1 and line 7"));
  // The last "images" is the one kept, and its keys' lines are its own.
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].file, "b.jpg");
  EXPECT_EQ(r.images[0].line, 7);
}

TEST_F(AnnotationTest, UfoEqualKeysInDifferentObjectsAreNoDuplicates) {
  const ReadResult r = read_ufo_json(write("ufo.json", kValidUfo));
  EXPECT_TRUE(r.defects.empty()) << r.defects.front().message;
  const ReadResult nested = read_ufo_json(write("n.json", R"({"images": {
    "a.jpg": {"img_w": 10, "img_h": 10, "words": {"1": {"points": [[0, 0], [4, 0], [4, 4]], "x": {"k": 1}},
                                                   "2": {"points": [[0, 0], [4, 0], [4, 4]], "x": [{"k": 1}, {"k": 2}]}}},
    "b.jpg": {"img_w": 10, "img_h": 10, "words": {"1": {"points": [[0, 0], [4, 0], [4, 4]], "t": "a \"1\": {"}}}}})"));
  EXPECT_TRUE(nested.defects.empty()) << nested.defects.front().message;
}

TEST_F(AnnotationTest, UfoOddDocuments) {
  const std::string path = write("a.json", "[1, 2]");
  EXPECT_THAT(kinds(read_ufo_json(path).defects),
              ::testing::ElementsAre(DefectKind::kBadJsonType));
  EXPECT_THAT(kinds(read_ufo_json(write("b.json", "{}")).defects),
              ::testing::ElementsAre(DefectKind::kBadJsonShape));
  EXPECT_THAT(kinds(read_ufo_json(write("c.json", "")).defects),
              ::testing::ElementsAre(DefectKind::kBadJsonShape));
  // Numbers beyond double range fail inside the JSON parser.
  EXPECT_THAT(
      kinds(read_ufo_json(write("d.json", "{\"images\": 1e400}")).defects),
      ::testing::ElementsAre(DefectKind::kBadJsonShape));
  EXPECT_THAT(kinds(read_ufo_json((dir_ / "missing.json").string()).defects),
              ::testing::ElementsAre(DefectKind::kUnreadableFile));
  EXPECT_THAT(kinds(read_ufo_json(dir_.string()).defects),
              ::testing::ElementsAre(DefectKind::kUnreadableFile));
}

TEST_F(AnnotationTest, ReadersNeverThrowOnArbitraryBytes) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::string ufo = kValidUfo;
  const std::string icdar =
      "\xEF\xBB\xBF"
      "1,2,3,4,5,6,7,8,a,b\r\n###\n";
  for (int i = 0; i < 300; ++i) {
    std::string bytes;
    if (i % 3 == 0) {
      bytes = ufo.substr(0, rng() % ufo.size());  // Truncated document.
    } else if (i % 3 == 1) {
      bytes = ufo;  // Mutated document.
      for (int k = 0; k < 4; ++k) bytes[rng() % bytes.size()] = char(byte(rng));
    } else {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(byte(rng));
      if (i % 2 == 0) bytes = icdar + bytes;
    }
    const std::string path = write("fuzz", bytes);
    EXPECT_NO_THROW(read_ufo_json(path));
    EXPECT_NO_THROW({
      ReadResult r = read_icdar_txt(path, "img.jpg");
      for (ImageAnnotation& image : r.images) {
        image.width = 50;
        image.height = 50;
        validate(image, OnInvalid::kClip, path);
      }
    });
  }
  // Deep nesting must not overflow the stack.
  EXPECT_NO_THROW(read_ufo_json(write("deep", std::string(100000, '['))));
}

TEST_F(AnnotationTest, IcdarValidLinesWithBomCrlfAndCommas) {
  const std::string path =
      write("gt_img_1.txt",
            "\xEF\xBB\xBF"
            "377,117,463,117,465,130,378,130,Genaxis Theatre\r\n"
            "493,115,519,115,519,131,493,131,[06]\r\n"
            "\r\n"
            "374,155,409,155,409,170,374,170,###\r\n"
            "1.5, 2 ,3,4,5,6,7,8,1,000\r\n"
            "10,10,20,10,20,20,10,20,a,b,,c\r\n"
            "10,10,20,10,20,20,10,20");
  const ReadResult r = read_icdar_txt(path, "img_1.jpg");
  EXPECT_TRUE(r.defects.empty()) << r.defects[0].message;
  ASSERT_EQ(r.images.size(), 1u);
  const ImageAnnotation& img = r.images[0];
  EXPECT_EQ(img.file, "img_1.jpg");
  EXPECT_EQ(img.width, 0);
  ASSERT_EQ(img.words.size(), 6u);
  EXPECT_EQ(img.words[0].transcription, "Genaxis Theatre");
  EXPECT_DOUBLE_EQ(img.words[0].points[0].x, 377);  // BOM stripped.
  EXPECT_DOUBLE_EQ(img.words[0].points[3].y, 130);
  EXPECT_FALSE(img.words[0].ignore);
  EXPECT_EQ(img.words[1].transcription, "[06]");  // CR stripped.
  EXPECT_TRUE(img.words[2].ignore);
  EXPECT_EQ(img.words[2].line, 4);
  EXPECT_EQ(img.words[2].id, "4");
  EXPECT_EQ(img.words[3].transcription, "1,000");
  EXPECT_DOUBLE_EQ(img.words[3].points[0].x, 1.5);
  EXPECT_DOUBLE_EQ(img.words[3].points[0].y, 2);
  EXPECT_EQ(img.words[4].transcription, "a,b,,c");
  EXPECT_EQ(img.words[5].transcription, "");
}

// A lone "\r" ends a line as "\n" and "\r\n" do: read as one line, every
// word after the first would become the first word's transcription.
TEST_F(AnnotationTest, IcdarLinesEndedByALoneCarriageReturn) {
  const std::string path = write("gt_img_1.txt",
                                 "10,10,50,10,50,26,10,26,x\r20,36,80,36,80,52,20,52,y\r\r"
                                 "1,1,9,1,9,9,1,9,z\r\n2,2,8,2,8,8,2,8,w\n");
  const ReadResult r = read_icdar_txt(path, "img_1.png");
  EXPECT_TRUE(r.defects.empty()) << r.defects[0].message;
  ASSERT_EQ(r.images.size(), 1u);
  ASSERT_EQ(r.images[0].words.size(), 4u);
  EXPECT_EQ(r.images[0].words[0].transcription, "x");
  EXPECT_EQ(r.images[0].words[1].transcription, "y");
  EXPECT_EQ(r.images[0].words[1].line, 2);
  EXPECT_EQ(r.images[0].words[2].transcription, "z");
  EXPECT_EQ(r.images[0].words[2].line, 4);
  EXPECT_EQ(r.images[0].words[3].line, 5);
}

TEST_F(AnnotationTest, IcdarBadLines) {
  const std::string path = write("gt.txt",
                                 "1,2,3,4,5,6,7\n"
                                 "1,2,3,4,5,6,7,word\n"
                                 "1,2,3,4,x,6,7,8,word\n"
                                 "10,10,20,10,20,20,10,20,ok\n"
                                 "nan,0,10,0,10,inf,0,10,nan\n"
                                 "1e999,0,10,0,10,10,0,10,big\n");
  const ReadResult r = read_icdar_txt(path, "img.jpg");
  ASSERT_EQ(r.defects.size(), 3u);
  for (const Defect& d : r.defects) {
    EXPECT_EQ(d.kind, DefectKind::kBadIcdarLine);
    EXPECT_EQ(d.image, "img.jpg");
  }
  EXPECT_EQ(r.defects[0].line, 1);
  EXPECT_THAT(r.defects[0].message, HasSubstr("gt.txt:1: "));
  EXPECT_THAT(r.defects[0].message, HasSubstr("got 7 comma-separated"));
  EXPECT_EQ(r.defects[1].line, 2);
  EXPECT_THAT(r.defects[1].message,
              HasSubstr("field 8: expected a number, got \"word\""));
  EXPECT_THAT(r.defects[2].message, HasSubstr("field 5"));
  ASSERT_EQ(r.images.at(0).words.size(), 3u);
  // Non-finite and out-of-range numbers are left to validate().
  ImageAnnotation img = r.images[0];
  const std::vector<Defect> v = validate(img, OnInvalid::kSkip, path);
  EXPECT_THAT(kinds(v),
              ::testing::ElementsAre(DefectKind::kNonFiniteCoordinate,
                                     DefectKind::kNonFiniteCoordinate));
  EXPECT_EQ(v[0].line, 5);
  ASSERT_EQ(img.words.size(), 1u);
  EXPECT_EQ(img.words[0].transcription, "ok");
  EXPECT_THAT(kinds(read_icdar_txt((dir_ / "nope.txt").string(), "x").defects),
              ::testing::ElementsAre(DefectKind::kUnreadableFile));
}

// validate(): one word per defect kind, under each policy.
struct ValidateCase {
  const char* name;
  Polygon points;
  std::vector<DefectKind> expected;
  bool kept_by_clip;
  Polygon clipped;  // Expected points after kClip when kept.
};

std::vector<ValidateCase> validate_cases() {
  const double nan = std::nan("");
  const double inf = HUGE_VAL;
  using K = DefectKind;
  return {
      {"valid",
       {{10, 10}, {50, 10}, {50, 30}, {10, 30}},
       {},
       true,
       {{10, 10}, {50, 10}, {50, 30}, {10, 30}}},
      {"nan",
       {{10, 10}, {nan, 10}, {50, 30}},
       {K::kNonFiniteCoordinate},
       false,
       {}},
      {"inf",
       {{10, 10}, {50, -inf}, {50, 30}},
       {K::kNonFiniteCoordinate},
       false,
       {}},
      {"huge",
       {{10, 10}, {1e30, 10}, {1e30, 30}, {10, 30}},
       {K::kHugeCoordinate, K::kOutOfImage},
       true,
       {{10, 10}, {100, 10}, {100, 30}, {10, 30}}},
      {"two_points", {{10, 10}, {50, 30}}, {K::kTooFewPoints}, false, {}},
      {"collinear", {{10, 10}, {20, 20}, {30, 30}}, {K::kZeroArea}, false, {}},
      // Symmetric: zero signed area, reported as the crossing it is.
      {"bow_tie",
       {{10, 10}, {50, 30}, {50, 10}, {10, 30}},
       {K::kSelfIntersection},
       false,
       {}},
      {"skew_bow_tie",
       {{10, 10}, {50, 30}, {50, 10}, {20, 30}},
       {K::kSelfIntersection},
       false,
       {}},
      {"repeated",
       {{10, 10}, {50, 10}, {50, 10}, {50, 30}, {10, 30}},
       {K::kRepeatedVertex},
       true,
       {{10, 10}, {50, 10}, {50, 30}, {10, 30}}},
      {"all_repeated",
       {{10, 10}, {10, 10}, {10, 10}},
       {K::kRepeatedVertex, K::kTooFewPoints},
       false,
       {}},
      {"partly_outside",
       {{-5, 10}, {50, 10}, {50, 70}, {-5, 70}},
       {K::kOutOfImage},
       true,
       {{0, 10}, {50, 10}, {50, 50}, {0, 50}}},
      {"fully_outside",
       {{110, 10}, {150, 10}, {150, 30}, {110, 30}},
       {K::kOutOfImage, K::kTooFewPoints},
       false,
       {}},
      {"on_the_border",
       {{0, 0}, {100, 0}, {100, 50}, {0, 50}},
       {},
       true,
       {{0, 0}, {100, 0}, {100, 50}, {0, 50}}},
  };
}

TEST(ValidateTest, EachDefectKindUnderEachPolicy) {
  for (const ValidateCase& c : validate_cases()) {
    SCOPED_TRACE(c.name);
    for (OnInvalid policy :
         {OnInvalid::kError, OnInvalid::kSkip, OnInvalid::kClip}) {
      ImageAnnotation img{"img.jpg", 100, 50, {{c.name, c.points, "t"}}};
      const std::vector<Defect> defects = validate(img, policy, "gt.json");
      std::vector<DefectKind> expected = c.expected;
      if (policy != OnInvalid::kClip &&
          std::string(c.name) == "fully_outside") {
        expected = {DefectKind::kOutOfImage};  // Unclamped, it has an area.
      }
      EXPECT_EQ(kinds(defects), expected)
          << "policy " << static_cast<int>(policy);
      for (const Defect& d : defects) {
        EXPECT_EQ(d.file, "gt.json");
        EXPECT_EQ(d.image, "img.jpg");
        EXPECT_EQ(d.word_id, c.name);
        EXPECT_THAT(d.message, HasSubstr("gt.json: image \"img.jpg\", word"));
        EXPECT_THAT(d.message, HasSubstr("expected"));
        EXPECT_THAT(d.message, HasSubstr("got"));
      }
      switch (policy) {
        case OnInvalid::kError:
          ASSERT_EQ(img.words.size(), 1u);
          EXPECT_EQ(img.words[0].points.size(), c.points.size());
          break;
        case OnInvalid::kSkip:
          EXPECT_EQ(img.words.size(), c.expected.empty() ? 1u : 0u);
          break;
        case OnInvalid::kClip:
          ASSERT_EQ(img.words.size(), c.kept_by_clip ? 1u : 0u);
          if (c.kept_by_clip) {
            const Polygon& got = img.words[0].points;
            ASSERT_EQ(got.size(), c.clipped.size());
            for (size_t i = 0; i < got.size(); ++i) {
              EXPECT_EQ(got[i].x, c.clipped[i].x) << i;
              EXPECT_EQ(got[i].y, c.clipped[i].y) << i;
            }
          }
          break;
      }
    }
  }
}

TEST(ValidateTest, UnknownImageSizeSkipsBoundsChecks) {
  ImageAnnotation img{"img.jpg",
                      0,
                      0,
                      {{"1", {{-5, 10}, {500, 10}, {500, 70}, {-5, 70}}, ""},
                       {"2", {{1, 1}, {1e30, 1}, {1e30, 9}, {1, 9}}, ""}}};
  const std::vector<Defect> defects = validate(img, OnInvalid::kClip, "f");
  EXPECT_THAT(kinds(defects),
              ::testing::ElementsAre(DefectKind::kHugeCoordinate));
  ASSERT_EQ(img.words.size(), 1u);  // Huge cannot be clamped without a size.
  EXPECT_EQ(img.words[0].id, "1");
  EXPECT_EQ(img.words[0].points[1].x, 500);
}

TEST(ValidateTest, LineNumbersAppearInMessages) {
  ImageAnnotation img{
      "img.jpg", 100, 50, {{"7", {{1, 1}, {2, 2}}, "", false, 7}}};
  const std::vector<Defect> defects =
      validate(img, OnInvalid::kError, "gt.txt");
  ASSERT_EQ(defects.size(), 1u);
  EXPECT_EQ(defects[0].line, 7);
  EXPECT_THAT(defects[0].message, ::testing::StartsWith("gt.txt:7: "));
}

TEST(DefectKindTest, NamesAreStableAndDistinct) {
  EXPECT_EQ(to_string(DefectKind::kNonFiniteCoordinate),
            "non_finite_coordinate");
  EXPECT_EQ(to_string(DefectKind::kBadIcdarLine), "bad_icdar_line");
  EXPECT_EQ(to_string(DefectKind::kOutOfImage), "out_of_image");
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(DefectKind::kUnreadableFile); ++k) {
    const std::string name = to_string(static_cast<DefectKind>(k));
    EXPECT_NE(name, "unknown");
    EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_"),
              std::string::npos);
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(DefectKind::kUnreadableFile) + 1);
}

TEST(DataErrorTest, SummarisesDefects) {
  const Defect a{DefectKind::kZeroArea, "f", "i", "w", 0, "first problem"};
  const DataError one({a});
  EXPECT_STREQ(one.what(), "first problem");
  const DataError two({a, a, a});
  EXPECT_STREQ(two.what(), "first problem (and 2 more defects)");
  EXPECT_EQ(two.defects().size(), 3u);
}

TEST_F(AnnotationTest, CheckImage) {
  ImageAnnotation img{"a.png", 0, 0, {}};
  EXPECT_THAT(kinds(check_image(img, (dir_ / "none.png").string(), "gt")),
              ::testing::ElementsAre(DefectKind::kMissingImage));
  const std::string junk = write("junk.png", "not an image at all");
  cv::Mat decoded(1, 1, CV_8UC3);
  EXPECT_THAT(kinds(check_image(img, junk, "gt", &decoded)),
              ::testing::ElementsAre(DefectKind::kUnreadableImage));
  EXPECT_TRUE(decoded.empty());

  const std::string png = (dir_ / "a.png").string();
  ASSERT_TRUE(cv::imwrite(png, cv::Mat(10, 20, CV_8UC3, cv::Scalar(1, 2, 3))));
  EXPECT_TRUE(check_image(img, png, "gt", &decoded).empty());
  EXPECT_EQ(img.width, 20);  // Filled in from the decoded image.
  EXPECT_EQ(img.height, 10);
  EXPECT_EQ(decoded.size(), cv::Size(20, 10));

  ImageAnnotation rotated{"a.png", 10, 20, {}};  // Width/height swapped.
  const std::vector<Defect> d = check_image(rotated, png, "gt");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, DefectKind::kImageSizeMismatch);
  EXPECT_THAT(d[0].message, HasSubstr("expected a decoded size of 10x20"));
  EXPECT_THAT(d[0].message, HasSubstr("got 20x10"));
}

}  // namespace
}  // namespace dbh::model

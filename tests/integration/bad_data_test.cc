// The bad-data catalogue (fixtures/bad/, see its README.md): `dbh data check`
// on every entry must exit with the recorded code and report exactly the
// recorded defects, each with a message that says where and what.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::run_process;

fs::path catalogue_dir() { return fs::path(DBH_SOURCE_DIR) / "fixtures" / "bad"; }

// Entry folders (those with an expected.json), sorted by name.
std::vector<std::string> catalogue_entries() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(catalogue_dir(), ec)) {
    if (e.is_directory() && fs::exists(e.path() / "expected.json")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A test name gtest accepts: letters, digits and underscores.
std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);  // Throws (and fails the test) if missing or invalid.
}

// Whether `actual` (one entry of the summary's "defects") is `want`: same
// kind, image and word id, and a message containing the fragment.
bool matches(const json& actual, const json& want) {
  const auto field = [](const json& j, const char* key) {
    return j.value(key, std::string());
  };
  return field(actual, "kind") == field(want, "kind") &&
         field(actual, "image") == field(want, "image") &&
         field(actual, "word_id") == field(want, "word_id") &&
         field(actual, "message").find(field(want, "message_contains")) != std::string::npos;
}

class BadDataTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BadDataTest, CheckReportsTheExpectedDefects) {
  const std::string name = GetParam();
  const fs::path dir = catalogue_dir() / name;
  const json expected = read_json(dir / "expected.json");
  const fs::path summary_path =
      fs::path(::testing::TempDir()) / ("dbh-bad-data-" + name + ".json");
  fs::remove(summary_path);

  const auto r = run_process({DBH_BINARY, "data", "check", dir.string(), "--json",
                              summary_path.string()},
                             DBH_SOURCE_DIR, 120);
  const std::string output = "stdout:\n" + r.out + "stderr:\n" + r.err;
  ASSERT_FALSE(r.timed_out) << output;
  ASSERT_EQ(r.term_signal, 0) << output;
  EXPECT_EQ(r.exit_code, expected.at("exit_code").get<int>())
      << expected.value("description", "") << "\n" << output;

  ASSERT_TRUE(fs::exists(summary_path)) << output;
  const json summary = read_json(summary_path);
  EXPECT_EQ(summary.at("exit_code").get<int>(), r.exit_code);
  const json& actual = summary.at("defects");
  const json& wanted = expected.at("defects");

  for (const json& want : wanted) {
    const bool found = std::any_of(actual.begin(), actual.end(),
                                   [&](const json& a) { return matches(a, want); });
    EXPECT_TRUE(found) << "expected defect not reported:\n"
                       << want.dump(2) << "\nreported:\n" << actual.dump(2);
  }
  // Nothing beyond the catalogued defects (a clean entry stays clean).
  EXPECT_EQ(actual.size(), wanted.size()) << "reported:\n" << actual.dump(2);
  fs::remove(summary_path);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadDataTest, ::testing::ValuesIn(catalogue_entries()),
                         test_name);

// Entries whose data is ambiguous (an image annotated twice) or leaves the
// dataset folder: no policy reads them. `dbh data check` exits 2 under
// --on-invalid skip too, and `dbh train` and `dbh data show` refuse them with
// exit 2 and the catalogued message, writing nothing.
TEST(BadDataRefusalTest, RefusedEntriesStopEveryReaderWithExitTwo) {
  const fs::path tmp = fs::path(::testing::TempDir()) / "dbh-bad-data-refused";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const std::string name : {"json_duplicate_image_key", "json_duplicate_word_id", "duplicate_image_two_names",
                                 "icdar_duplicate_gt", "image_path_parent_escape", "image_path_absolute"}) {
    const fs::path dir = catalogue_dir() / name;
    const json expected = read_json(dir / "expected.json");
    ASSERT_FALSE(expected.at("defects").empty()) << name;
    const std::string fragment = expected["defects"][0].at("message_contains").get<std::string>();

    const auto check = run_process({DBH_BINARY, "data", "check", dir.string(), "--on-invalid", "skip"}, DBH_SOURCE_DIR,
                                   120);
    EXPECT_EQ(check.exit_code, 2) << name << "\n" << check.out << check.err;
    EXPECT_NE(check.out.find(fragment), std::string::npos) << name << "\n" << check.out;

    const fs::path shown = tmp / (name + "-show");
    const auto show = run_process({DBH_BINARY, "data", "show", dir.string(), "--index", "0", "--out", shown.string()},
                                  DBH_SOURCE_DIR, 120);
    EXPECT_EQ(show.exit_code, 2) << name << "\n" << show.out << show.err;
    EXPECT_NE(show.err.find(fragment), std::string::npos) << name << "\n" << show.err;
    EXPECT_FALSE(fs::exists(shown)) << name;

    const fs::path trained = tmp / (name + "-train");
    const auto train = run_process({DBH_BINARY, "train", "--data", dir.string(), "--steps", "1", "--size", "64",
                                    "--out", trained.string()},
                                   DBH_SOURCE_DIR, 300);
    EXPECT_EQ(train.exit_code, 2) << name << "\n" << train.out << train.err;
    EXPECT_NE(train.err.find(fragment), std::string::npos) << name << "\n" << train.err;
    // No training output: at most the folder's ownership record (dbh train
    // claims --out before it reads the data).
    if (fs::exists(trained)) {
      for (const auto& e : fs::directory_iterator(trained)) {
        EXPECT_EQ(e.path().filename(), ".dbh-owner") << name;
      }
    }
  }
  fs::remove_all(tmp);
}

// Links in a dataset are the user's (an images/ folder on another disk): a
// link under images/ is read where it leads. A name the annotations write
// must stay inside the dataset folder: an absolute name in a sibling folder
// whose name extends the dataset's is outside it.
TEST(BadDataRefusalTest, LinksAreFollowedAndANameLeavingTheDatasetIsRefused) {
  const fs::path tmp = fs::weakly_canonical(fs::path(::testing::TempDir())) /
                       ("dbh-bad-data-link-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp / "secret");
  fs::copy(catalogue_dir() / "icdar_bom_crlf_ok", tmp / "ds", fs::copy_options::recursive);
  fs::rename(tmp / "ds" / "images" / "img_1.png", tmp / "secret" / "img_1.png");
  fs::create_symlink(tmp / "secret" / "img_1.png", tmp / "ds" / "images" / "img_1.png");
  const auto linked = run_process({DBH_BINARY, "data", "check", (tmp / "ds").string()}, DBH_SOURCE_DIR, 120);
  EXPECT_EQ(linked.exit_code, 0) << linked.out << linked.err;

  fs::copy(fs::path(DBH_SOURCE_DIR) / "fixtures" / "real", tmp / "ufo", fs::copy_options::recursive);
  fs::create_directories(tmp / "ufo2");
  json annotations = read_json(tmp / "ufo" / "annotations.json");
  const std::string first = annotations["images"].begin().key();
  fs::copy(tmp / "ufo" / "images" / first, tmp / "ufo2" / first);
  const std::string outside = (tmp / "ufo2" / first).string();
  annotations["images"][outside] = annotations["images"][first];
  std::ofstream(tmp / "ufo" / "annotations.json") << annotations.dump(1);
  const fs::path summary_path = tmp / "check.json";
  const auto r = run_process({DBH_BINARY, "data", "check", (tmp / "ufo").string(), "--json", summary_path.string()},
                             DBH_SOURCE_DIR, 120);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  const json summary = read_json(summary_path);
  ASSERT_EQ(summary.at("defects").size(), 1u) << summary.dump(2);
  const json& d = summary["defects"][0];
  EXPECT_EQ(d.at("kind"), "outside_dataset");
  EXPECT_EQ(d.at("image"), outside);
  EXPECT_NE(d.at("message").get<std::string>().find("expected a file inside the dataset folder " +
                                                    (tmp / "ufo").string() + ", got an absolute path that leads out of it, to " +
                                                    outside),
            std::string::npos)
      << d.dump();
  fs::remove_all(tmp);
}

TEST(BadDataCatalogueTest, HasAtLeastFifteenEntries) {
  const auto names = catalogue_entries();
  std::ostringstream list;
  for (const auto& n : names) list << n << "\n";
  EXPECT_GE(names.size(), 15u) << "entries in " << catalogue_dir() << ":\n" << list.str();
}

}  // namespace
}  // namespace dbh

// The bad-data catalogue (fixtures/bad/, see its README.md): `dbh data check`
// on every entry must exit with the recorded code and report exactly the
// recorded defects, each with a message that says where and what.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

TEST(BadDataCatalogueTest, HasAtLeastFifteenEntries) {
  const auto names = catalogue_entries();
  std::ostringstream list;
  for (const auto& n : names) list << n << "\n";
  EXPECT_GE(names.size(), 15u) << "entries in " << catalogue_dir() << ":\n" << list.str();
}

}  // namespace
}  // namespace dbh

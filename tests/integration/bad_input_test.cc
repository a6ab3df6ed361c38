// The bad-input catalogue (tests/bad_input/): every entry exits with its
// recorded code and message, through the real binary, and leaves nothing
// half-written behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DBH_SOURCE_DIR) / "tests" / "bad_input";

std::vector<nlohmann::json> cases() {
  std::ifstream in(kDir / "cases.json");
  const auto j = nlohmann::json::parse(in);
  return std::vector<nlohmann::json>(j.begin(), j.end());
}

class BadInputTest : public ::testing::TestWithParam<nlohmann::json> {};

TEST_P(BadInputTest, ExitsWithItsRecordedCodeAndMessage) {
  const auto& c = GetParam();
  const fs::path out = fs::path(::testing::TempDir()) / ("dbh-bad-" + c["name"].get<std::string>());
  fs::remove_all(out);
  std::vector<std::string> args = {DBH_BINARY};
  bool has_out = false;
  for (const auto& a : c["args"]) {
    std::string s = a.get<std::string>();
    if (!s.empty() && s[0] == '@') s = (kDir / s.substr(1)).lexically_normal().string();
    has_out = has_out || s == "--out";
    args.push_back(s);
  }
  const std::string cmd = args.size() > 1 ? args[1] : "";
  if (!has_out && (cmd == "run" || cmd == "suite")) {
    args.push_back("--out");
    args.push_back(out.string());
  }
  const auto r = testing::run_process(args, DBH_SOURCE_DIR, 120);
  EXPECT_EQ(r.exit_code, c["exit"].get<int>()) << r.out << r.err;
  const std::string message = c["message"];
  EXPECT_NE((r.err + r.out).find(message), std::string::npos) << "expected: " << message << "\ngot: " << r.err << r.out;
  EXPECT_FALSE(fs::exists(out)) << "something was written to " << out;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInputTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<nlohmann::json>& info) {
                           return info.param["name"].get<std::string>();
                         });

TEST(BadInputCatalogueTest, CoversTheListedKinds) { EXPECT_GE(cases().size(), 20u); }

}  // namespace
}  // namespace dbh

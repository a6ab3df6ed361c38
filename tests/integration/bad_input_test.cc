// The bad-input catalogue (tests/bad_input/): every entry exits with its
// recorded code and message, through the real binary, and leaves nothing
// half-written behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

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

// A full disk: a tmpfs of `kb` KiB mounted for the duration of a case.
class SmallDisk {
 public:
  explicit SmallDisk(fs::path dir) : dir_(std::move(dir)) {}
  ~SmallDisk() {
    if (mounted_) testing::run_process({"/bin/umount", dir_.string()}, "", 30);
    fs::remove_all(dir_);
  }
  // Empty when mounted, else why not.
  std::string mount(int kb) {
    fs::create_directories(dir_);
    const auto r = testing::run_process(
        {"/bin/mount", "-t", "tmpfs", "-o", "size=" + std::to_string(kb) + "k", "dbh-full-disk", dir_.string()}, "", 30);
    mounted_ = r.exit_code == 0;
    return mounted_ ? "" : "cannot mount a " + std::to_string(kb) + " KiB tmpfs (needs root): " + r.err;
  }

 private:
  fs::path dir_;
  bool mounted_ = false;
};

TEST_P(BadInputTest, ExitsWithItsRecordedCodeAndMessage) {
  const auto& c = GetParam();
  fs::path out = fs::path(::testing::TempDir()) / ("dbh-bad-" + c["name"].get<std::string>());
  fs::remove_all(out);
  std::optional<SmallDisk> disk;
  if (c.contains("full_disk_kb")) {
    disk.emplace(fs::path(::testing::TempDir()) / ("dbh-disk-" + c["name"].get<std::string>()));
    if (const auto why = disk->mount(c["full_disk_kb"].get<int>()); !why.empty()) GTEST_SKIP() << why;
    out = fs::path(::testing::TempDir()) / ("dbh-disk-" + c["name"].get<std::string>()) / "out";
  }
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
  if (c.contains("full_disk_kb") && fs::exists(out)) {
    // A suite keeps its journal (complete, fsync'd lines) and nothing else.
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      if (e.is_directory()) continue;
      ASSERT_EQ(e.path().filename(), "journal.jsonl") << "half-written file left: " << e.path();
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << e.path() << ": " << line;
      }
    }
    return;
  }
  EXPECT_FALSE(fs::exists(out)) << "something was written to " << out;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInputTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<nlohmann::json>& info) {
                           return info.param["name"].get<std::string>();
                         });

TEST(BadInputCatalogueTest, CoversTheListedKinds) { EXPECT_GE(cases().size(), 20u); }

}  // namespace
}  // namespace dbh

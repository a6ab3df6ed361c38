// The data path through the real binary on the real fixtures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

testing::ProcessResult dbh(std::vector<std::string> args) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process(args, DBH_SOURCE_DIR, 600);
}

// A folder of the test's own (unique, so checkouts testing side by side never
// share one), removed when the test ends.
using Dir = testing::ScratchDir;

TEST(DataCommandTest, RealFixturesCheckClean) {
  const Dir dir("dbh-data-check");
  const auto r = dbh({"data", "check", "fixtures/real", "--json", (dir / "check.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(dir / "check.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_GE(j["images_usable"].get<int>(), 8);
  EXPECT_GE(j["words"].get<int>(), 100);
  EXPECT_TRUE(j["defects"].empty());
  // The ICDAR copy of the same annotations reads the same.
  const Dir icdar_dir("dbh-data-icdar");
  const fs::path real = fs::path(DBH_SOURCE_DIR) / "fixtures" / "real";
  fs::copy(real / "images", icdar_dir / "images");
  fs::copy(real / "icdar", icdar_dir / "icdar");
  const auto r2 = dbh({"data", "check", icdar_dir.string()});
  EXPECT_EQ(r2.exit_code, 0) << r2.out;
  EXPECT_NE(r2.out.find("ICDAR 2015 txt"), std::string::npos);
}

TEST(DataCommandTest, ShowWritesInputMapsAndOverlay) {
  const Dir tmp("dbh-data-show");
  const fs::path dir = tmp / "out";
  const auto r = dbh({"data", "show", "fixtures/real", "--index", "1", "--size", "256", "--out", dir.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* f : {"input.png", "overlay.png", "gt_shrink.npy", "gt_shrink_mask.npy", "gt_thresh.npy",
                        "gt_thresh_mask.npy", "gt_shrink.png", "gt_thresh.png"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  }
  // A float32 256×256 .npy: 128-byte header + 256·256·4 bytes.
  EXPECT_EQ(fs::file_size(dir / "gt_thresh.npy"), 128u + 256u * 256u * 4u);
  std::ifstream npy(dir / "gt_thresh.npy", std::ios::binary);
  std::string magic(6, '\0');
  npy.read(magic.data(), 6);
  EXPECT_EQ(magic, "\x93NUMPY");
  EXPECT_EQ(dbh({"data", "show", "fixtures/real", "--index", "99", "--out", dir.string()}).exit_code, 2);
  EXPECT_EQ(dbh({"data", "show", "fixtures/real", "--index", "0", "--size", "100", "--out", dir.string()}).exit_code, 2);
}

TEST(DataCommandTest, TrainingOnRealFixturesReducesTheLoss) {
  const Dir dir("dbh-data-train");
  // 20 steps at 64 px: the last five losses average about half the first
  // five (0.49; 0.41 over 30 steps at 128 px), far below the 0.7 asked.
  const auto r = dbh({"train", "--data", "fixtures/real", "--steps", "20", "--size", "64", "--optimizer", "adam",
                      "--lr", "0.001", "--threads", "2", "--out", (dir / "out").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream csv(dir / "out" / "metrics.csv");
  std::string line;
  std::getline(csv, line);  // header: the loss column by its name
  ASSERT_EQ(line.rfind("run,step,loss,", 0), 0u) << line;
  std::vector<double> losses;
  while (std::getline(csv, line)) {
    std::istringstream row(line);
    std::string run, step, loss;
    std::getline(row, run, ',');
    std::getline(row, step, ',');
    std::getline(row, loss, ',');
    losses.push_back(std::stod(loss));
  }
  ASSERT_EQ(losses.size(), 20u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[static_cast<size_t>(i)], last += losses[losses.size() - 1 - static_cast<size_t>(i)];
  EXPECT_LT(last, 0.7 * first) << "first five " << first / 5 << ", last five " << last / 5;
}

TEST(DataCommandTest, EveryDataSourceTrains) {
  for (const char* source : {"synthetic_random", "synthetic_boxes", "synthetic_render"}) {
    const Dir dir(std::string("dbh-data-source-") + source);
    const auto r = dbh({"run", "scenarios/base/tiny-cpu.yaml", std::string("data.source=") + source, "data.size=96",
                        "train.max_steps=2", "--out", (dir / "out").string(), "-q"});
    EXPECT_EQ(r.exit_code, 0) << source << ": " << r.out << r.err;
    std::ifstream in(dir / "out" / "report.json");
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["steps_completed"], 2) << source;
    EXPECT_EQ(j["scenario"]["resolved"]["data"]["source"], source);
  }
}

}  // namespace
}  // namespace dbh

// Drives the real dbh binary the way a user does.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

testing::ProcessResult dbh(std::vector<std::string> args, double timeout_s = 600) {
  args.insert(args.begin(), DBH_BINARY);
  return run_process(args, DBH_SOURCE_DIR, timeout_s);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = dbh::testing::removed_at_exit(fs::path(::testing::TempDir()) / ("dbh-it-" + name));
  fs::remove_all(dir);
  return dir;
}

TEST(CliTest, HelpListsCommandsAndExitsZero) {
  const auto r = dbh({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("env"), std::string::npos);
  EXPECT_NE(r.out.find("train"), std::string::npos);
}

TEST(CliTest, VersionPrintsTheVersionFile) {
  std::ifstream in(std::string(DBH_SOURCE_DIR) + "/VERSION");
  std::string version;
  in >> version;
  const auto r = dbh({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("dbh " + version), std::string::npos) << r.out;
}

TEST(CliTest, EnvReportsLibraryVersionsAndMachine) {
  const auto r = dbh({"env", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("torch_version").get<std::string>().substr(0, 4), "2.11");
  EXPECT_FALSE(j.at("opencv_version").get<std::string>().empty());
  EXPECT_FALSE(j.at("cpu_model").get<std::string>().empty());
  EXPECT_GT(j.at("ram_bytes").get<int64_t>(), 0);
  EXPECT_FALSE(j.at("kernel").get<std::string>().empty());
  EXPECT_FALSE(j.at("os").get<std::string>().empty());
  const auto text = dbh({"env"});
  EXPECT_NE(text.out.find("cuDNN:"), std::string::npos);
}

TEST(CliTest, UnknownCommandIsAUsageError) {
  const auto r = dbh({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliTest, BadOptionValueIsAUsageError) {
  EXPECT_EQ(dbh({"train", "--encoder", "101"}).exit_code, 2);
  const auto r = dbh({"train", "--size", "100", "--out", fresh_dir("badsize").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("multiple of 32"), std::string::npos) << r.err;
}

TEST(CliTest, TrainsOnSyntheticDataAndWritesItsOutput) {
  const auto out = fresh_dir("train-synthetic");
  const auto r = dbh({"train", "--steps", "3", "--size", "64", "--batch-size", "2",
                      "--threads", "2", "--checkpoint-every", "2", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("output: "), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "checkpoint-final.pt"));
  // Note [Checkpoint names]: the periodic ones named as `dbh run` names them.
  EXPECT_TRUE(fs::exists(out / "checkpoint-r0-s2.pt"));
  // Note [One metrics.csv]: the columns `dbh run` writes, a row per step.
  std::ifstream csv(out / "metrics.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "run,step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,rss_bytes,loss_bits,hmean,"
                      "precision,recall");
  EXPECT_EQ(lines[3].rfind("0,2,", 0), 0u) << lines[3];
  EXPECT_EQ(lines[3].substr(lines[3].size() - 3), ",,,") << lines[3];  // no validation ran
  std::ifstream in(out / "summary.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("steps_completed").get<int>(), 3);
  EXPECT_TRUE(j.at("all_losses_finite").get<bool>());
}

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// SIGTERM (or Ctrl-C) in the middle of `dbh train`: exit 128 + signal, and the
// folder it claimed (lock, metrics, checkpoints) is removed, never left
// half-written.
TEST(CliTest, InterruptedTrainingLeavesNothingBehind) {
  const auto out = fresh_dir("train-interrupted");
  const auto log = fresh_dir("train-interrupted.log");
  const pid_t pid = testing::spawn_process({DBH_BINARY, "train", "--steps", "100000", "--size", "64",
                                            "--batch-size", "1", "--threads", "2", "--checkpoint-every", "1",
                                            "--out", out.string()},
                                           DBH_SOURCE_DIR, log.string());
  bool started = false;
  for (int i = 0; i < 1200 && !started; ++i) {
    started = file_text(log).find("step    2/") != std::string::npos;
    if (!started) ::usleep(100 * 1000);
  }
  ASSERT_TRUE(started) << file_text(log);
  ::kill(pid, SIGTERM);
  const auto r = testing::wait_process(pid, 120);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << file_text(log);
  EXPECT_NE(file_text(log).find("interrupted by SIGTERM"), std::string::npos) << file_text(log);
  EXPECT_FALSE(fs::exists(out)) << "an interrupted training left " << out;
  fs::remove(log);
}

}  // namespace
}  // namespace dbh

// Note [The same state, step by step]: the states a reference keeps beside
// it, moved from the trial whole, never through a link, never stale.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/numerics/states.h"
#include "tests/support/files.h"

namespace dbh::harness::numerics {
namespace {
namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(NumericsStatesTest, TheTrialsStatesAreMovedBesideTheReference) {
  const testing::ScratchDir dir("dbh-states-kept");
  const fs::path trial = dir.path() / "trial";
  fs::create_directories(trial);
  for (int k = 0; k < 3; ++k) write(trial / ("state-s" + std::to_string(k) + ".pt"), "state " + std::to_string(k));
  const std::string ref = (dir.path() / "ref.json").string();
  EXPECT_EQ(keep_states(trial.string(), ref, {0, 1, 2}), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(states_folder(ref), ref + ".states");
  EXPECT_TRUE(fs::is_regular_file(fs::path(ref + ".states") / "state-s2.pt"));
  EXPECT_FALSE(fs::exists(trial / "state-s0.pt"));
  // Recording again with none saved leaves no stale states behind.
  EXPECT_NO_THROW(check_states_folder(ref));
  EXPECT_TRUE(keep_states(trial.string(), ref, {0, 1, 2}).empty());
  EXPECT_FALSE(fs::exists(ref + ".states"));
}

TEST(NumericsStatesTest, ALinkEndsTheStatesKept) {
  const testing::ScratchDir dir("dbh-states-link");
  const fs::path trial = dir.path() / "trial";
  fs::create_directories(trial);
  write(trial / "state-s0.pt", "0");
  write(dir.path() / "secret", "not a state");
  fs::create_symlink(dir.path() / "secret", trial / "state-s1.pt");
  write(trial / "state-s2.pt", "2");
  const std::string ref = (dir.path() / "ref.json").string();
  EXPECT_EQ(keep_states(trial.string(), ref, {0, 1, 2}), (std::vector<int64_t>{0}));
  EXPECT_FALSE(fs::exists(fs::path(ref + ".states") / "state-s1.pt"));
  EXPECT_TRUE(fs::exists(dir.path() / "secret"));
}

TEST(NumericsStatesTest, AFolderThatHoldsAnythingElseIsNeverReplaced) {
  const testing::ScratchDir dir("dbh-states-foreign");
  const std::string ref = (dir.path() / "ref.json").string();
  fs::create_directories(ref + ".states");
  write(fs::path(ref + ".states") / "notes.txt", "mine");
  try {
    check_states_folder(ref);
    ADD_FAILURE() << "accepted a folder of the user's";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(ref + ".states to be absent or a folder of states"), std::string::npos)
        << e.what();
  }
  fs::remove(fs::path(ref + ".states") / "notes.txt");
  fs::create_symlink(dir.path(), fs::path(ref + ".states") / "state-s0.pt");
  EXPECT_THROW(check_states_folder(ref), UsageError);
}

}  // namespace
}  // namespace dbh::harness::numerics

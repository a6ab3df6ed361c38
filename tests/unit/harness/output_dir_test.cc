// A command run again into its own output folder (harness/common/output_dir,
// Note [A re-run replaces the previous outputs]): the folder ends with the new
// run's outputs or the previous run's, never a mix, whether the new run
// completes, fails or is killed outright; files the user put there are never
// touched; a resumed suite keeps what it continues.
#include "harness/common/output_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "harness/common/error.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using dbh::testing::read_text;
using dbh::testing::ScratchDir;
using dbh::testing::write_text;

// The entries of `dir`, dbh's bookkeeping (.dbh-owner, .dbh-made) included.
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// A first run that wrote a.txt, b.txt and a folder, then a file of the user's.
fs::path first_run(const fs::path& root) {
  const fs::path out = root / "out";
  {
    OutputDir claim(out, "run x");
    write_text(out / "a.txt", "a of run 1");
    write_text(out / "b.txt", "b of run 1");
    fs::create_directories(out / "main");
    write_text(out / "main" / "events.jsonl", "events of run 1");
    claim.commit();
  }
  write_text(out / "notes.txt", "the user's");
  return out;
}

const std::set<std::string> kFirst = {".dbh-made", ".dbh-owner", "a.txt", "b.txt", "main", "notes.txt"};

TEST(OutputReuseTest, ACompletedReRunReplacesThePreviousOutputsAndKeepsTheUsersFiles) {
  ScratchDir root("dbh-outdir-replace");
  const fs::path out = first_run(root.path());
  {
    OutputDir claim(out, "run x");
    // The previous outputs are out of sight while the new run writes.
    EXPECT_FALSE(fs::exists(out / "a.txt"));
    EXPECT_FALSE(fs::exists(out / "main"));
    EXPECT_EQ(read_text(out / "notes.txt"), "the user's");
    write_text(out / "a.txt", "a of run 2");
    claim.commit();
  }
  // b.txt and main/ were the previous run's only: gone, not mixed in.
  EXPECT_EQ(entries(out), (std::set<std::string>{".dbh-made", ".dbh-owner", "a.txt", "notes.txt"}));
  EXPECT_EQ(read_text(out / "a.txt"), "a of run 2");
  EXPECT_EQ(read_text(out / ".dbh-made"), "a.txt\n");
  // A third run replaces run 2's outputs, and still not the user's file.
  {
    OutputDir claim(out, "run x");
    claim.commit();
  }
  EXPECT_EQ(entries(out), (std::set<std::string>{".dbh-made", ".dbh-owner", "notes.txt"}));
}

TEST(OutputReuseTest, AFailedReRunLeavesThePreviousOutputsAsTheyWere) {
  ScratchDir root("dbh-outdir-fail");
  const fs::path out = first_run(root.path());
  {
    OutputDir claim(out, "run x");
    write_text(out / "a.txt", "a of run 2, half written");
    write_text(out / "c.txt", "c of run 2");
    // No commit: an error, an exception.
  }
  EXPECT_EQ(entries(out), kFirst);
  EXPECT_EQ(read_text(out / "a.txt"), "a of run 1");
  EXPECT_EQ(read_text(out / "main" / "events.jsonl"), "events of run 1");
  EXPECT_EQ(read_text(out / "notes.txt"), "the user's");
}

// What a search stopped by Ctrl-C keeps (probe::run_search) is decided by
// whether it has written anything yet: the user's files and the previous
// run's outputs (set aside) are not this command's output.
TEST(OutputReuseTest, ARunHoldsNewOutputOnlyOnceItWritesSomething) {
  ScratchDir root("dbh-outdir-new-output");
  const fs::path out = first_run(root.path());
  {
    OutputDir claim(out, "run x");
    EXPECT_FALSE(claim.holds_new_output());
    write_text(out / "interrupted.json", "{}");
    EXPECT_TRUE(claim.holds_new_output());
  }
  OutputDir fresh(root.path() / "fresh", "run y");
  EXPECT_FALSE(fresh.holds_new_output());
}

// A command killed outright runs no destructor: the next claim of the folder
// finishes its failure path before anything else.
TEST(OutputReuseTest, AReRunKilledOutrightIsUndoneByTheNextClaim) {
  ScratchDir root("dbh-outdir-killed");
  const fs::path out = first_run(root.path());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto* claim = new OutputDir(out, "run x");  // never destroyed
    (void)claim;
    write_text(out / "a.txt", "a of run 2, half written");
    fs::create_directories(out / "main");
    write_text(out / "c.txt", "c of run 2");
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  // Killed: the previous outputs are set aside, never beside the new ones.
  EXPECT_FALSE(fs::exists(out / "b.txt"));
  EXPECT_TRUE(fs::exists(out / ".dbh-previous" / "b.txt"));
  {
    OutputDir claim(out, "run x");
    // The killed run is undone and the previous outputs set aside again for
    // this one.
    EXPECT_FALSE(fs::exists(out / "c.txt"));
    EXPECT_TRUE(fs::exists(out / ".dbh-previous" / "a.txt"));
    EXPECT_EQ(read_text(out / ".dbh-previous" / "a.txt"), "a of run 1");
    // This one fails too.
  }
  EXPECT_EQ(entries(out), kFirst);
  EXPECT_EQ(read_text(out / "a.txt"), "a of run 1");
  EXPECT_EQ(read_text(out / "main" / "events.jsonl"), "events of run 1");
  EXPECT_EQ(read_text(out / "notes.txt"), "the user's");
}

TEST(OutputReuseTest, AContinuedFolderKeepsWhatItContinues) {
  ScratchDir root("dbh-outdir-continue");
  const fs::path out = first_run(root.path());
  {
    OutputDir claim(out, "run x", OutputDir::Reuse::kContinue);
    EXPECT_EQ(read_text(out / "a.txt"), "a of run 1");
    write_text(out / "c.txt", "c of run 2");
    claim.commit();
  }
  EXPECT_EQ(entries(out), (std::set<std::string>{".dbh-made", ".dbh-owner", "a.txt", "b.txt", "c.txt", "main",
                                                 "notes.txt"}));
  // What both runs made is dbh's: a later replacing run sets it all aside.
  EXPECT_EQ(read_text(out / ".dbh-made"), "a.txt\nb.txt\nc.txt\nmain\n");
}

// A run that continues from its own folder (a checkpoint of the previous run
// to resume from) keeps that input in place while the rest is set aside.
TEST(OutputReuseTest, AnInputInsideThePreviousOutputsStaysInPlace) {
  ScratchDir root("dbh-outdir-input");
  const fs::path out = first_run(root.path());
  {
    OutputDir claim(out, "run x", OutputDir::Reuse::kReplace, {(out / "main" / "events.jsonl").string()});
    EXPECT_EQ(read_text(out / "main" / "events.jsonl"), "events of run 1");
    EXPECT_FALSE(fs::exists(out / "a.txt"));
    claim.commit();
  }
  EXPECT_TRUE(fs::exists(out / "main" / "events.jsonl"));
  EXPECT_FALSE(fs::exists(out / "b.txt"));
}

// A name in .dbh-made is an entry of the folder, never a path: a list edited
// to name something outside moves nothing out of place.
TEST(OutputReuseTest, AListNamingAPathOutsideTheFolderMovesNothing) {
  ScratchDir root("dbh-outdir-list");
  const fs::path out = first_run(root.path());
  write_text(root.path() / "precious.txt", "keep");
  write_text(out / ".dbh-made", "../precious.txt\n/etc/passwd\n..\n.\n.dbh-owner\na.txt\n");
  {
    OutputDir claim(out, "run x");
    EXPECT_FALSE(fs::exists(out / "a.txt"));
    EXPECT_TRUE(fs::exists(out / "b.txt"));  // not listed: kept as if the user's
    claim.commit();
  }
  EXPECT_EQ(read_text(root.path() / "precious.txt"), "keep");
  EXPECT_TRUE(fs::exists("/etc/passwd"));
  EXPECT_TRUE(fs::exists(out / ".dbh-owner"));
  EXPECT_TRUE(fs::exists(out / "b.txt"));
}

}  // namespace
}  // namespace dbh::harness

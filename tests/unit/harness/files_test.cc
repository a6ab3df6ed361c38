// A file's state for in-process cache keys (harness/common/files.cc,
// file_state): what a user can do to a file without changing its
// modification time and size still changes its state.
#include "harness/common/files.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using dbh::testing::fresh_dir;
using dbh::testing::removed_at_exit;
using dbh::testing::write_text;

// Gives `path` the modification time of `like` (touch -r).
void copy_mtime(const fs::path& like, const fs::path& path) {
  struct stat st {};
  ASSERT_EQ(::stat(like.c_str(), &st), 0);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(FileState, StaysWhileNothingChangesAndNamesAMissingFile) {
  const fs::path dir = removed_at_exit(fresh_dir("dbh-file-state"));
  const fs::path a = dir / "annotations.json";
  const std::string missing = file_state(a.string());
  EXPECT_EQ(file_state(a.string()), missing);
  write_text(a, "[1, 2]");
  const std::string written = file_state(a.string());
  EXPECT_NE(written, missing);
  EXPECT_EQ(file_state(a.string()), written);
  EXPECT_EQ(file_state((dir / "." / "annotations.json").string()), written);  // one resolved name
}

// A copy made with the same size and modification time (cp -p, rsync -t,
// touch -r) renamed over the file is another file: a cache keyed by the
// state must not answer for it.
TEST(FileState, ChangesWhenAFileIsReplacedKeepingItsTimeAndSize) {
  const fs::path dir = removed_at_exit(fresh_dir("dbh-file-state"));
  const fs::path a = dir / "annotations.json";
  write_text(a, "[1, 2]");
  const std::string before = file_state(a.string());
  const fs::path b = dir / "annotations.json.new";
  write_text(b, "[3, 4]");
  copy_mtime(a, b);
  fs::rename(b, a);
  EXPECT_EQ(fs::file_size(a), 6u);
  EXPECT_NE(file_state(a.string()), before);
}

// Note [dbh owns its names]: a bare program name is found in the PATH the
// program is started with, its relative folders in the program's working
// directory; a name with a slash is that file.
TEST(FindProgram, LooksInTheGivenPathRelativeToTheWorkingDirectory) {
  const fs::path dir = fresh_dir("dbh-find-program");
  removed_at_exit(dir);
  fs::create_directories(dir / "own" / "bin");
  fs::create_directories(dir / "other");
  for (const auto& p : {dir / "own" / "bin" / "tool", dir / "other" / "tool"}) {
    write_text(p, "#!/bin/sh\n");
    fs::permissions(p, fs::perms::owner_all);
  }
  write_text(dir / "other" / "plain", "not executable");
  EXPECT_EQ(find_program("tool", (dir / "own" / "bin").string() + ":" + (dir / "other").string(), "/"),
            (dir / "own" / "bin" / "tool").string());
  EXPECT_EQ(find_program("tool", std::string("/nonexistent:bin"), (dir / "own").string()),
            (dir / "own" / "bin" / "tool").string());
  EXPECT_EQ(find_program("plain", (dir / "other").string(), "/"), "");
  EXPECT_EQ(find_program("tool", std::string("/nonexistent"), "/"), "");
  EXPECT_EQ(find_program("sh", std::nullopt, "/"), "/bin/sh");  // glibc's default PATH when unset
  EXPECT_EQ(find_program("./x", std::string("/bin"), dir.string()), (dir / "./x").string());
}

}  // namespace
}  // namespace dbh::harness

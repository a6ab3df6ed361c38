// dbh writes nowhere but its output and cache folders: the dataset, the
// scenario files and the working directory are byte-for-byte and
// timestamp-for-timestamp the same after a run with a data fault, a
// bisection and a suite, and no process outlives the command.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::write_text;

fs::path fresh_dir(const std::string& name) { return testing::fresh_dir("dbh-footprint-" + name); }

// Path → type, size, mtime and the first bytes' checksum, for every entry
// outside the folders dbh may write.
std::map<std::string, std::string> snapshot(const fs::path& root, const std::vector<std::string>& writable) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = it->path().lexically_relative(root).string();
    if (std::find(writable.begin(), writable.end(), rel) != writable.end()) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    ::lstat(it->path().c_str(), &st);
    uint64_t sum = 0;
    if (S_ISREG(st.st_mode)) {
      std::ifstream in(it->path(), std::ios::binary);
      for (char c; in.get(c);) sum = sum * 131 + static_cast<unsigned char>(c);
    }
    out[rel] = std::to_string(st.st_mode) + ":" + std::to_string(st.st_size) + ":" +
               std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
               std::to_string(sum);
  }
  return out;
}

TEST(FootprintTest, RunBisectionAndSuiteWriteOnlyTheirOutputAndCache) {
  const fs::path dir = fresh_dir("all");
  // A dataset whose annotation names one image by an absolute path, as some
  // exports do, and a fault that truncates that very image: only the run's
  // private copy may change.
  fs::copy(fs::path(DBH_SOURCE_DIR) / "fixtures" / "real", dir / "data", fs::copy_options::recursive);
  {
    std::ifstream in(dir / "data" / "annotations.json");
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const std::string key = "\"img_002.png\"";
    const auto at = json.find(key);
    ASSERT_NE(at, std::string::npos);
    json.replace(at, key.size(), "\"" + (dir / "data" / "images" / "img_002.png").string() + "\"");
    std::ofstream(dir / "data" / "annotations.json") << json;
  }
  write_text(dir / "scenarios" / "fault.yaml",
             "include: " + std::string(DBH_SOURCE_DIR) +
                 "/scenarios/base/tiny-cpu.yaml\n"
                 "data: {source: real, path: ../data, size: 64, preflight: false}\n"
                 "train: {max_steps: 4}\n"
                 "faults:\n  - {name: corrupt_sample, sample: 1, kind: truncate_image}\n");
  write_text(dir / "scenarios" / "nan.yaml", "include: " + std::string(DBH_SOURCE_DIR) +
                                                 "/scenarios/base/tiny-cpu.yaml\n"
                                                 "faults:\n  - {name: nan_input, at_step: 2}\n"
                                                 "expect: {outcome: diverged}\n");
  fs::create_directories(dir / "cwd");
  const std::vector<std::string> writable = {"out-run", "out-bisect", "out-suite", "cache"};
  const auto before = snapshot(dir, writable);
  auto dbh = [&](std::vector<std::string> args) {
    args.insert(args.begin(), DBH_BINARY);
    return testing::run_process(args, (dir / "cwd").string(), 300);
  };
  const auto run = dbh({"run", (dir / "scenarios" / "fault.yaml").string(), "--out", (dir / "out-run").string(), "-q"});
  EXPECT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.out << run.err;
  const auto bisect = dbh({"bisect", "steps", (dir / "scenarios" / "nan.yaml").string(), "--out",
                           (dir / "out-bisect").string(), "--cache", (dir / "cache").string(), "-q"});
  EXPECT_EQ(bisect.exit_code, 0) << bisect.out << bisect.err;
  const auto suite = dbh({"suite", (dir / "scenarios").string(), "--out", (dir / "out-suite").string(), "-q"});
  EXPECT_TRUE(suite.exit_code == 0 || suite.exit_code == 1) << suite.out << suite.err;
  EXPECT_EQ(snapshot(dir, writable), before) << "dbh changed files outside its output and cache folders";
  EXPECT_TRUE(fs::is_empty(dir / "cwd")) << "dbh wrote into the working directory";
  EXPECT_EQ(testing::find_processes({dir.string()}), std::vector<pid_t>{}) << "a process outlived dbh";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dbh

// What dbh writes can be trusted and harms nothing: one writer per output
// folder, suites that never overwrite one scenario's report with another's,
// and generated files that stay well-formed whatever the scenario is called.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::write_text;

fs::path fresh_dir(const std::string& name) { return testing::fresh_dir("dbh-trust-" + name); }
using testing::run_process;

testing::ProcessResult dbh(std::vector<std::string> args, const fs::path& cwd, double timeout_s = 300) {
  args.insert(args.begin(), DBH_BINARY);
  return run_process(args, cwd.string(), timeout_s);
}

std::string tiny(const std::string& extra = "") {
  return "include: " + std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml\ntrain:\n  max_steps: 2\n" + extra;
}

TEST(OutputLockTest, ASecondWriterOfTheSameFolderIsRefusedWithTheHoldersPid) {
  const fs::path dir = fresh_dir("lock");
  // The first run is slowed down so that the second one starts while it runs.
  write_text(dir / "slow.yaml", tiny("faults:\n  - name: slow_data\n    seconds: 1.5\n    until_step: 1\n"));
  const fs::path out = dir / "out";
  testing::ProcessResult first;
  std::thread t([&] { first = dbh({"run", (dir / "slow.yaml").string(), "--out", out.string(), "-q"}, dir); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  // The trial's folder appears when its worker starts (its journal is moved
  // in when it ends: Note [dbh's files in a trial]).
  while (!fs::exists(out / "main") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(out / "main")) << "the first run never started";
  const auto second = dbh({"run", (dir / "slow.yaml").string(), "--out", out.string(), "-q"}, dir);
  t.join();
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  EXPECT_NE(second.err.find("expected an output folder no other dbh is writing to, got one in use by pid "),
            std::string::npos)
      << second.err;
  EXPECT_EQ(first.exit_code, 0) << first.out << first.err;
  // The second writer changed nothing: one complete run, no lock left.
  const auto report = nlohmann::json::parse(read_text(out / "report.json"));
  EXPECT_EQ(report["outcome"], "passed");
  EXPECT_FALSE(fs::exists(out / ".dbh.lock"));
  fs::remove_all(dir);
}

TEST(OutputLockTest, TheSameScenarioMayRunAgainIntoItsOwnFolder) {
  const fs::path dir = fresh_dir("again");
  write_text(dir / "a.yaml", tiny());
  write_text(dir / "b.yaml", tiny());
  const fs::path out = dir / "out";
  ASSERT_EQ(dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir).exit_code, 0);
  EXPECT_EQ(dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir).exit_code, 0);
  // Another scenario's run is not mixed into it.
  const auto other = dbh({"run", (dir / "b.yaml").string(), "--out", out.string(), "-q"}, dir);
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("one written by \"run " + (dir / "a.yaml").string() + "\""), std::string::npos)
      << other.err;
  EXPECT_TRUE(fs::exists(out / "report.json"));
  fs::remove_all(dir);
}

// A training run continued from its own folder: the checkpoint it resumes
// from stays in place while the previous outputs are set aside (it used to be
// moved away and then reported as missing).
TEST(OutputReuseTest, TrainingResumesFromACheckpointInItsOwnFolder) {
  const testing::ScratchDir dir("dbh-trust-resume-own");
  const fs::path out = dir / "out";
  const std::vector<std::string> common = {"train", "--size", "64", "--batch-size", "1", "--threads", "1",
                                           "--channels-last", "false", "-q", "--out", out.string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return dbh(args, dir.path());
  };
  const auto first = with({"--steps", "1"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const auto again = with({"--steps", "2", "--resume", (out / "checkpoint-final.pt").string()});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  const std::string metrics = read_text(out / "metrics.csv");
  // Rows start run,step: the second step (0-based) trained, resumed after the first.
  EXPECT_NE(metrics.find("\n0,1,"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("\n0,0,"), std::string::npos) << metrics;
  EXPECT_FALSE(fs::exists(out / ".dbh-previous"));
}

// `suite --resume` keeps a finished result only for the configuration that
// produced it: other overrides or an edited file run it again.
TEST(SuiteResumeTest, AResultOfAnotherConfigurationIsNotReused) {
  const testing::ScratchDir dir("dbh-trust-resume-config");
  write_text(dir / "suite" / "a.yaml", tiny());
  const std::string out = (dir / "out").string();
  const auto first = dbh({"suite", (dir / "suite").string(), "--out", out}, dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const auto same = dbh({"suite", (dir / "suite").string(), "--out", out, "--resume"}, dir.path());
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("skip  a: finished in an earlier run (passed)"), std::string::npos) << same.out;
  const auto other =
      dbh({"suite", (dir / "suite").string(), "--out", out, "--resume", "expect.outcome=crashed"}, dir.path());
  EXPECT_EQ(other.exit_code, 1) << other.out << other.err;
  EXPECT_NE(other.out.find("rerun a: its scenario or overrides changed since it finished"), std::string::npos)
      << other.out;
  EXPECT_NE(other.out.find("0 passed, 1 failed"), std::string::npos) << other.out;
}

// ... and only for the inputs that produced it: the same configuration on
// an edited dataset file (the journal records the input manifest's digest)
// runs again, and the broken image fails it.
TEST(SuiteResumeTest, AResultOfOtherInputsIsNotReused) {
  const testing::ScratchDir dir("dbh-trust-resume-inputs");
  const fs::path ds = dir / "ds";
  fs::create_directories(ds);
  fs::copy(fs::path(DBH_SOURCE_DIR) / "fixtures/real/images", ds / "images", fs::copy_options::recursive);
  fs::copy_file(fs::path(DBH_SOURCE_DIR) / "fixtures/real/annotations.json", ds / "annotations.json");
  write_text(dir / "suite" / "a.yaml", tiny("data: {source: real, path: " + ds.string() + "}\n"));
  const std::string out = (dir / "out").string();
  const auto first = dbh({"suite", (dir / "suite").string(), "--out", out}, dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const auto same = dbh({"suite", (dir / "suite").string(), "--out", out, "--resume"}, dir.path());
  EXPECT_NE(same.out.find("skip  a: finished in an earlier run (passed)"), std::string::npos) << same.out;
  fs::resize_file(ds / "images" / "img_004.png", 3000);  // cut short, the size and name kept
  const auto edited = dbh({"suite", (dir / "suite").string(), "--out", out, "--resume"}, dir.path());
  EXPECT_EQ(edited.exit_code, 1) << edited.out << edited.err;
  EXPECT_NE(edited.out.find("rerun a: its inputs changed since it finished"), std::string::npos) << edited.out;
  EXPECT_NE(edited.out.find("0 passed, 1 failed"), std::string::npos) << edited.out;
}

// A suite killed mid-write leaves a torn last journal line: --resume cuts it
// (a record glued onto it would be lost) and the folder merges.
TEST(SuiteResumeTest, ATornJournalLineIsCutAndTheSuiteStillMerges) {
  const testing::ScratchDir dir("dbh-trust-resume-torn");
  write_text(dir / "suite" / "a.yaml", tiny());
  write_text(dir / "suite" / "b.yaml", tiny());
  const fs::path out = dir / "out";
  ASSERT_EQ(dbh({"suite", (dir / "suite").string(), "--out", out.string(), "-q"}, dir.path()).exit_code, 0);
  std::string journal = read_text(out / "journal.jsonl");
  const size_t last = journal.rfind("{\"type\":\"finished\"");
  ASSERT_NE(last, std::string::npos) << journal;
  write_text(out / "journal.jsonl", journal.substr(0, last + 30));  // b's record, torn
  const auto again = dbh({"suite", (dir / "suite").string(), "--out", out.string(), "--resume"}, dir.path());
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("cut the journal's torn last line"), std::string::npos) << again.out;
  const auto merged = dbh({"merge", out.string(), "--out", (dir / "merged").string()}, dir.path());
  EXPECT_EQ(merged.exit_code, 0) << merged.out << merged.err;
  EXPECT_NE(merged.out.find("2 passed, 0 failed"), std::string::npos) << merged.out;
}

// --resume continues this suite's folder only: another suite's, or a shard's
// without its --shard, is refused (exit 2) instead of mixing two suites'
// results; an empty journal never merges as "nothing failed".
TEST(SuiteResumeTest, AnotherSuitesFolderIsRefused) {
  const testing::ScratchDir dir("dbh-trust-resume-other");
  write_text(dir / "sa" / "a1.yaml", tiny());
  write_text(dir / "sb" / "b1.yaml", tiny());
  const fs::path out = dir / "out";
  ASSERT_EQ(dbh({"suite", (dir / "sa").string(), "--out", out.string(), "-q"}, dir.path()).exit_code, 0);
  const std::string before = read_text(out / "journal.jsonl");
  const auto other = dbh({"suite", (dir / "sb").string(), "--out", out.string(), "--resume", "-q"}, dir.path());
  EXPECT_EQ(other.exit_code, 2) << other.out << other.err;
  EXPECT_NE(other.err.find("--resume: expected the journal of this suite, got a journal naming scenario \"a1\""),
            std::string::npos)
      << other.err;
  EXPECT_EQ(read_text(out / "journal.jsonl"), before);
  EXPECT_FALSE(fs::exists(out / "b1"));
  const fs::path sh = dir / "sh";
  ASSERT_EQ(dbh({"suite", (dir / "sa").string(), "--out", sh.string(), "--shard", "0/2", "-q"}, dir.path()).exit_code,
            0);
  const auto unsharded =
      dbh({"suite", (dir / "sa").string(), "--out", (sh / "shard-0-of-2").string(), "--resume", "-q"}, dir.path());
  EXPECT_EQ(unsharded.exit_code, 2) << unsharded.out << unsharded.err;
  EXPECT_NE(unsharded.err.find("got a journal of shard 0/2, not of a whole suite"), std::string::npos)
      << unsharded.err;
  // A record in the middle that does not decode: resumed, the folder would never merge.
  const fs::path bad = dir / "bad";
  ASSERT_EQ(dbh({"suite", (dir / "sa").string(), "--out", bad.string(), "-q"}, dir.path()).exit_code, 0);
  write_text(bad / "journal.jsonl", read_text(bad / "journal.jsonl") + std::string("\0\0\0\n", 4));
  const auto corrupt = dbh({"suite", (dir / "sa").string(), "--out", bad.string(), "--resume", "-q"}, dir.path());
  EXPECT_EQ(corrupt.exit_code, 2) << corrupt.out << corrupt.err;
  EXPECT_NE(corrupt.err.find(": expected a journal record, got"), std::string::npos) << corrupt.err;
  write_text(dir / "empty" / "journal.jsonl", "");
  const auto merged = dbh({"merge", (dir / "empty").string(), "--out", (dir / "merged").string()}, dir.path());
  EXPECT_EQ(merged.exit_code, 1) << merged.out << merged.err;
  EXPECT_NE((merged.out + merged.err).find("expected a suite's journal (a `suite` record first), got no record"),
            std::string::npos)
      << merged.out << merged.err;
}

// Shards of a suite edited between them answer different questions: merge
// says so (exit 1) instead of reporting one suite.
TEST(MergeTest, ShardsOfASuiteThatChangedBetweenThemDoNotMerge) {
  const testing::ScratchDir dir("dbh-trust-merge-changed");
  write_text(dir / "suite" / "a.yaml", tiny());
  write_text(dir / "suite" / "b.yaml", tiny());
  const std::string os = (dir / "os").string();
  ASSERT_EQ(dbh({"suite", (dir / "suite").string(), "--shard", "0/2", "--out", os, "-q"}, dir.path()).exit_code, 0);
  write_text(dir / "suite" / "b.yaml", tiny("name: b-edited\n"));
  ASSERT_EQ(dbh({"suite", (dir / "suite").string(), "--shard", "1/2", "--out", os, "-q"}, dir.path()).exit_code, 0);
  const auto merged = dbh({"merge", os, "--out", (dir / "merged").string()}, dir.path());
  EXPECT_EQ(merged.exit_code, 1) << merged.out << merged.err;
  EXPECT_NE((merged.out + merged.err).find("expected journals of one suite, got 2 different suites"),
            std::string::npos)
      << merged.out << merged.err;
}

// Shard folders moved or copied elsewhere merge from where they are now: the
// reports beside each journal, not the absolute paths it recorded.
TEST(MergeTest, MovedShardFoldersMergeFromWhereTheyAre) {
  const testing::ScratchDir dir("dbh-trust-merge-moved");
  write_text(dir / "suite" / "a.yaml", tiny());
  write_text(dir / "suite" / "b.yaml", tiny());
  const std::string os = (dir / "os").string();
  for (const char* shard : {"0/2", "1/2"}) {
    const auto r = dbh({"suite", (dir / "suite").string(), "--shard", shard, "--out", os, "-q"}, dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  fs::rename(dir / "os", dir / "moved");
  const auto merged = dbh({"merge", (dir / "moved").string(), "--out", (dir / "merged").string()}, dir.path());
  EXPECT_EQ(merged.exit_code, 0) << merged.out << merged.err;
  EXPECT_NE(merged.out.find("2 passed, 0 failed"), std::string::npos) << merged.out;
}

// A cache folder inside the dataset (DBH_CACHE_DIR pointed there) is not
// written: the measured choice is used and said to be not cached.
TEST(OutputLinksTest, TheTuningCacheIsNeverWrittenIntoTheDataset) {
  const testing::ScratchDir dir("dbh-trust-cache-in-data");
  fs::copy(fs::path(DBH_SOURCE_DIR) / "fixtures" / "real", dir / "ds", fs::copy_options::recursive);
  const std::string cache = (dir / "ds" / ".cache").string();
  const auto r = testing::run_process({"/usr/bin/env", "DBH_CACHE_DIR=" + cache, DBH_BINARY, "train", "--data",
                                       (dir / "ds").string(), "--steps", "1", "--size", "64", "--batch-size", "1",
                                       "--out", (dir / "out").string()},
                                      dir.string(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("not cached: the cache folder " + cache + " lies inside the dataset"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir / "ds" / ".cache"));
}

TEST(SuiteIdTest, ScenariosWithTheSameFileNameKeepTheirOwnReports) {
  const fs::path dir = fresh_dir("ids");
  write_text(dir / "a" / "x.yaml", tiny("name: from-a\n"));
  write_text(dir / "b" / "x.yaml", tiny("name: from-b\nexpect:\n  outcome: failed\n"));
  const fs::path out = dir / "out";
  const auto r = dbh({"suite", (dir / "a").string(), (dir / "b").string(), "--out", out.string(), "-q"}, dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // b's expectation is not met
  const auto suite = nlohmann::json::parse(read_text(out / "suite.json"));
  ASSERT_EQ(suite["runs"].size(), 2u) << suite.dump(2);
  std::set<std::string> names, reports;
  for (const auto& run : suite["runs"]) {
    names.insert(run["scenario"].get<std::string>());
    const std::string report = run["report"].get<std::string>();
    reports.insert(report);
    EXPECT_TRUE(fs::exists(report)) << report;
    // Each report is the one of its own scenario.
    EXPECT_NE(read_text(report).find(run["scenario"].get<std::string>()), std::string::npos) << report;
  }
  EXPECT_EQ(names, (std::set<std::string>{"from-a", "from-b"}));
  EXPECT_EQ(reports.size(), 2u);
  fs::remove_all(dir);
}

TEST(GeneratedFilesTest, ANameThatLooksLikeACommandStaysAComment) {
  const fs::path dir = fresh_dir("repro");
  // The default name comes from the file name, which may hold a newline.
  const fs::path scenario = dir / "x\ntouch pwned\n.yaml";
  write_text(scenario, tiny());
  const fs::path out = dir / "out";
  const auto r = dbh({"run", scenario.string(), "--out", out.string(), "-q"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // repro.sh runs the dbh that wrote it (its absolute path, whatever PATH
  // holds) unless $DBH names another: a stand-in records what it was given.
  EXPECT_NE(read_text(out / "repro.sh").find("DBH=${DBH:-" + fs::canonical(DBH_BINARY).string() + "}"),
            std::string::npos)
      << read_text(out / "repro.sh");
  write_text(dir / "bin" / "dbh", "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + (dir / "args").string() + "\"\n");
  fs::permissions(dir / "bin" / "dbh", fs::perms::owner_all);
  const auto sh = run_process({"/usr/bin/env", "PATH=/usr/bin:/bin", "DBH=" + (dir / "bin" / "dbh").string(),
                               "/bin/sh", (out / "repro.sh").string()},
                              dir.string(), 60);
  EXPECT_EQ(sh.exit_code, 0) << sh.err;
  EXPECT_FALSE(fs::exists(dir / "pwned")) << read_text(out / "repro.sh");
  EXPECT_EQ(read_text(dir / "args"), "run\n" + scenario.string() + "\n") << read_text(out / "repro.sh");
  // Its own arguments are passed on, each one word.
  const auto more = run_process({"/usr/bin/env", "PATH=/usr/bin:/bin", "DBH=" + (dir / "bin" / "dbh").string(),
                                 "/bin/sh", (out / "repro.sh").string(), "--out", "a b", "train.lr=0.001"},
                                dir.string(), 60);
  EXPECT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(read_text(dir / "args"), "run\n" + scenario.string() + "\n--out\na b\ntrain.lr=0.001\n")
      << read_text(out / "repro.sh");
  fs::remove_all(dir);
}

// Without dbh on PATH (as right after `./dev main`), every printed command
// names the binary that ran, and the repro line runs as pasted.
TEST(GeneratedFilesTest, PrintedCommandsNameTheBinaryThatRanWhenPathHasNoDbh) {
  const fs::path dir = fresh_dir("self");
  const std::string self = fs::canonical(DBH_BINARY).string();
  const auto r = testing::run_process({"/usr/bin/env", "PATH=/usr/bin:/bin", DBH_BINARY, "run",
                                       "scenarios/nan-activation.yaml", "expect.step=3", "--out",
                                       (dir / "a").string()},
                                      DBH_SOURCE_DIR, 300);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string want =
      "repro:  " + self + " run " + std::string(DBH_SOURCE_DIR) + "/scenarios/nan-activation.yaml expect.step=3";
  const size_t at = r.out.find(want);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at + 8, r.out.find('\n', at) - at - 8);
  const auto again = testing::run_process(
      {"/usr/bin/env", "PATH=/usr/bin:/bin", "/bin/sh", "-c", line + " --out " + (dir / "b").string() + " -q"},
      "/", 300);  // from another folder: the scenario's path is absolute
  EXPECT_EQ(again.exit_code, 1) << line << "\n" << again.out << again.err;
  EXPECT_TRUE(fs::exists(dir / "b" / "report.json")) << line;
  fs::remove_all(dir);
}

// A name with markup characters stays well-formed XML; a name that is not
// UTF-8 has no faithful spelling in JSON, JUnit or a page, and is refused
// before anything runs or is written (exit 2, the name shown with U+FFFD).
TEST(GeneratedFilesTest, JUnitIsWellFormedForAMarkupNameAndANameNotInUtf8IsRefused) {
  const fs::path dir = fresh_dir("junit");
  const fs::path scenario = dir / "caf\xc3\xa9-<&>\".yaml";
  write_text(scenario, tiny("expect:\n  outcome: failed\n"));
  const fs::path out = dir / "out";
  const fs::path junit = dir / "junit.xml";
  const auto r = dbh({"run", scenario.string(), "--out", out.string(), "--junit", junit.string(), "-q"}, dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  // A real XML parser reads it, and the report.json is valid UTF-8 JSON.
  const auto parse = run_process(
      {"/usr/bin/python3", "-c",
       "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
       "print(d.getElementsByTagName('testcase')[0].getAttribute('name'))",
       junit.string()},
      dir.string(), 60);
  if (parse.exit_code == 127) GTEST_SKIP() << "python3 is not installed";
  EXPECT_EQ(parse.exit_code, 0) << parse.err << read_text(junit);
  EXPECT_NE(parse.out.find("caf\xc3\xa9-<&>\""), std::string::npos) << parse.out;
  EXPECT_FALSE(nlohmann::json::parse(read_text(out / "report.json"), nullptr, false).is_discarded());

  const fs::path latin1 = dir / "caf\xe9.yaml";
  write_text(latin1, tiny());
  const auto refused = dbh({"run", latin1.string(), "--out", (dir / "out2").string(), "--junit",
                            (dir / "junit2.xml").string(), "-q"},
                           dir);
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("caf\xef\xbf\xbd.yaml: expected UTF-8"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir / "out2"));
  EXPECT_FALSE(fs::exists(dir / "junit2.xml"));
  fs::remove_all(dir);
}

// With gradient accumulation a divergence in an early micro-batch leaves the
// last micro-batch's loss identical; dbh must still name the step where the
// processes parted, not the next one.
TEST(RepeatTest, NamesTheFirstDivergentStepUnderAccumulation) {
  const fs::path dir = fresh_dir("accum");
  write_text(dir / "s.yaml", "include: " + std::string(DBH_SOURCE_DIR) +
                                 "/scenarios/base/tiny-cpu.yaml\n"
                                 "train: {max_steps: 4, accumulation: 2}\n"
                                 "faults:\n  - {name: nondeterminism, at_step: 2, micro_batch: 0}\n"
                                 "expect: {outcome: nondeterministic, step: 2}\n");
  const auto r = dbh({"repeat", (dir / "s.yaml").string(), "--processes", "2", "--out", (dir / "out").string(), "-q"},
                     dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto report = nlohmann::json::parse(read_text(dir / "out" / "report.json"));
  EXPECT_EQ(report["outcome"], "nondeterministic") << report.dump(2);
  EXPECT_EQ(report["failure"]["step"], 2) << report["failure"].dump(2);
  EXPECT_NE(report["failure"]["message"].get<std::string>().find("first in micro-batch 0"), std::string::npos)
      << report["failure"].dump(2);
  fs::remove_all(dir);
}

// Every entry under `root` (links not followed) with what it is and holds: a
// file's bytes, a link's target, "" for a folder.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path p = it->path();
    const std::string rel = p.lexically_relative(root).string();
    const auto st = fs::symlink_status(p);
    if (fs::is_symlink(st)) {
      out[rel] = "link -> " + fs::read_symlink(p).string();
    } else if (fs::is_directory(st)) {
      out[rel] = "folder";
    } else {
      out[rel] = "file: " + read_text(p);
    }
  }
  return out;
}

ino_t inode_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Waits up to `timeout_s` for `file` to hold `text`.
bool wait_for_text(const fs::path& file, const std::string& text, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_text(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The /proc path of the trial journal a dbh holds open under `out`, or ""
// when none appears within `seconds`.
fs::path journal_under(const fs::path& out, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (const auto found = testing::live_journals(out); !found.empty()) return found.front();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

// A second dbh that finds the folder locked must leave it exactly as it was:
// it created none of what is there. (It used to remove everything it had not
// seen before its failed claim, i.e. the running run's files.)
TEST(OutputLockTest, ASecondRunIntoABusyFolderRemovesNothingOfTheFirst) {
  const fs::path dir = fresh_dir("busy");
  testing::RemoveOnExit cleanup(dir);
  // The first run sleeps in its first step's data, long enough for the second
  // one to start, fail and exit meanwhile.
  write_text(dir / "slow.yaml", tiny("faults:\n  - name: slow_data\n    seconds: 5\n    at_step: 0\n"));
  const fs::path out = dir / "out";
  const pid_t first = testing::spawn_process(
      {DBH_BINARY, "run", (dir / "slow.yaml").string(), "--out", out.string(), "-q"}, dir.string(),
      (dir / "first.log").string());
  // In step 0 (its step_begin is journalled before the data is loaded), in
  // a journal no path reaches until the trial ends (Note [dbh's files in a
  // trial]): read through dbh's own descriptor.
  const fs::path live = journal_under(out, 120);
  const bool started = !live.empty() && wait_for_text(live, "\"step_begin\"", 120);
  if (!started) testing::wait_process(first, 1);
  ASSERT_TRUE(started) << read_text(dir / "first.log");
  const auto before = tree(out);
  const ino_t journal = inode_of(live);
  ASSERT_TRUE(before.count(".dbh-owner") && before.count("scenario.resolved.json") && before.count("main"));

  const auto second = dbh({"run", (dir / "slow.yaml").string(), "--out", out.string(), "-q"}, dir, 120);
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  EXPECT_NE(second.err.find("got one in use by pid " + std::to_string(first)), std::string::npos) << second.err;
  // Nothing of the first run's was removed or replaced while it ran (the
  // events it journals meanwhile may have grown its files).
  const auto during = tree(out);
  for (const auto& [name, what] : before) EXPECT_TRUE(during.count(name)) << name << " was removed";
  EXPECT_EQ(during.at(".dbh-owner"), before.at(".dbh-owner"));
  EXPECT_EQ(during.at("scenario.resolved.json"), before.at("scenario.resolved.json"));
  EXPECT_EQ(inode_of(live), journal);

  const auto r = testing::wait_process(first, 240);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << read_text(dir / "first.log");
  const auto report = nlohmann::json::parse(read_text(out / "report.json"), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << read_text(dir / "first.log");
  EXPECT_EQ(report["outcome"], "passed");
  // Its event journal is whole: from hello to done.
  const std::string events = read_text(out / "main" / "events.jsonl");
  EXPECT_EQ(events.rfind("{", 0), 0u) << events;
  EXPECT_NE(events.find("\"hello\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"done\""), std::string::npos) << events;
  EXPECT_NE(read_text(out / "events.jsonl").find("\"done\""), std::string::npos);
  // Still a folder dbh wrote, for the same scenario, and unlocked.
  EXPECT_EQ(read_text(out / ".dbh-owner"), "run " + (dir / "slow.yaml").string() + "\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(out / ".dbh.lock")));
}

// A lock that cannot be taken (a link where dbh's lock file should be, in a
// loop or to someone's file) is a usage error, and nothing in the folder, nor
// the file the link names, is changed or removed.
TEST(OutputLockTest, ALinkAtTheLockIsRefusedAndNothingIsRemoved) {
  const fs::path dir = fresh_dir("locklink");
  testing::RemoveOnExit cleanup(dir);
  write_text(dir / "a.yaml", tiny());
  const fs::path out = dir / "out";
  ASSERT_EQ(dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir).exit_code, 0);
  write_text(dir / "user.txt", "precious\n");
  for (const std::string& target : std::vector<std::string>{".dbh.lock", (dir / "user.txt").string()}) {
    SCOPED_TRACE(target);
    fs::create_symlink(target, out / ".dbh.lock");
    const auto before = tree(out);
    ASSERT_GT(before.size(), 5u);
    const auto r = dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(".dbh.lock: expected a lock file dbh can create, got a symlink"), std::string::npos)
        << r.err;
    EXPECT_EQ(tree(out), before);
    EXPECT_EQ(read_text(dir / "user.txt"), "precious\n");
    fs::remove(out / ".dbh.lock");
  }
  // With the link gone the folder is dbh's as before.
  EXPECT_EQ(dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir).exit_code, 0);
}

// Links left in a reused output folder at the names of files dbh writes are
// replaced, never written through: the files they name stay as they were.
TEST(OutputLinksTest, LinksAtTheRunsFileNamesAreReplacedNotWrittenThrough) {
  const fs::path dir = fresh_dir("links");
  testing::RemoveOnExit cleanup(dir);
  write_text(dir / "a.yaml", tiny());
  const fs::path out = dir / "out";
  ASSERT_EQ(dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir).exit_code, 0);
  const std::vector<std::string> names = {"main/stdout.log", "main/stderr.log", "main/events.jsonl",
                                          "main/scenario.resolved.json", "scenario.resolved.json",
                                          "events.jsonl", "report.json", "report.md", "metrics.csv"};
  for (const auto& name : names) {
    write_text(dir / "user" / name, "precious " + name + "\n");
    fs::remove(out / name);
    fs::create_symlink(dir / "user" / name, out / name);
  }
  const auto r = dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    EXPECT_EQ(read_text(dir / "user" / name), "precious " + name + "\n");
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out / name)));
  }
  EXPECT_NE(read_text(out / "main" / "events.jsonl").find("\"done\""), std::string::npos);
}

// A link where the trial's folder should be leads out of the output folder:
// the run is refused and writes nothing there.
TEST(OutputLinksTest, ALinkAtTheTrialFolderIsRefused) {
  const fs::path dir = fresh_dir("dirlink");
  testing::RemoveOnExit cleanup(dir);
  write_text(dir / "a.yaml", tiny());
  const fs::path out = dir / "out";
  ASSERT_EQ(dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir).exit_code, 0);
  write_text(dir / "user" / "keep.txt", "precious\n");
  write_text(dir / "user" / "stdout.log", "mine\n");
  fs::remove_all(out / "main");
  fs::create_directory_symlink(dir / "user", out / "main");
  const auto before = tree(dir / "user");
  const auto r = dbh({"run", (dir / "a.yaml").string(), "--out", out.string(), "-q"}, dir);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("main: expected a folder dbh can write in, got a symlink"), std::string::npos) << r.err;
  EXPECT_EQ(tree(dir / "user"), before);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(out / "main")));  // the user's link, not removed either
}

}  // namespace
}  // namespace dbh

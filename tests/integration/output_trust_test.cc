// What dbh writes can be trusted and harms nothing: one writer per output
// folder, suites that never overwrite one scenario's report with another's,
// and generated files that stay well-formed whatever the scenario is called.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
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
  while (!fs::exists(out / "main" / "events.jsonl") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(out / "main" / "events.jsonl")) << "the first run never started";
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
  // repro.sh runs `dbh`: a stand-in on PATH records what it was given.
  write_text(dir / "bin" / "dbh", "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + (dir / "args").string() + "\"\n");
  fs::permissions(dir / "bin" / "dbh", fs::perms::owner_all);
  const auto sh = run_process({"/usr/bin/env", "PATH=" + (dir / "bin").string() + ":/usr/bin:/bin", "/bin/sh",
                               (out / "repro.sh").string()},
                              dir.string(), 60);
  EXPECT_EQ(sh.exit_code, 0) << sh.err;
  EXPECT_FALSE(fs::exists(dir / "pwned")) << read_text(out / "repro.sh");
  EXPECT_EQ(read_text(dir / "args"), "run\n" + scenario.string() + "\n") << read_text(out / "repro.sh");
  fs::remove_all(dir);
}

TEST(GeneratedFilesTest, JUnitIsWellFormedForANameThatIsNotUtf8) {
  const fs::path dir = fresh_dir("junit");
  const fs::path scenario = dir / "caf\xe9-<&>\".yaml";
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
  EXPECT_NE(parse.out.find("caf\xef\xbf\xbd-<&>\""), std::string::npos) << parse.out;
  EXPECT_FALSE(nlohmann::json::parse(read_text(out / "report.json"), nullptr, false).is_discarded());
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

}  // namespace
}  // namespace dbh

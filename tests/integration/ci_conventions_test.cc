// `dbh run` and `dbh suite` under CI services, as a workflow runs them: the
// GitHub job summary and annotations, GitLab's JUnit attachments,
// --no-progress and --print-config; what a CI environment can get wrong (a
// summary that is a FIFO or a link, a file name that holds a workflow
// command, a scheduler variable that is not a number, a --junit path that is
// not dbh's) and --json output a CI step parses.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::EnvChanges;
using testing::read_text;
using testing::write_text;

// No CI service unless a test names one.
EnvChanges no_ci() {
  return {{"GITHUB_ACTIONS", std::nullopt}, {"GITHUB_STEP_SUMMARY", std::nullopt},
          {"GITHUB_WORKSPACE", std::nullopt}, {"GITLAB_CI", std::nullopt},
          {"CI_PROJECT_DIR", std::nullopt}};
}

testing::ProcessResult dbh(std::vector<std::string> args, const EnvChanges& env) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process_with_env(args, env, DBH_SOURCE_DIR, 600);
}

std::string base_include() {
  return "include: " + std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml\n";
}

// Two tiny scenarios: one passes, one diverges where it expected to pass.
void write_suite(const fs::path& dir) {
  write_text(dir / "scenarios" / "a-pass.yaml",
             "name: a-pass\n" + base_include() + "train:\n  max_steps: 2\n  threads: 1\n");
  write_text(dir / "scenarios" / "b-nan.yaml",
             "name: b-nan\n" + base_include() +
                 "train:\n  max_steps: 2\n  threads: 1\n"
                 "faults:\n  - name: nan_activation\n    module: decoder.fusion\n    at_step: 1\n"
                 "expect:\n  outcome: passed\n");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(CiConventionsTest, FailingSuiteUnderGithubActionsAndGitlab) {
  const fs::path dir = testing::fresh_dir("dbh-ci-suite");
  testing::RemoveOnExit cleanup(dir);
  write_suite(dir);
  const fs::path summary = dir / "summary.md";
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = summary.string();
  env["GITHUB_WORKSPACE"] = dir.string();
  env["GITLAB_CI"] = "true";
  env["CI_PROJECT_DIR"] = dir.string();
  const auto r = dbh({"suite", (dir / "scenarios").string(), "--out", (dir / "out").string(), "--no-progress"}, env);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 passed, 1 failed"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("GitHub job summary"), std::string::npos) << r.err;

  // One ::error annotation, for the scenario that missed its expectation.
  std::vector<std::string> errors;
  for (const auto& l : lines_of(r.out)) {
    if (l.rfind("::", 0) == 0) errors.push_back(l);
  }
  ASSERT_EQ(errors.size(), 1u) << r.out;
  EXPECT_EQ(errors[0].rfind("::error title=dbh b-nan::diverged (nonfinite_activation at step 1", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("expectation not met%0Aoutcome: expected passed, got diverged"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find("%0Arepro: dbh run "), std::string::npos) << errors[0];
  // --no-progress: no step lines, the results still.
  EXPECT_EQ(r.out.find(" loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL  b-nan"), std::string::npos) << r.out;

  // The job summary: a row per scenario, paths relative to the workspace, the failure.
  const std::string md = read_text(summary);
  EXPECT_EQ(md.rfind("### \xE2\x9D\x8C dbh suite: 1 of 2 expectation(s) met\n", 0), 0u) << md;
  EXPECT_NE(md.find("| a-pass | passed |  |  |  | \xE2\x9C\x85 met | out/a-pass/report.md |\n"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| b-nan | diverged | nonfinite\\_activation | 1 | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | \xE2\x9D\x8C not met | out/b-nan/report.md |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("#### Failures\n\n**b-nan**: diverged (nonfinite\\_activation at step 1"), std::string::npos)
      << md;
  EXPECT_NE(md.find("- outcome: expected passed, got diverged\n"), std::string::npos) << md;
  EXPECT_NE(md.find("Reproduce:\n\n```sh\ndbh run "), std::string::npos) << md;

  // GitLab: the report and the plots attached to each testcase.
  const std::string xml = read_text(dir / "out" / "junit.xml");
  for (const char* f : {"a-pass/report.md", "b-nan/report.md", "b-nan/loss.png", "b-nan/memory.png"}) {
    EXPECT_NE(xml.find(std::string("[[ATTACHMENT|out/") + f + "]]"), std::string::npos) << f << "\n" << xml;
  }
}

// Note [One verdict]: a scenario this machine cannot run is a skip in every
// output (command line, JUnit, suite.json, index.html, GitHub annotations and
// summary), and an unmet expectation without a failure is never titled
// "passed".
TEST(CiConventionsTest, ASkipIsASkipAndAnUnmetExpectationIsNeverPassedInEveryOutput) {
  const fs::path dir = testing::fresh_dir("dbh-ci-verdicts");
  testing::RemoveOnExit cleanup(dir);
  write_text(dir / "scenarios" / "a-pass.yaml",
             "name: a-pass\n" + base_include() + "train:\n  max_steps: 2\n  threads: 1\n");
  write_text(dir / "scenarios" / "c-gpu.yaml",
             "name: c-gpu\n" + base_include() + "train:\n  max_steps: 2\n  threads: 1\nhardware:\n  device: cuda\n");
  write_text(dir / "scenarios" / "d-unmet.yaml", "name: d-unmet\n" + base_include() +
                                                       "train:\n  max_steps: 2\n  threads: 1\n"
                                                       "expect:\n  outcome: diverged\n");
  const fs::path summary = dir / "summary.md";
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = summary.string();
  env["GITHUB_WORKSPACE"] = dir.string();
  const auto r = dbh({"suite", (dir / "scenarios").string(), "--out", (dir / "out").string(), "--no-progress"}, env);
  if (r.out.find("SKIP  c-gpu") == std::string::npos) GTEST_SKIP() << "this machine runs CUDA: nothing is skipped";
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 passed, 1 failed, 1 skipped"), std::string::npos) << r.out;
  std::vector<std::string> commands;
  for (const auto& l : lines_of(r.out)) {
    if (l.rfind("::", 0) == 0) commands.push_back(l);
  }
  ASSERT_EQ(commands.size(), 2u) << r.out;
  EXPECT_EQ(commands[0].rfind("::error title=dbh d-unmet::passed: expectation not met", 0), 0u) << commands[0];
  EXPECT_EQ(commands[1].rfind("::notice title=dbh c-gpu::skipped: not run on this machine", 0), 0u) << commands[1];

  const std::string md = read_text(summary);
  EXPECT_EQ(md.rfind("### \xE2\x9D\x8C dbh suite: 1 of 2 expectation(s) met, 1 skipped (not run on this machine)\n", 0),
            0u)
      << md;
  EXPECT_NE(md.find("| c-gpu | skipped |"), std::string::npos) << md;
  EXPECT_NE(md.find("skipped | out/c-gpu/report.md |"), std::string::npos) << md;
  EXPECT_EQ(md.find("**c-gpu**"), std::string::npos) << "a skip is not a failure:\n" << md;
  EXPECT_NE(md.find("**d-unmet**"), std::string::npos) << md;

  const std::string xml = read_text(dir / "out" / "junit.xml");
  EXPECT_NE(xml.find("skipped=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("classname=\"dbh.suite\""), std::string::npos) << xml;
  EXPECT_EQ(xml.find("dbh.dbh."), std::string::npos) << xml;
  const json suite = json::parse(read_text(dir / "out" / "suite.json"));
  EXPECT_EQ(suite["skipped"], 1) << suite.dump(1);
  EXPECT_EQ(suite["expectations_met"], 1) << suite.dump(1);
  const std::string index = read_text(dir / "out" / "index.html");
  EXPECT_NE(index.find("1 of 2 expectations met, 1 skipped"), std::string::npos) << index;
  EXPECT_NE(index.find("1 not met</span>"), std::string::npos) << index;
  EXPECT_NE(index.find("skipped: not run on this machine"), std::string::npos) << index;

  // The unmet expectation's pages say so in their title, as the command line does.
  for (const char* page : {"report.md", "report.html"}) {
    const std::string text = read_text(dir / "out" / "d-unmet" / page);
    EXPECT_NE(text.find("Scenario d-unmet: expectation not met (training passed)"), std::string::npos) << page;
    EXPECT_EQ(text.find("Scenario d-unmet passed"), std::string::npos) << page;
  }
  EXPECT_NE(read_text(dir / "out" / "c-gpu" / "report.html").find("Scenario c-gpu not run on this machine"),
            std::string::npos);
  const json report = json::parse(read_text(dir / "out" / "c-gpu" / "report.json"));
  EXPECT_EQ(report["expectation"]["verdict"], "skipped") << report["expectation"].dump();
  EXPECT_EQ(json::parse(read_text(dir / "out" / "d-unmet" / "report.json"))["expectation"]["verdict"], "not met");

  // The skipped scenario alone: exit 4, and the job summary is headed as a
  // skip (a tick over a failing step's exit status said the opposite).
  fs::remove(summary);
  const auto one = dbh({"run", (dir / "scenarios" / "c-gpu.yaml").string(), "--out", (dir / "one").string()}, env);
  EXPECT_EQ(one.exit_code, 4) << one.out << one.err;
  EXPECT_NE(one.out.find("  [main] not available here: device \"cuda\" requested"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("] error:"), std::string::npos) << "a skip is not an error:\n" << one.out;
  const std::string one_md = read_text(summary);
  EXPECT_EQ(one_md.rfind("### \xE2\x8F\xAD\xEF\xB8\x8F dbh run c-gpu: nothing run on this machine, 1 skipped", 0), 0u)
      << one_md;
  EXPECT_EQ(one_md.find("\xE2\x9C\x85"), std::string::npos) << one_md;

  // The skip says how to run it on this machine's CPU, as a command that
  // runs as pasted from any folder.
  const std::string marker = "on this machine's CPU: ";
  const size_t at = one.out.find(marker);
  ASSERT_NE(at, std::string::npos) << one.out;
  const std::string line = one.out.substr(at + marker.size(), one.out.find('\n', at) - at - marker.size());
  EXPECT_NE(line.find(" hardware.device=cpu"), std::string::npos) << line;
  EXPECT_NE(read_text(dir / "one" / "report.md").find(marker), std::string::npos);
  const auto on_cpu =
      testing::run_process({"/bin/sh", "-c", line + " -q --out " + (dir / "on-cpu").string()}, "/", 300);
  EXPECT_EQ(on_cpu.exit_code, 0) << line << "\n" << on_cpu.out << on_cpu.err;
}

// A glob names the shared base too: a file another scenario of the suite
// includes is not run as a scenario, and the suite says so.
TEST(CiConventionsTest, ASuiteOverAGlobSkipsTheFileItsScenariosInclude) {
  const fs::path dir = testing::fresh_dir("dbh-ci-includes");
  testing::RemoveOnExit cleanup(dir);
  write_text(dir / "base.yaml", base_include() + "train:\n  max_steps: 1\n  threads: 1\n");
  write_text(dir / "a.yaml", "name: a\ninclude: base.yaml\n");
  write_text(dir / "b.yaml", "name: b\ninclude: base.yaml\ntrain:\n  seed: 2\n");
  const auto r = dbh({"suite", (dir / "a.yaml").string(), (dir / "b.yaml").string(), (dir / "base.yaml").string(),
                      "--out", (dir / "out").string(), "--no-progress"},
                     no_ci());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 passed, 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("base.yaml is not run as a scenario: " + (dir / "a.yaml").string() + " includes it"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "base")) << "the include file ran";
}

TEST(CiConventionsTest, AnUnwritableSummaryIsAWarningNotAFailure) {
  const fs::path dir = testing::fresh_dir("dbh-ci-run");
  testing::RemoveOnExit cleanup(dir);
  write_suite(dir);
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = dir.string();  // a folder
  const auto r = dbh({"run", (dir / "scenarios" / "a-pass.yaml").string(), "--out", (dir / "run").string()}, env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string warning = "dbh: warning: no GitHub job summary written: " + dir.string();
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << "warned more than once:\n" << r.err;
  EXPECT_EQ(r.out.find("::error"), std::string::npos) << r.out;
  // Not a terminal: the step progress stays plain lines, as CI logs show it.
  EXPECT_NE(r.out.find("step   2/2  loss"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "run" / "report.md"));
}

TEST(CiConventionsTest, PrintConfigPrintsTheResolvedScenarioAndRunsNothing) {
  const fs::path dir = testing::fresh_dir("dbh-ci-config");
  testing::RemoveOnExit cleanup(dir);
  write_suite(dir);
  const fs::path out = dir / "never";
  const auto r = dbh({"run", (dir / "scenarios" / "b-nan.yaml").string(), "train.max_steps=3", "--seed", "7",
                      "--out", out.string(), "--print-config"},
                     no_ci());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j.at("train").at("max_steps"), 3) << r.out;
  EXPECT_EQ(j.at("train").at("seed"), 7) << r.out;
  EXPECT_EQ(j.at("faults")[0].at("name"), "nan_activation") << r.out;
  EXPECT_FALSE(fs::exists(out));

  const auto s = dbh({"suite", (dir / "scenarios").string(), "train.max_steps=3", "--out", out.string(),
                      "--print-config"},
                     no_ci());
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  const json all = json::parse(s.out, nullptr, false);
  ASSERT_TRUE(all.is_object()) << s.out;
  ASSERT_EQ(all.size(), 2u) << s.out;
  EXPECT_EQ(all.at("a-pass").at("train").at("max_steps"), 3);
  EXPECT_EQ(all.at("b-nan").at("train").at("max_steps"), 3);
  EXPECT_FALSE(fs::exists(out));

  // Bad input is still an error.
  const auto bad = dbh({"run", (dir / "scenarios" / "a-pass.yaml").string(), "train.max_steps=x", "--print-config"},
                       no_ci());
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_EQ(bad.out, "");
}

// A scenario that runs one step and misses its expectation (exit 1).
void write_failing(const fs::path& file) {
  write_text(file, "name: f\n" + base_include() + "train:\n  max_steps: 1\n  threads: 1\nexpect:\n  outcome: diverged\n");
}

std::vector<std::string> workflow_command_lines(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& l : lines_of(text)) {
    if (l.rfind("::", 0) == 0) out.push_back(l);
  }
  return out;
}

// The arguments bash reads from `command` ("dbh run …"), with `dbh` a function
// that prints them: what the command would run, pasted into a shell.
std::vector<std::string> bash_words(const std::string& command) {
  const auto r = testing::run_process(
      {"/bin/bash", "-c", "dbh() { printf '%s\\0' \"$@\"; }; " + command}, "", 30);
  std::vector<std::string> words;
  std::string w;
  for (char c : r.out) {
    if (c == '\0') {
      words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return words;
}

TEST(CiConventionsTest, ASummaryFifoIsAWarningAndNeverBlocks) {
  const fs::path dir = testing::fresh_dir("dbh-ci-fifo");
  testing::RemoveOnExit cleanup(dir);
  write_failing(dir / "f.yaml");
  const fs::path fifo = dir / "summary-fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = fifo.string();
  const auto t0 = std::chrono::steady_clock::now();
  // A run takes a few seconds; open() on a FIFO without a reader blocked forever.
  const auto r = testing::run_process_with_env(
      {DBH_BINARY, "run", (dir / "f.yaml").string(), "--out", (dir / "out").string(), "-q"}, env, DBH_SOURCE_DIR, 120);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.timed_out) << "dbh blocked on the FIFO";
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_LT(seconds, 60.0);
  const std::string warning =
      "dbh: warning: no GitHub job summary written: " + fifo.string() + ": expected a regular file, got a FIFO";
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << "warned more than once:\n" << r.err;
  EXPECT_EQ(workflow_command_lines(r.out).size(), 1u) << "the annotation still goes out:\n" << r.out;
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::exists(dir / "out" / "report.md"));
}

TEST(CiConventionsTest, ASymlinkedSummaryLeavesItsTargetAlone) {
  const fs::path dir = testing::fresh_dir("dbh-ci-link");
  testing::RemoveOnExit cleanup(dir);
  write_failing(dir / "f.yaml");
  write_text(dir / "notes.md", "the user's notes\n");
  fs::create_symlink(dir / "notes.md", dir / "summary.md");
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = (dir / "summary.md").string();
  const auto r = dbh({"run", (dir / "f.yaml").string(), "--out", (dir / "out").string(), "-q"}, env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(read_text(dir / "notes.md"), "the user's notes\n");
  EXPECT_TRUE(fs::is_symlink(dir / "summary.md"));
  EXPECT_NE(r.err.find("no GitHub job summary written: " + (dir / "summary.md").string() +
                       ": expected a regular file, got a symbolic link"),
            std::string::npos)
      << r.err;
}

// GITHUB_STEP_SUMMARY naming a file the scenario includes (or its dataset):
// dbh reads those and never appends to them, in a run as in a suite.
TEST(CiConventionsTest, TheSummaryIsNeverAppendedToAFileTheScenarioReads) {
  const fs::path dir = testing::fresh_dir("dbh-ci-include");
  testing::RemoveOnExit cleanup(dir);
  write_text(dir / "base.yaml", "train:\n  max_steps: 1\n  threads: 1\n");
  const std::string base_text = read_text(dir / "base.yaml");
  write_text(dir / "s" / "f.yaml", "name: f\ninclude:\n  - " + std::string(DBH_SOURCE_DIR) +
                                      "/scenarios/base/tiny-cpu.yaml\n  - ../base.yaml\nexpect:\n  outcome: diverged\n");
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = (dir / "base.yaml").string();
  const auto r = dbh({"run", (dir / "s" / "f.yaml").string(), "--out", (dir / "out").string(), "-q"}, env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("no GitHub job summary written"), std::string::npos) << r.err;
  const auto suite = dbh({"suite", (dir / "s").string(), "--out", (dir / "suite").string(), "-q"}, env);
  EXPECT_EQ(suite.exit_code, 1) << suite.out << suite.err;
  EXPECT_NE(suite.err.find("no GitHub job summary written"), std::string::npos) << suite.err;
  EXPECT_EQ(read_text(dir / "base.yaml"), base_text);
  // A hard link to a file, from anywhere (the dataset's annotations, a file of
  // the user's): a file with two names is never appended to.
  write_text(dir / "notes.json", "{}\n");
  fs::create_hard_link(dir / "notes.json", dir / "summary.md");
  env["GITHUB_STEP_SUMMARY"] = (dir / "summary.md").string();
  const auto linked = dbh({"run", (dir / "s" / "f.yaml").string(), "--out", (dir / "out2").string(), "-q"}, env);
  EXPECT_EQ(linked.exit_code, 1) << linked.out << linked.err;
  EXPECT_NE(linked.err.find("got a file with 2 names (a hard link)"), std::string::npos) << linked.err;
  EXPECT_EQ(read_text(dir / "notes.json"), "{}\n");
}

// A file name with a newline and a workflow command in it: no line of dbh's
// output starts a workflow command but dbh's own annotation, and every
// reproduce command dbh prints or writes names the real file.
TEST(CiConventionsTest, ANewlineInAFileNameInjectsNoWorkflowCommand) {
  const fs::path dir = testing::fresh_dir("dbh-ci-newline");
  testing::RemoveOnExit cleanup(dir);
  const fs::path scenario = dir / "s2" / "n\n::error file=evil::pwn.yaml";
  write_failing(scenario);
  const fs::path summary = dir / "summary.md";
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";
  env["GITHUB_STEP_SUMMARY"] = summary.string();
  const auto r = dbh({"suite", (dir / "s2").string(), "--out", (dir / "out").string(), "--no-progress"}, env);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto commands = workflow_command_lines(r.out);
  ASSERT_EQ(commands.size(), 1u) << r.out;
  EXPECT_EQ(commands[0].rfind("::error title=dbh f::", 0), 0u) << commands[0];
  EXPECT_EQ(workflow_command_lines(r.err), std::vector<std::string>{}) << r.err;

  // The repro line on stdout, pasted into bash, runs the real file.
  std::string repro;
  for (const auto& l : lines_of(r.out)) {
    const std::string key = "      repro:  ";
    if (l.rfind(key, 0) == 0) repro = l.substr(key.size());
  }
  ASSERT_FALSE(repro.empty()) << r.out;
  EXPECT_EQ(bash_words(repro), (std::vector<std::string>{"run", scenario.string()})) << repro;

  // The job summary's reproduce block: one line, the real file.
  const std::string md = read_text(summary);
  const std::string fence = "Reproduce:\n\n```sh\n";
  const size_t at = md.find(fence);
  ASSERT_NE(at, std::string::npos) << md;
  const std::string block = md.substr(at + fence.size(), md.find('\n', at + fence.size()) - at - fence.size());
  EXPECT_EQ(bash_words(block), (std::vector<std::string>{"run", scenario.string()})) << block;

  // report.md: the Testing step's code span is one line holding the command.
  fs::path report;
  for (const auto& e : fs::directory_iterator(dir / "out")) {
    if (fs::exists(e.path() / "report.md")) report = e.path() / "report.md";
  }
  ASSERT_FALSE(report.empty());
  const std::string text = read_text(report);
  const size_t step = text.find("2. Re-run `");
  ASSERT_NE(step, std::string::npos) << text;
  const std::string line = text.substr(step, text.find('\n', step) - step);
  EXPECT_NE(line.find("::error file=evil::pwn.yaml'`."), std::string::npos) << line;
  EXPECT_EQ(text.find("\n::error"), std::string::npos) << text;
  const nlohmann::json j = json::parse(read_text(report.parent_path() / "report.json"));
  EXPECT_EQ(bash_words(j["repro"]["command"].get<std::string>()), (std::vector<std::string>{"run", scenario.string()}));
}

TEST(CiConventionsTest, SuiteJsonPrintsOnlyTheJsonDocument) {
  const fs::path dir = testing::fresh_dir("dbh-ci-json");
  testing::RemoveOnExit cleanup(dir);
  write_failing(dir / "s" / "f.yaml");
  EnvChanges env = no_ci();
  env["GITHUB_ACTIONS"] = "true";  // annotations too go to stderr
  env["GITHUB_STEP_SUMMARY"] = (dir / "summary.md").string();
  const auto r = dbh({"suite", (dir / "s").string(), "--out", (dir / "out").string(), "--json"}, env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "stdout is not one JSON document:\n" << r.out;
  EXPECT_EQ(j.at("completed"), 1);
  EXPECT_EQ(j.at("expectations_met"), 0);
  EXPECT_NE(r.err.find("0 passed, 1 failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("::error title=dbh f::"), std::string::npos) << r.err;
}

// --junit never replaces what dbh did not write, and is checked before the
// run: a refusal leaves no output folder.
TEST(CiConventionsTest, JunitRefusesTheScenarioAndTheUsersFiles) {
  const fs::path dir = testing::fresh_dir("dbh-ci-junit");
  testing::RemoveOnExit cleanup(dir);
  const fs::path scenario = dir / "f.yaml";
  write_failing(scenario);
  const std::string scenario_text = read_text(scenario);
  write_text(dir / "notes.xml", "<notes>the user's</notes>\n");
  fs::create_symlink(dir / "notes.xml", dir / "link.xml");
  fs::create_directories(dir / "folder");
  const fs::path out = dir / "out";
  struct Case {
    fs::path junit;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {scenario, "dbh run: --junit: expected a file other than the scenarios being run"},
           {dir / "notes.xml", "got a regular file that is not a JUnit file dbh wrote"},
           {dir / "link.xml", "got a symbolic link"},
           {dir / "folder", "got a directory"},
           {out / "report.json", "--junit: expected a file outside the output folder"},
           {dir / "no-folder" / "j.xml", "--junit: expected a file in an existing folder"},
           // A folder that looks writable (root may write everywhere) but
           // takes no file: the check creates one there.
           {"/proc/dbh-junit.xml", "--junit: expected a file in a folder dbh may write, got the kernel's proc file system"},
       }) {
    const auto r = dbh({"run", scenario.string(), "--out", out.string(), "--junit", c.junit.string()}, no_ci());
    EXPECT_EQ(r.exit_code, 2) << c.junit << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.junit << "\n" << r.err;
    EXPECT_EQ(r.out.find("step"), std::string::npos) << "ran before refusing:\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << c.junit;
  }
  EXPECT_EQ(read_text(scenario), scenario_text);
  EXPECT_EQ(read_text(dir / "notes.xml"), "<notes>the user's</notes>\n");
  EXPECT_TRUE(fs::is_symlink(dir / "link.xml"));
  EXPECT_TRUE(fs::is_directory(dir / "folder"));
  // The suite refuses its own scenarios too.
  const auto s = dbh({"suite", dir.string(), "--out", out.string(), "--junit", scenario.string()}, no_ci());
  EXPECT_EQ(s.exit_code, 2) << s.out << s.err;
  EXPECT_NE(s.err.find("dbh suite: --junit: expected a file other than the scenarios being run"), std::string::npos)
      << s.err;
  EXPECT_EQ(read_text(scenario), scenario_text);
  EXPECT_FALSE(fs::exists(out));

  // A JUnit file dbh wrote is replaced by the next run.
  const fs::path junit = dir / "junit.xml";
  const auto first = dbh({"run", scenario.string(), "--out", (dir / "r1").string(), "--junit", junit.string(), "-q"},
                         no_ci());
  ASSERT_EQ(first.exit_code, 1) << first.out << first.err;
  const auto again = dbh({"suite", (dir / "f.yaml").string(), "--out", (dir / "r2").string(), "--junit",
                          junit.string(), "-q"},
                         no_ci());
  EXPECT_EQ(again.exit_code, 1) << again.out << again.err;
  EXPECT_NE(read_text(junit).find("dbh.suite"), std::string::npos) << read_text(junit);
  // The junit.xml a suite writes into its own folder anyway may be named (as
  // examples/slurm does for dbh merge).
  const auto own = dbh({"suite", (dir / "f.yaml").string(), "--out", (dir / "r3").string(), "--junit",
                        (dir / "r3" / "junit.xml").string(), "-q"},
                       no_ci());
  EXPECT_EQ(own.exit_code, 1) << own.out << own.err;
  EXPECT_NE(read_text(dir / "r3" / "junit.xml").find("<testsuites name=\"dbh\""), std::string::npos);
}

// Scheduler variables that are set but not numbers stop the suite before
// anything runs, naming the variable (they were ignored: every job ran every
// scenario).
TEST(SlurmEnvironmentTest, VariablesThatAreNotNumbersAreBadInput) {
  const fs::path dir = testing::fresh_dir("dbh-ci-slurm");
  testing::RemoveOnExit cleanup(dir);
  write_failing(dir / "f.yaml");
  struct Case {
    EnvChanges env;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{{"SLURM_ARRAY_TASK_ID", "abc"}, {"SLURM_ARRAY_TASK_COUNT", "2"}},
            "SLURM_ARRAY_TASK_ID: expected a non-negative integer, got \"abc\""},
           {{{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", " 1"}},
            "SLURM_ARRAY_TASK_COUNT: expected a non-negative integer, got \" 1\""},
           {{{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "2"}, {"SLURM_ARRAY_TASK_MIN", "one"}},
            "SLURM_ARRAY_TASK_MIN: expected a non-negative integer"},
           {{{"CI_NODE_INDEX", "0"}, {"CI_NODE_TOTAL", "2"}},
            "CI_NODE_INDEX: expected a 1-based job index in [1, 2] (CI_NODE_TOTAL 2), got 0"},
           {{{"CI_NODE_INDEX", "first"}, {"CI_NODE_TOTAL", "2"}}, "CI_NODE_INDEX: expected a 1-based job index"},
           {{{"JOB_COMPLETION_INDEX", "x"}, {"DBH_SHARD_COUNT", "2"}}, "JOB_COMPLETION_INDEX: expected"},
       }) {
    EnvChanges env = no_ci();
    for (const char* v : {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "CI_NODE_INDEX",
                          "CI_NODE_TOTAL", "JOB_COMPLETION_INDEX", "DBH_SHARD_COUNT", "GTEST_SHARD_INDEX",
                          "GTEST_TOTAL_SHARDS", "TEST_SHARD_INDEX", "TEST_TOTAL_SHARDS"}) {
      env[v] = std::nullopt;
    }
    for (const auto& [k, v] : c.env) env[k] = v;
    const auto r = dbh({"suite", (dir / "f.yaml").string(), "--out", (dir / "out").string()}, env);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / "out")) << c.message;
  }
}

}  // namespace
}  // namespace dbh

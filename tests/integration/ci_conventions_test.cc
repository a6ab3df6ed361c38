// `dbh run` and `dbh suite` under CI services, as a workflow runs them: the
// GitHub job summary and annotations, GitLab's JUnit attachments,
// --no-progress and --print-config.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
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

}  // namespace
}  // namespace dbh

#include "harness/report/ci_conventions.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/common/text.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

using dbh::testing::fresh_dir;
using dbh::testing::read_text;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Table-cell separators in a Markdown line: '|' not escaped by a backslash.
int unescaped_pipes(const std::string& line) {
  int n = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\') {
      ++i;
    } else if (line[i] == '|') {
      ++n;
    }
  }
  return n;
}

report::CiResult passed(const std::string& name) {
  report::CiResult r;
  r.scenario = name;
  r.outcome = "passed";
  r.expectation_met = true;
  r.report = "/ws/reports/runs/" + name + "/report.md";
  return r;
}

report::CiResult failed(const std::string& name) {
  report::CiResult r;
  r.scenario = name;
  r.outcome = "diverged";
  r.klass = "nonfinite_activation";
  r.step = 1;
  r.module = "decoder.fusion";
  r.why = {"outcome: expected passed, got diverged"};
  r.message = "non-finite output of decoder.fusion at step 1\nsecond line\nthird";
  r.repro = "dbh run scenarios/" + name + ".yaml";
  r.report = "/ws/reports/runs/" + name + "/report.md";
  return r;
}

TEST(CiConventionsTest, ReadsTheEnvironment) {
  const auto ci = report::ci_environment({{"GITHUB_ACTIONS", "true"}, {"GITHUB_STEP_SUMMARY", "/s.md"},
                                  {"GITLAB_CI", "true"}, {"CI_PROJECT_DIR", "/builds/p"}});
  EXPECT_TRUE(ci.github_actions);
  EXPECT_EQ(ci.github_step_summary, "/s.md");
  EXPECT_TRUE(ci.gitlab_ci);
  EXPECT_EQ(ci.gitlab_project_dir, "/builds/p");
  EXPECT_FALSE(report::ci_environment({{"GITHUB_ACTIONS", "1"}, {"GITLAB_CI", ""}}).github_actions);
  EXPECT_FALSE(report::ci_environment({}).gitlab_ci);
}

TEST(CiConventionsTest, EscapesWorkflowCommandsAsGithubDoes) {
  EXPECT_EQ(report::github_escape_data("100% done\r\nnext: a,b"), "100%25 done%0D%0Anext: a,b");
  EXPECT_EQ(report::github_escape_property("a:b,c%\n"), "a%3Ab%2Cc%25%0A");
  EXPECT_EQ(report::github_escape_data("bad \xFF byte"), "bad \xEF\xBF\xBD byte");
  // A message cannot start a second command on a line of its own.
  const std::string a = report::github_annotation("error", "dbh x:y,z", "first\n::add-mask::secret\r\n%0A");
  EXPECT_EQ(a, "::error title=dbh x%3Ay%2Cz::first%0A::add-mask::secret%0D%0A%250A\n");
  EXPECT_EQ(lines_of(a).size(), 1u);
  // A title is one line, whatever the scenario name holds.
  EXPECT_EQ(report::github_annotation("warning", "a\nb", "m"), "::warning title=a b::m\n");
}

TEST(CiConventionsTest, AnnotatesUnmetExpectationsAndUnsureResults) {
  report::CiResult unsure = passed("flaky");
  unsure.outcome = "nondeterministic";
  unsure.unsure = true;
  const std::string a = report::github_annotations({passed("ok"), failed("bad"), unsure});
  const auto lines = lines_of(a);
  ASSERT_EQ(lines.size(), 2u) << a;
  EXPECT_EQ(lines[0].rfind("::error title=dbh bad::diverged (nonfinite_activation at step 1 in decoder.fusion): "
                           "expectation not met%0Aoutcome: expected passed, got diverged%0Anon-finite",
                           0),
            0u)
      << lines[0];
  EXPECT_NE(lines[0].find("%0Arepro: dbh run scenarios/bad.yaml"), std::string::npos);
  EXPECT_EQ(lines[1].rfind("::warning title=dbh flaky::nondeterministic", 0), 0u) << lines[1];
}

TEST(CiConventionsTest, AnnotationsStayWithinGithubsLimit) {
  std::vector<report::CiResult> many;
  for (int i = 0; i < 12; ++i) many.push_back(failed("s" + std::to_string(i)));
  const auto lines = lines_of(report::github_annotations(many));
  ASSERT_EQ(lines.size(), report::kGithubAnnotationLimit);
  EXPECT_EQ(lines.back(), "::error title=dbh::3 more scenario(s) did not meet their expectation; see the job summary");
}

TEST(CiConventionsTest, SummaryHasOneRowPerScenarioAndTheFailures) {
  const std::string md = report::github_summary_markdown("dbh suite", {passed("ok"), failed("bad")}, "/ws");
  EXPECT_EQ(md.rfind("### \xE2\x9D\x8C dbh suite: 1 of 2 expectation(s) met\n", 0), 0u) << md;
  EXPECT_NE(md.find("| ok | passed |  |  |  | \xE2\x9C\x85 met | reports/runs/ok/report.md |\n"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| bad | diverged | nonfinite\\_activation | 1 | decoder.fusion | \xE2\x9D\x8C not met | "
                    "reports/runs/bad/report.md |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("#### Failures"), std::string::npos);
  EXPECT_NE(md.find("```text\nnon-finite output of decoder.fusion at step 1\nsecond line\nthird\n```\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("```sh\ndbh run scenarios/bad.yaml\n```\n"), std::string::npos) << md;
  // All passed: no failures section.
  const std::string ok = report::github_summary_markdown("dbh run ok", {passed("ok")}, "");
  EXPECT_EQ(ok.find("Failures"), std::string::npos);
  EXPECT_NE(ok.find("| /ws/reports/runs/ok/report.md |"), std::string::npos) << "outside a workspace: as given";
}

// A run in which nothing ran here is headed as a skip, never with a tick
// (its exit status is 4); a skip beside a pass keeps the tick.
TEST(CiConventionsTest, SummaryOfOnlySkipsIsHeadedAsASkip) {
  report::CiResult gpu = passed("gpu");
  gpu.skipped = true;
  gpu.expectation_met = false;
  gpu.outcome = "skipped";
  const std::string md = report::github_summary_markdown("dbh run gpu", {gpu}, "");
  EXPECT_EQ(md.rfind("### \xE2\x8F\xAD\xEF\xB8\x8F dbh run gpu: nothing run on this machine, 1 skipped (not run on "
                     "this machine)\n",
                     0),
            0u)
      << md;
  EXPECT_EQ(md.find("\xE2\x9C\x85 dbh"), std::string::npos) << md;
  const std::string mixed = report::github_summary_markdown("dbh suite", {passed("ok"), gpu}, "");
  EXPECT_EQ(mixed.rfind("### \xE2\x9C\x85 dbh suite: 1 of 1 expectation(s) met, 1 skipped", 0), 0u) << mixed;
}

TEST(CiConventionsTest, SummaryEscapesUserStrings) {
  report::CiResult r = failed("a|b <script>alert(1)</script> *x* [l](u) &amp; ~~s~~\nnext");
  r.message = "```\n</details> | ```` fence";
  r.module = "m|n";
  const std::string md = report::github_summary_markdown("dbh <b>suite</b>", {r}, "");
  // No raw HTML outside code blocks (where it is shown, not rendered).
  std::string outside_code;
  size_t fence = 0;  // length of the open code fence, 0 outside code
  for (const auto& line : lines_of(md)) {
    const size_t ticks = line.find_first_not_of('`') == std::string::npos ? line.size() : line.find_first_not_of('`');
    if (fence == 0 && ticks >= 3) {
      fence = ticks;
    } else if (fence > 0 && ticks >= fence && ticks == line.size()) {
      fence = 0;
    } else if (fence == 0) {
      outside_code += line + "\n";
    }
  }
  EXPECT_EQ(outside_code.find("<script>"), std::string::npos) << md;
  EXPECT_EQ(outside_code.find("<b>"), std::string::npos) << md;
  EXPECT_EQ(outside_code.find("</details>"), std::string::npos) << md;
  EXPECT_NE(md.find("a\\|b \\<script\\>alert(1)\\</script\\> \\*x\\* \\[l\\]\\(u) \\&amp; \\~\\~s\\~\\~ next"),
            std::string::npos)
      << md;
  for (const auto& line : lines_of(md)) {
    if (line.rfind("| ", 0) == 0) {
      EXPECT_EQ(unescaped_pipes(line), 8) << line;
    }
  }
  // The message's own fences cannot close the block that holds it.
  EXPECT_NE(md.find("`````text\n```\n</details> | ```` fence\n`````\n"), std::string::npos) << md;
}

TEST(CiConventionsTest, SummaryIsCutBetweenRowsWithinTheLimit) {
  std::vector<report::CiResult> many;
  // Multi-byte names, long messages: a cut inside a row or a character would show.
  for (int i = 0; i < 6000; ++i) {
    report::CiResult r = failed("szenario-\xC3\xA4\xC3\xB6\xC3\xBC-" + std::to_string(i) + std::string(150, 'x'));
    r.message = std::string(2000, 'm') + "\n" + std::string(400, 'n');
    many.push_back(r);
  }
  for (const size_t limit : {report::kGithubSummaryLimit, size_t{4096}, size_t{1000}}) {
    const std::string md = report::github_summary_markdown("dbh suite", many, "/ws", limit);
    ASSERT_FALSE(md.empty());
    EXPECT_LE(md.size(), limit);
    EXPECT_EQ(valid_utf8(md), md);
    EXPECT_NE(md.find("more scenario(s)"), std::string::npos) << md.substr(md.size() - 300);
    for (const auto& line : lines_of(md)) {
      if (line.rfind("| ", 0) == 0) {
        EXPECT_EQ(unescaped_pipes(line), 8) << line;
      }
    }
  }
  // Rows fit, failure blocks do not all fit: cut between blocks.
  std::vector<report::CiResult> few(many.begin(), many.begin() + 40);
  const std::string md = report::github_summary_markdown("dbh suite", few, "/ws", 20000);
  EXPECT_LE(md.size(), 20000u);
  EXPECT_NE(md.find("#### Failures"), std::string::npos);
  EXPECT_NE(md.find("more failure(s) not shown"), std::string::npos);
  size_t fences = 0;
  for (const auto& line : lines_of(md)) fences += line.rfind("```", 0) == 0 ? 1 : 0;
  EXPECT_EQ(fences % 2, 0u) << "a code block was cut";
  // Not even the heading fits.
  EXPECT_EQ(report::github_summary_markdown("dbh suite", many, "/ws", 100), "");
}

TEST(CiConventionsTest, PublishesAnnotationsAndAppendsTheSummary) {
  const fs::path dir = fresh_dir("dbh-ci");
  const fs::path summary = dir / "summary.md";
  std::ofstream(summary) << "earlier step output\n";
  report::CiEnvironment ci;
  ci.github_actions = true;
  ci.github_step_summary = summary.string();
  std::ostringstream out, err;
  report::publish_to_github(ci, "dbh suite", {passed("ok"), failed("bad")}, out, err);
  EXPECT_EQ(err.str(), "");
  EXPECT_EQ(out.str().rfind("::error title=dbh bad::", 0), 0u) << out.str();
  const std::string text = read_text(summary);
  EXPECT_EQ(text.rfind("earlier step output\n\n### ", 0), 0u) << text;
  EXPECT_NE(text.find("| bad | diverged |"), std::string::npos);
  // Nothing outside GitHub Actions.
  std::ostringstream out2, err2;
  report::publish_to_github(report::CiEnvironment{}, "dbh suite", {failed("bad")}, out2, err2);
  EXPECT_EQ(out2.str() + err2.str(), "");
  // A nearly full file: what is appended keeps it within 1 MiB.
  std::ofstream(summary, std::ios::trunc) << std::string(report::kGithubSummaryLimit - 20000, 'x');
  std::vector<report::CiResult> many(500, failed("bad"));
  std::ostringstream out3, err3;
  report::publish_to_github(ci, "dbh suite", many, out3, err3);
  EXPECT_EQ(err3.str(), "");
  EXPECT_LE(fs::file_size(summary), report::kGithubSummaryLimit);
  EXPECT_GT(fs::file_size(summary), report::kGithubSummaryLimit - 20000);
  fs::remove_all(dir);
}

// The only test that makes publish_to_github warn (the warning is once per
// process; ctest runs each test in its own process).
TEST(CiConventionsTest, WarnsOnceWhenTheSummaryCannotBeWritten) {
  const fs::path dir = fresh_dir("dbh-ci");
  report::CiEnvironment ci;
  ci.github_actions = true;
  std::ostringstream out, err;
  report::publish_to_github(ci, "dbh run", {failed("bad")}, out, err);  // unset
  EXPECT_NE(err.str().find("GITHUB_STEP_SUMMARY is not set"), std::string::npos) << err.str();
  EXPECT_EQ(out.str().rfind("::error title=dbh bad::", 0), 0u) << "annotations go out regardless";
  ci.github_step_summary = dir.string();  // a folder: cannot be appended to
  std::ostringstream out2, err2;
  report::publish_to_github(ci, "dbh run", {failed("bad")}, out2, err2);
  EXPECT_EQ(err2.str(), "") << "warned once already";
  EXPECT_FALSE(out2.str().empty());
  fs::remove_all(dir);
}

TEST(CiConventionsTest, GitlabAttachmentsNameTheReportFirstRelativeToTheProject) {
  const fs::path project = fresh_dir("dbh-ci");
  const fs::path run = project / "reports" / "runs" / "bad";
  fs::create_directories(run);
  for (const char* f : {"report.md", "loss.png", "memory.png", "events.jsonl"}) std::ofstream(run / f) << "x";
  EXPECT_EQ(report::gitlab_attachments(run.string(), project.string()),
            "[[ATTACHMENT|reports/runs/bad/report.md]]\n[[ATTACHMENT|reports/runs/bad/loss.png]]\n"
            "[[ATTACHMENT|reports/runs/bad/memory.png]]\n");
  // Outside the project folder (or without one): absolute paths.
  EXPECT_EQ(report::gitlab_attachments(run.string(), "/nonexistent/project").rfind("[[ATTACHMENT|" + run.string() + "/report.md]]", 0),
            0u);
  EXPECT_EQ(report::gitlab_attachments(run.string(), "").rfind("[[ATTACHMENT|/", 0), 0u);
  // A path the marker cannot carry is left out.
  const fs::path odd = project / "a|b]]c";
  fs::create_directories(odd);
  std::ofstream(odd / "report.md") << "x";
  EXPECT_EQ(report::gitlab_attachments(odd.string(), project.string()), "");
  EXPECT_EQ(report::gitlab_attachments("", project.string()), "");
  fs::remove_all(project);
}

}  // namespace
}  // namespace dbh::harness

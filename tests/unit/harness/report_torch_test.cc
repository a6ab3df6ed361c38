// The report writers on a RunReport built in memory: report.md, report.html
// and JUnit XML name a failure's class, step and module, and carry a hostile
// scenario name (backticks, `|`, `<script>`, a newline, invalid UTF-8) as
// escaped text in valid UTF-8, without breaking a Markdown table or the XML.
#include "harness/report/report.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/common/text.h"
#include "harness/report/report_html.h"
#include "harness/scenario/scenario.h"
#include "harness/common/value.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

// Backticks, a table pipe, markup, a newline, two invalid bytes and a
// truncated sequence.
const std::string kHostile = "evil`tick` | pipe <script>alert(1)</script>\nline two \xff\xfe end \xc3";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or values
// past U+10FFFF), checked here independently of harness/common/text.h.
::testing::AssertionResult IsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return ::testing::AssertionFailure() << "invalid lead byte at " << i;
    }
    if (i + n > s.size()) return ::testing::AssertionFailure() << "truncated sequence at " << i;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return ::testing::AssertionFailure() << "bad continuation byte at " << i + k;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return ::testing::AssertionFailure() << "invalid code point at " << i;
    }
    i += n;
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// report.md's YAML front matter (from the first "---" line to the next,
// included; "" when there is none), and what follows it.
std::string front_matter_of(const std::string& md) {
  const size_t end = md.find("\n---\n", 3);
  return md.rfind("---\n", 0) == 0 && end != std::string::npos ? md.substr(0, end + 5) : "";
}
std::string body_of(const std::string& md) {
  return md.substr(front_matter_of(md).size());
}

// Whether Markdown `md` holds a `<script` that a renderer would take as HTML:
// one not escaped by a backslash.
bool has_raw_script(const std::string& md) {
  for (size_t i = 0; (i = md.find("<script", i)) != std::string::npos; ++i) {
    if (i == 0 || md[i - 1] != '\\') return true;
  }
  return false;
}

// Cell separators of a Markdown table row: `|` not escaped by a backslash
// (GitHub splits cells at a `|` even inside a code span).
size_t cell_separators(const std::string& row) {
  size_t n = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == '\\') {
      ++i;
    } else if (row[i] == '|') {
      ++n;
    }
  }
  return n;
}

// Every row of every table of `md` has as many cells as its header row.
::testing::AssertionResult TablesAreIntact(const std::string& md) {
  const auto lines = lines_of(md);
  size_t tables = 0;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].rfind("|", 0) != 0 || lines[i + 1].rfind("|---", 0) != 0) continue;
    ++tables;
    const size_t want = cell_separators(lines[i]);
    for (size_t k = i + 2; k < lines.size() && lines[k].rfind("|", 0) == 0; ++k) {
      if (cell_separators(lines[k]) != want) {
        return ::testing::AssertionFailure() << "row " << k + 1 << " has " << cell_separators(lines[k])
                                             << " cell separators, its header " << want << ": " << lines[k];
      }
    }
  }
  if (tables == 0) return ::testing::AssertionFailure() << "no table at all";
  return ::testing::AssertionSuccess();
}

// Every `<` of `xml` opens one of the tags junit_xml writes, and every `&`
// an entity: nothing from a scenario reached the XML unescaped.
::testing::AssertionResult IsJUnitMarkupOnly(const std::string& xml) {
  const std::vector<std::string> tags = {"?xml ",     "testsuites ", "/testsuites>", "testsuite ", "/testsuite>",
                                         "testcase ", "/testcase>",  "failure ",     "/failure>",  "error ",
                                         "/error>",   "system-out>", "/system-out>"};
  const std::vector<std::string> entities = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  for (size_t i = 0; i < xml.size(); ++i) {
    const std::string rest = xml.substr(i, 16);
    if (xml[i] == '<') {
      bool ok = false;
      for (const auto& t : tags)
        ok = ok || rest.rfind("<" + t, 0) == 0;
      if (!ok) return ::testing::AssertionFailure() << "unexpected markup at " << i << ": " << xml.substr(i, 40);
    } else if (xml[i] == '&') {
      bool ok = false;
      for (const auto& e : entities)
        ok = ok || rest.rfind(e, 0) == 0;
      if (!ok) return ::testing::AssertionFailure() << "bare & at " << i << ": " << xml.substr(i, 40);
    } else if (static_cast<unsigned char>(xml[i]) < 0x20 && xml[i] != '\n' && xml[i] != '\t' && xml[i] != '\r') {
      return ::testing::AssertionFailure() << "control byte " << int(xml[i]) << " at " << i;
    }
  }
  return ::testing::AssertionSuccess();
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_dir("report"); }
  void TearDown() override { testing::RemoveOnExit remove(dir_); }

  // A run that diverged in decoder.fusion at step 7 (class
  // nonfinite_activation) where the scenario expected it to pass.
  run::RunReport failing_run(const std::string& name) const {
    run::RunReport r;
    r.scenario = scenario::decode_scenario(
        parse_yaml("train: {max_steps: 10}\nfaults:\n  - {name: nan_activation, module: decoder.fusion, at_step: 7}\n",
                   "failing.yaml"),
        "failing.yaml");
    r.scenario.name = name;
    r.out_dir = dir_.string();
    r.started_at = "2026-01-02T03:04:05+0000";
    r.seconds = 12.5;
    r.env.dbh_version = "0.0.0-test";
    r.env.torch_version = "2.11.0";
    r.env.opencv_version = "4.6.0";
    r.env.cpu_model = "test CPU";
    r.env.cpu_cores = 2;
    r.outcome = scenario::Outcome::kDiverged;
    r.failure.klass = "nonfinite_activation";
    r.failure.step = 7;
    r.failure.run = 0;
    r.failure.module = "decoder.fusion";
    r.failure.message = "non-finite activation in decoder.fusion at step 7";
    r.failure.evidence = {"health: activation decoder.fusion non-finite at step 7 (cheap mode)"};
    run::TrialRecord main;
    main.label = "main";
    main.dir = (dir_ / "main").string();
    main.analysis.outcome = scenario::Outcome::kDiverged;
    main.analysis.failure = r.failure;
    main.analysis.steps_completed = 7;
    main.analysis.seconds = 12.0;
    supervisor::FaultRecord fault;
    fault.name = "nan_activation";
    fault.fired = true;
    fault.steps = {7};
    fault.module = "decoder.fusion";
    main.analysis.faults.push_back(fault);
    r.trials.push_back(main);
    r.expectation_met = false;
    r.expectation_why = {"outcome: expected passed, got diverged"};
    r.repro_command = "dbh reproduce --scenario failing.yaml --seed 42";
    return r;
  }

  std::filesystem::path dir_;
};

// ---- A failing run names its class, step and module.

TEST_F(ReportTest, MarkdownNamesTheClassStepAndModule) {
  const std::string md = report::report_markdown(failing_run("fail-in-fusion"));
  EXPECT_TRUE(contains(md, "# A module's forward output became non-finite in decoder.fusion at step 7\n")) << md;
  EXPECT_TRUE(contains(md, "ended **diverged** (class `nonfinite_activation`) at step 7 in module `decoder.fusion`"))
      << md;
  EXPECT_TRUE(contains(md, "| main | diverged | nonfinite_activation | 7 | decoder.fusion | 7 |")) << md;
  EXPECT_TRUE(contains(md, "| nan_activation | 7 | decoder.fusion | yes |")) << md;
  EXPECT_TRUE(contains(md, "tags: ['bug_report', 'dbh', 'nonfinite_activation']")) << md;
  EXPECT_TRUE(contains(md, "was **not met**")) << md;
  EXPECT_TRUE(TablesAreIntact(md));
  EXPECT_TRUE(IsValidUtf8(md));
}

TEST_F(ReportTest, HtmlNamesTheClassStepAndModule) {
  const std::string html = report::report_html(failing_run("fail-in-fusion"));
  EXPECT_TRUE(contains(html, "<h1>A module&apos;s forward output became non-finite in decoder.fusion at step 7</h1>"))
      << html.substr(0, 3000);
  EXPECT_TRUE(contains(html, "<tr><th>Class</th><td><code>nonfinite_activation</code>"));
  EXPECT_TRUE(contains(html, "<tr><th>Step</th><td>7</td></tr>"));
  EXPECT_TRUE(contains(html, "<tr><th>Module</th><td><code>decoder.fusion</code></td></tr>"));
  EXPECT_TRUE(IsValidUtf8(html));
}

TEST_F(ReportTest, JUnitReportsTheUnmetExpectationAsAFailure) {
  const run::RunReport failing = failing_run("fail-in-fusion");
  run::RunReport passing = failing_run("passes");
  passing.outcome = scenario::Outcome::kPassed;
  passing.failure = supervisor::Failure{};
  passing.expectation_met = true;
  const std::string xml = report::junit_xml({failing, passing}, "suite");
  EXPECT_TRUE(contains(xml, "<testsuites name=\"dbh\" tests=\"2\" failures=\"1\" errors=\"0\"")) << xml;
  EXPECT_TRUE(contains(xml,
                       "<failure type=\"diverged\" message=\"outcome: expected passed, got diverged; \">"
                       "non-finite activation in decoder.fusion at step 7\nrepro: dbh reproduce"))
      << xml;
  // One failure element, in the failing run's testcase.
  EXPECT_EQ(xml.find("<failure"), xml.rfind("<failure"));
  EXPECT_LT(xml.find("name=\"fail-in-fusion\""), xml.find("<failure"));
  EXPECT_LT(xml.find("<failure"), xml.find("name=\"passes\""));
  EXPECT_TRUE(IsJUnitMarkupOnly(xml));
}

// report.json, the machine report: the same failure, and the environment as
// environment_json writes it.
TEST_F(ReportTest, JsonNamesTheClassStepAndModuleAndTheEnvironment) {
  const run::RunReport r = failing_run("fail-in-fusion");
  const auto j = report::report_json(r);
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("outcome"), "diverged");
  EXPECT_EQ(j.at("failure").at("class"), "nonfinite_activation");
  EXPECT_EQ(j.at("failure").at("step"), 7);
  EXPECT_EQ(j.at("failure").at("module"), "decoder.fusion");
  EXPECT_EQ(j.at("faults").at(0).at("fired_at_steps"), nlohmann::ordered_json::array({7}));
  EXPECT_EQ(j.at("environment"), nlohmann::ordered_json::parse(env::environment_json(r.env)));
  EXPECT_EQ(j.at("repro").at("command"), r.repro_command);
}

// A crash, a timeout, a hang or an unresolved run is an `error`, not a `failure`.
TEST_F(ReportTest, JUnitReportsACrashAsAnError) {
  run::RunReport r = failing_run("crash");
  r.outcome = scenario::Outcome::kCrashed;
  const std::string xml = report::junit_xml({r}, "suite");
  EXPECT_TRUE(contains(xml, "failures=\"0\" errors=\"1\"")) << xml;
  EXPECT_TRUE(contains(xml, "<error type=\"crashed\"")) << xml;
  EXPECT_FALSE(contains(xml, "<failure"));
}

// A control trial's overrides (the user's text) stay in their table cell.
// They are escaped text there, not a code span, in which GitHub would still
// end the cell at a `|` (and a backtick would end the span).
TEST_F(ReportTest, MarkdownKeepsAControlsOverridesInOneCell) {
  run::RunReport r = failing_run("with-control");
  run::TrialRecord control = r.trials.front();
  control.label = "control 1";
  control.overrides = {"data.path=/data/a|b`c"};
  r.trials.push_back(control);
  const std::string md = report::report_markdown(r);
  EXPECT_TRUE(TablesAreIntact(md)) << md;
}

// A message or a worker's stderr holding a code fence does not end the
// report's code block: the report's own headings stay outside every block.
// The Summary carries the message as one escaped line; the code blocks carry
// it, the secondary errors and the stderr tail through fenced().
TEST_F(ReportTest, MarkdownCodeBlocksHoldAnyText) {
  run::RunReport r = failing_run("fences");
  r.failure.message = "boom\n```\n## Injected heading";
  r.trials.front().stderr_tail = "log\n```\n# Injected from stderr\n";
  const std::string md = report::report_markdown(r);
  bool in_block = false;
  std::vector<std::string> misplaced;  // headings on the wrong side of a fence
  for (const auto& line : lines_of(md)) {
    if (line.rfind("```", 0) == 0) in_block = !in_block;
    if (line.rfind("## ", 0) == 0 || line.rfind("# ", 0) == 0) {
      const bool ours = line != "## Injected heading" && line != "# Injected from stderr";
      if (in_block == ours) misplaced.push_back(line);
    }
  }
  EXPECT_TRUE(misplaced.empty()) << ::testing::PrintToString(misplaced) << "\n" << md;
}

// ---- A hostile scenario name stays text.

TEST_F(ReportTest, MarkdownEscapesAHostileScenarioName) {
  const std::string md = report::report_markdown(failing_run(kHostile));
  EXPECT_TRUE(IsValidUtf8(md));
  EXPECT_FALSE(has_raw_script(body_of(md))) << md;
  EXPECT_TRUE(TablesAreIntact(md));
  // In the summary: one line, markup escaped, bad bytes replaced.
  EXPECT_TRUE(contains(md,
                       "Training under scenario evil\\`tick\\` \\| pipe \\<script\\>alert(1)\\</script\\> line two "
                       "\xEF\xBF\xBD\xEF\xBF\xBD end \xEF\xBF\xBD ended **diverged**"))
      << md;
}

TEST_F(ReportTest, MarkdownTitleOfAPassingRunEscapesTheName) {
  run::RunReport r = failing_run(kHostile);
  r.outcome = scenario::Outcome::kPassed;
  r.failure = supervisor::Failure{};
  r.expectation_met = true;
  const std::string md = report::report_markdown(r);
  EXPECT_TRUE(IsValidUtf8(md));
  EXPECT_TRUE(contains(md, "\n# Scenario evil\\`tick\\` \\| pipe \\<script\\>")) << md;
  EXPECT_FALSE(has_raw_script(body_of(md))) << md;
  EXPECT_TRUE(TablesAreIntact(md));
}

// The YAML front matter holds the name as a one-line JSON string (valid
// YAML), in valid UTF-8.
TEST_F(ReportTest, MarkdownFrontMatterQuotesAHostileScenarioName) {
  const std::string md = report::report_markdown(failing_run(kHostile));
  const std::string front = front_matter_of(md);
  ASSERT_FALSE(front.empty()) << md;
  EXPECT_TRUE(IsValidUtf8(front));
  EXPECT_TRUE(contains(front,
                       "\nscenario: \"evil`tick` | pipe \\u003cscript\\u003ealert(1)\\u003c/script\\u003e line two "
                       "\xEF\xBF\xBD\xEF\xBF\xBD end \xEF\xBF\xBD\"\n"))
      << front;
}

// No markup in the front matter either (a renderer that does not know front
// matter shows it as a paragraph): `<` and `>` as YAML's \u escapes.
TEST_F(ReportTest, MarkdownFrontMatterHasNoRawMarkup) {
  const std::string front = front_matter_of(report::report_markdown(failing_run(kHostile)));
  EXPECT_FALSE(contains(front, "<")) << front;
}

TEST_F(ReportTest, HtmlEscapesAHostileScenarioName) {
  const std::string html = report::report_html(failing_run(kHostile));
  EXPECT_TRUE(IsValidUtf8(html));
  EXPECT_FALSE(contains(html, "<script"));
  EXPECT_TRUE(contains(html,
                       "Scenario <strong>evil`tick` | pipe &lt;script&gt;alert(1)&lt;/script&gt;\nline two "
                       "\xEF\xBF\xBD\xEF\xBF\xBD end \xEF\xBF\xBD</strong>"))
      << html.substr(0, 3000);
  // The title is one line.
  EXPECT_TRUE(contains(html, "&lt;/script&gt; line two")) << html.substr(0, 3000);
}

TEST_F(ReportTest, JUnitEscapesAHostileScenarioName) {
  run::RunReport r = failing_run(kHostile);
  r.failure.message = kHostile;
  r.expectation_why = {kHostile};
  const std::string xml = report::junit_xml({r}, kHostile);
  EXPECT_TRUE(IsValidUtf8(xml));
  EXPECT_FALSE(contains(xml, "<script"));
  EXPECT_TRUE(IsJUnitMarkupOnly(xml)) << xml;
  EXPECT_TRUE(contains(xml,
                       "name=\"evil`tick` | pipe &lt;script&gt;alert(1)&lt;/script&gt;\nline two "
                       "\xEF\xBF\xBD\xEF\xBF\xBD end \xEF\xBF\xBD\" time=\""))
      << xml;
}

}  // namespace
}  // namespace dbh::harness

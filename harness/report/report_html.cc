#include "harness/report/report_html.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/proto/events.h"
#include "harness/report/html_page.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::report {
namespace fs = std::filesystem;

namespace {

using ojson = nlohmann::ordered_json;

// Note [Self-contained pages] (html_page.h): every string that reaches the
// page goes through esc(), text and attribute values alike.
std::string esc(const std::string& s) {
  return xml_escape(s);
}

std::string fmt(double v, int precision = 4) {
  std::ostringstream s;
  s << std::setprecision(precision) << v;
  return s.str();
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}


std::string outcome_class(scenario::Outcome o) {
  if (o == scenario::Outcome::kPassed) return "ok";
  if (supervisor::is_failure(o)) return "bad";
  return "warn";
}

std::string badge(scenario::Outcome o) {
  return "<span class=\"badge " + outcome_class(o) + "\">" + esc(to_string(o)) + "</span>";
}

// Rows [0, head) and [n - tail, n) of n, with the number left out between.
struct RowWindow {
  size_t head, tail, n;
  bool shown(size_t i) const { return i < head || i >= n - tail; }
  bool gap_after(size_t i) const { return i + 1 == head && n > head + tail; }
  size_t omitted() const { return n - head - tail; }
};

RowWindow window(size_t n, size_t max_rows, size_t head) {
  if (n <= max_rows) return {n, 0, n};
  return {head, max_rows - head, n};
}

std::string gap_row(size_t omitted, int columns, const std::string& where) {
  return "<tr class=\"gap\"><td colspan=\"" + std::to_string(columns) + "\">… " + std::to_string(omitted) +
         " rows not shown (all of them are in " + esc(where) + ") …</td></tr>\n";
}

std::string num_cell(double v, int precision = 4);
// A value the worker did not measure is an empty cell, never a 0.
std::string num_cell(const std::optional<double>& v, int precision = 4) {
  return v ? num_cell(*v, precision) : "<td class=\"num\"></td>";
}
std::string num_cell(double v, int precision) {
  if (!std::isfinite(v)) return "<td class=\"num nonfinite\">" + esc(fmt(v)) + "</td>";
  return "<td class=\"num\">" + esc(fmt(v, precision)) + "</td>";
}

// Escaped text whose `code spans` (as the knowledge base and the evidence
// write them) become <code>: the tags are inserted after escaping, between
// pairs of backticks, so no input character can open markup.
std::string inline_text(const std::string& s) {
  const std::string e = esc(s);
  if (std::count(e.begin(), e.end(), '`') < 2) return e;
  std::string out;
  bool open = false;
  const size_t last = e.rfind('`');
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i] == '`' && (open || i != last)) {
      out += open ? "</code>" : "<code>";
      open = !open;
    } else {
      out += e[i];
    }
  }
  return out;
}

std::string list_items(const std::vector<std::string>& items, const char* tag) {
  std::string out = std::string("<") + tag + ">\n";
  for (const auto& i : items)
    out += "<li>" + inline_text(i) + "</li>\n";
  return out + "</" + tag + ">\n";
}

// An event's other fields as `key value` pairs, the way a person reads
// them ("class nonfinite_activation · module decoder.fusion"), not as a JSON
// object; a nested value stays compact JSON.
std::string fields_text(const nlohmann::json& fields) {
  std::string out;
  for (const auto& [k, v] : fields.items()) {
    out += (out.empty() ? "" : " · ") + k + " " + (v.is_string() ? v.get<std::string>() : dump(v));
  }
  return out;
}

std::string expectation_text(const ojson& expected) {
  std::string out;
  if (!expected.is_object()) return out;
  for (const auto& [k, v] : expected.items()) {
    out += (out.empty() ? "" : ", ") + k + ": " + (v.is_string() ? v.get<std::string>() : dump(v));
  }
  return out;
}



void events_section(std::ostream& h, const fs::path& events_file) {
  constexpr size_t kHead = 50;
  constexpr size_t kMaxLine = 64 * 1024;
  std::ifstream in(events_file, std::ios::binary);
  h << "<h2 id=\"events\">Events</h2>\n";
  if (!in.is_open()) {
    h << "<p class=\"note\">No event stream (<code>events.jsonl</code>) was found.</p>\n";
    return;
  }
  // Streamed: the first rows and a ring of the last, whatever the file's size.
  std::vector<std::string> head;
  std::deque<std::string> tail;
  const size_t tail_max = kHtmlMaxEventRows - kHead;
  size_t n = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.size() > kMaxLine) line.resize(kMaxLine);
    ++n;
    if (head.size() < kHead) {
      head.push_back(line);
    } else {
      tail.push_back(line);
      if (tail.size() > tail_max) tail.pop_front();
    }
  }
  h << "<p>" << n << " events from the main trial" << (n > kHtmlMaxEventRows ? ", the first and the last shown" : "")
    << "; all of them: <a href=\"./events.jsonl\"><code>events.jsonl</code></a>.</p>\n"
    << "<table class=\"events\"><tr><th>t (s)</th><th>type</th><th>run</th><th>step</th><th>details</th></tr>\n";
  auto row = [&](const std::string& text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      h << "<tr class=\"hl\"><td></td><td>(not JSON)</td><td></td><td></td><td><code>" << esc(truncate_utf8(text, 300))
        << "</code></td></tr>\n";
      return;
    }
    // A worker may write anything: no field is trusted to have its type.
    const std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
    nlohmann::json rest = j;
    for (const char* k : {"t", "type", "run", "step"})
      rest.erase(k);
    const bool hl = type == proto::event::kError || type == proto::event::kHealth || type == proto::event::kFaultFired ||
                    type == proto::event::kWarning;
    auto field = [&](const char* k) { return j.contains(k) ? esc(dump(j[k])) : std::string(); };
    h << "<tr" << (hl ? " class=\"hl\"" : "") << "><td class=\"num\">"
      << (j.contains("t") && j["t"].is_number() ? esc(fmt(j["t"].get<double>(), 6)) : "") << "</td><td>" << esc(type)
      << "</td><td class=\"num\">" << field("run") << "</td><td class=\"num\">" << field("step") << "</td><td><code>"
      << esc(truncate_utf8(fields_text(rest), 300)) << "</code></td></tr>\n";
  };
  for (const auto& l : head)
    row(l);
  if (n > head.size() + tail.size()) h << gap_row(n - head.size() - tail.size(), 5, "events.jsonl");
  for (const auto& l : tail)
    row(l);
  h << "</table>\n";
}

}  // namespace

std::vector<std::string> resolutions_with_checks(const std::vector<std::string>& resolutions,
                                                 const std::vector<run::RunReport::ResolutionCheck>& checks, bool markdown) {
  // Note [Resolutions that are tried]: each tried one says how it went.
  std::vector<std::string> lines = resolutions;
  auto strong = [&](const std::string& w) { return markdown ? "**" + w + "**" : w; };
  auto code = [&](const std::string& t) { return markdown ? markdown_code(t) : "`" + t + "`"; };
  // Where the run that decided it lies; a cached result from an earlier
  // dbh command has no folder of this one's.
  auto where = [&](const std::string& dir) {
    return dir.empty() ? std::string("the result of an identical earlier run, cached") : code(dir + "/");
  };
  for (const auto& c : checks) {
    if (c.resolution >= lines.size()) continue;
    std::string applied;
    for (const auto& kv : c.overrides) applied += (applied.empty() ? "" : " ") + kv;
    // Note [A measured value over a rule of thumb].
    std::string by;
    for (const auto& given : c.as_passed) by += " (your " + code(given) + ")";
    if (!c.measured_by.empty()) by += " (the value " + c.measured_by + " found)";
    std::string& line = lines[c.resolution];
    if (c.verdict == supervisor::ResolutionVerdict::kConfirmed) {
      line += " — " + strong("confirmed") + ": a run with " + code(applied) + by + " passed (" + where(c.dir) + ")";
    } else if (c.verdict == supervisor::ResolutionVerdict::kRefuted) {
      line += " — " + strong("refuted") + ": a run with " + code(applied) + by + " still " + c.outcome +
              (c.klass.empty() ? "" : " (" + code(c.klass) + ")") + " (" + where(c.dir) + ")";
    } else if (c.verdict == supervisor::ResolutionVerdict::kUnresolved) {
      line += " — tried with " + code(applied) + ": the run could not tell (" + where(c.dir) + ")";
    } else if (!c.why_not.empty()) {
      line += " — not tried: " + c.why_not;
    } else if (!c.klass.empty()) {
      // The scenario refused the overrides (load_scenario's message).
      line += " — not tried: " + code(applied) + " does not fit this scenario (" + code(c.klass) + ")";
    } else {
      line += " — not tried: it changes nothing in this scenario";
    }
  }
  return lines;
}

nlohmann::ordered_json resolution_checks_json(const std::vector<run::RunReport::ResolutionCheck>& checks) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& c : checks) {
    out.push_back({{"resolution", c.resolution + 1}, {"overrides", c.overrides}, {"verdict", to_string(c.verdict)},
                   {"outcome", c.outcome}, {"class", c.klass}, {"dir", c.dir}});
    if (!c.why_not.empty()) out.back()["why_not"] = c.why_not;
    if (!c.measured_by.empty()) out.back()["measured_by"] = c.measured_by;
    if (!c.as_passed.empty()) out.back()["as_passed"] = c.as_passed;
  }
  return out;
}

namespace {

// What the run page's sections read.
struct RunPage {
  const run::RunReport& r;
  const run::TrialRecord& main_trial;  // the first trial, or an empty one
  fs::path root;                  // the run folder
  std::string trial_rel;          // the main trial's folder, relative to the page
  ImageEmbedder& images;          // embeds the plots and overlays
};

// Summary: outcome, class, message, the expectation and how it was judged.
void html_summary(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const auto& s = r.scenario;
  const auto& f = r.failure;
  const kb::FailureClass* cls = r.failure.klass.empty() ? nullptr : kb::KnowledgeBase::shipped().find(r.failure.klass);
  const bool failed = supervisor::is_failure(r.outcome);
  const supervisor::TrialAnalysis& main = p.main_trial.analysis;
  const std::string title = report_title(r);
  // Summary.
  const ojson expected = ojson::parse(scenario::resolved_json(s))["expect"];
  h << "<h2 id=\"summary\">Summary</h2>\n<table class=\"kv\">\n"
    << "<tr><th>Outcome</th><td>" << badge(r.outcome) << "</td></tr>\n"
    << "<tr><th>Class</th><td>"
    << (f.klass.empty() ? "-" : "<code>" + esc(f.klass) + "</code>" + (cls ? " (" + esc(cls->title) + ")" : ""))
    << "</td></tr>\n"
    << "<tr><th>Step</th><td>" << (f.step ? std::to_string(*f.step) : "-") << "</td></tr>\n"
    << "<tr><th>Module</th><td>" << (f.module.empty() ? "-" : "<code>" + esc(f.module) + "</code>") << "</td></tr>\n";
  if (!f.message.empty()) h << "<tr><th>Message</th><td>" << esc(f.message) << "</td></tr>\n";
  // Note [An injected failure says so].
  if (const std::string injected = supervisor::injected_faults(main); failed && !injected.empty()) {
    h << "<tr><th>Injected</th><td>" << esc(injected)
      << ": the causes and resolutions below are those of the failure class it stands for</td></tr>\n";
  }
  h << "<tr><th>Expectation</th><td><code>" << esc(expectation_text(expected))
    << "</code>: "
    << (run::verdict_of(r) == run::RunVerdict::kMet       ? "<span class=\"met\">met</span>"
        : run::verdict_of(r) == run::RunVerdict::kSkipped ? "<span class=\"note\">not judged (skipped: not run on this machine)</span>"
                                             : "<span class=\"unmet\">not met</span>");
  if (!r.expectation_why.empty()) h << list_items(r.expectation_why, "ul");
  h << "</td></tr>\n"
    << "<tr><th>Steps completed</th><td>" << main.steps_completed << " of " << s.train.last_step() << "</td></tr>\n"
    << "<tr><th>Peak memory</th><td>" << esc(scenario::format_bytes(main.peak_memory_bytes)) << " ("
    << esc(supervisor::peak_memory_kind(main)) << ")</td></tr>\n";
  if (const std::string skips = supervisor::scaler_skips_text(main); !skips.empty()) {
    h << "<tr><th>Loss scaler (fp16)</th><td>" << esc(skips) << "</td></tr>\n";
  }
  if (r.data_dependent) {
    h << "<tr><th>Data-dependent</th><td>" << (*r.data_dependent ? "yes" : "no") << ". " << esc(r.data_dependent_reason)
      << "</td></tr>\n";
  }
  if (r.determinism.checked) {
    h << "<tr><th>Determinism</th><td>" << r.determinism.processes << " processes were "
      << (r.determinism.identical ? "bit-identical" : "not identical") << ". " << esc(r.determinism.detail)
      << "</td></tr>\n";
  }
  h << "</table>\n";

}

// Root cause analysis, from the same Failure and knowledge base as report.md.
void html_analysis(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const auto& f = r.failure;
  const kb::FailureClass* cls = r.failure.klass.empty() ? nullptr : kb::KnowledgeBase::shipped().find(r.failure.klass);
  const bool failed = supervisor::is_failure(r.outcome);
  // Failure analysis, from the same Failure and knowledge base as report.md.
  h << "<h2 id=\"analysis\">Root cause analysis</h2>\n";
  if (failed) {
    h << "<pre>" << esc(f.message);
    for (const auto& sec : f.secondary)
      h << "\n" << esc(sec);
    h << "</pre>\n";
    if (!f.evidence.empty()) h << "<p>Evidence gathered by dbh:</p>\n" << list_items(f.evidence, "ul");
    if (cls != nullptr && !cls->causes.empty()) {
      h << "<p>Likely causes for <code>" << esc(cls->id) << "</code> (knowledge base):</p>\n"
        << list_items(cls->causes, "ul");
    }
    h << "<p>Resolutions, most likely first:</p>\n";
    if (cls != nullptr && !cls->resolutions.empty()) {
      h << list_items(resolutions_with_checks(cls->resolutions, r.resolution_checks, false), "ol");
    } else {
      h << "<ol><li>Re-run the reproduction command and inspect <code>events.jsonl</code> around the failing "
           "step.</li></ol>\n";
    }
  } else {
    h << "<p>Nothing to analyse: no monitor flagged a problem.</p>\n";
  }

}

// Steps to reproduce.
void html_reproduce(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  h << "<h2 id=\"repro\">Steps to reproduce</h2>\n<pre><code>" << esc(r.repro_command) << "</code></pre>\n"
    << "<p>The resolved scenario: <a href=\"./scenario.resolved.json\"><code>scenario.resolved.json</code></a>; "
       "<a href=\"./repro.sh\"><code>repro.sh</code></a> runs the command above. Other files: "
       "<a href=\"./report.md\"><code>report.md</code></a>, <a href=\"./report.json\"><code>report.json</code></a>, "
       "<a href=\"./metrics.csv\"><code>metrics.csv</code></a>.</p>\n";

}

// Environment: the lines of report.md's Environment section, then the settings.
void html_environment(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const auto& s = r.scenario;
  // Environment: the lines of report.md's Environment section, then the settings.
  h << "<h2 id=\"environment\">Environment</h2>\n<table class=\"kv\">\n";
  for (const auto& line : environment_lines(r)) {
    h << "<tr><th>" << esc(line.key) << "</th><td>" << esc(line.value) << "</td></tr>\n";
  }
  if (!r.inputs_manifest.empty()) {
    std::string vars;
    for (const auto& v : r.outcome_environment) vars += (vars.empty() ? "" : ", ") + v;
    h << "<tr><th>Inputs manifest</th><td><code>" << esc(r.inputs_manifest) << "</code> (scenario, datasets, "
      << "weights, knowledge base, build, machine; variables that can change the outcome: "
      << esc(vars.empty() ? "none set" : vars) << ")</td></tr>\n";
  }
  h << "<tr><th>Settings</th><td>" << esc(settings_text(s)) << "</td></tr>\n"
    << "<tr><th>Scenario file</th><td><code>" << esc(s.file) << "</code></td></tr>\n";
  if (!s.overrides.empty()) {
    std::string o;
    for (const auto& x : s.overrides)
      o += (o.empty() ? "" : " ") + x;
    h << "<tr><th>Overrides</th><td><code>" << esc(o) << "</code></td></tr>\n";
  }
  h << "</table>\n";

}

// Trials: one row each.
void html_trials(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  // Trials.
  h << "<h2 id=\"trials\">Trials</h2>\n<table><tr><th>trial</th><th>outcome</th><th>class</th><th>step</th>"
       "<th>module</th><th>steps done</th><th>seconds</th></tr>\n";
  for (const auto& t : r.trials) {
    const auto& a = t.analysis;
    std::string o;
    for (const auto& x : t.overrides)
      o += (o.empty() ? "" : " ") + x;
    h << "<tr><td>" << esc(t.label) << (o.empty() ? "" : " (<code>" + esc(o) + "</code>)") << "</td><td>"
      << badge(a.outcome) << "</td><td>" << (a.failure.klass.empty() ? "-" : esc(a.failure.klass)) << "</td><td>"
      << (a.failure.step ? std::to_string(*a.failure.step) : "-") << "</td><td>"
      << (a.failure.module.empty() ? "-" : esc(a.failure.module)) << "</td><td class=\"num\">" << a.steps_completed
      << "</td>" << num_cell(a.seconds, 3) << "</tr>\n";
  }
  h << "</table>\n";

}

// Steps of the main trial.
void html_steps(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const auto& f = r.failure;
  const supervisor::TrialAnalysis& main = p.main_trial.analysis;
  // Steps of the main trial.
  h << "<h2 id=\"steps\">Steps</h2>\n";
  if (main.steps.empty()) {
    h << "<p>No step completed.</p>\n";
  } else {
    const RowWindow w = window(main.steps.size(), kHtmlMaxStepRows, kHtmlMaxStepRows / 2);
    h << "<table><tr><th>run</th><th>step</th><th>loss</th><th>bce</th><th>l1</th><th>dice</th><th>lr</th>"
         "<th>grad norm</th><th>seconds</th><th>RSS</th></tr>\n";
    for (size_t i = 0; i < main.steps.size(); ++i) {
      if (!w.shown(i)) continue;
      const auto& st = main.steps[i];
      const bool hl = f.step && st.step == *f.step && (!f.run || st.run == *f.run);
      h << "<tr" << (hl ? " class=\"hl\"" : "") << "><td class=\"num\">" << st.run << "</td><td class=\"num\">"
        << st.step << "</td>" << num_cell(st.loss) << num_cell(st.bce) << num_cell(st.l1) << num_cell(st.dice)
        << num_cell(st.lr) << num_cell(st.grad_norm) << num_cell(st.seconds, 3) << "<td class=\"num\">"
        << esc(scenario::format_bytes(st.rss_bytes)) << "</td></tr>\n";
      if (w.gap_after(i)) h << gap_row(w.omitted(), 10, "metrics.csv");
    }
    h << "</table>\n";
  }

}

// Plots.
void html_plots(std::ostream& h, const RunPage& p) {
  const fs::path& root = p.root;
  ImageEmbedder& images = p.images;
  // Plots.
  h << "<h2 id=\"plots\">Plots</h2>\n";
  h << images.figure("loss.png", "loss parts per step", "plot");
  h << images.figure("memory.png", "memory per step", "plot");
  if (std::error_code ec; fs::exists(root / "hmean.png", ec)) {
    h << images.figure("hmean.png", "validation h-mean, precision and recall", "plot");
  }

}

// Overlays: the failing batch, then the last validation's worst images.
void html_overlays(std::ostream& h, const RunPage& p) {
  const supervisor::TrialAnalysis& main = p.main_trial.analysis;
  const std::string& trial_rel = p.trial_rel;
  ImageEmbedder& images = p.images;
  // Overlays: the failing batch, then the last validation's worst images.
  if (!main.overlays.empty() || !main.eval_overlays.empty()) {
    h << "<h2 id=\"overlays\">Overlays</h2>\n";
    size_t shown = 0;
    const size_t total = main.overlays.size() + main.eval_overlays.size();
    if (!main.overlays.empty()) {
      h << "<p>The failing batch as the model saw it (green: text kernels, red: threshold band, grey: ignored, "
           "magenta: non-finite):</p>\n<div>\n";
      for (const auto& o : main.overlays) {
        if (shown++ >= kHtmlMaxOverlays) break;
        h << images.figure(trial_rel + "/overlays/" + o, o, "overlay");
      }
      h << "</div>\n";
    }
    if (!main.eval_overlays.empty() && shown < kHtmlMaxOverlays) {
      h << "<p>Worst images at the last validation (green: ground truth, red: predictions, grey: don't "
           "care):</p>\n<div>\n";
      for (const auto& o : main.eval_overlays) {
        if (shown++ >= kHtmlMaxOverlays) break;
        h << images.figure(trial_rel + "/" + o, o, "overlay");
      }
      h << "</div>\n";
    }
    if (total > kHtmlMaxOverlays) {
      h << "<p class=\"note\">" << total - kHtmlMaxOverlays << " more overlays are not embedded; they are in <code>"
        << esc(trial_rel) << "/</code>.</p>\n";
    }
  }

}

// Validation.
void html_validation(std::ostream& h, const RunPage& p) {
  const supervisor::TrialAnalysis& main = p.main_trial.analysis;
  // Validation.
  if (!main.evals.empty() || main.evaluator_self_check) {
    h << "<h2 id=\"validation\">Validation</h2>\n<p>ICDAR 2015 protocol";
    if (main.evaluator_self_check) {
      h << "; evaluator self-check on the ground truth: h-mean " << esc(fmt(*main.evaluator_self_check, 3));
    }
    h << ".</p>\n<table><tr><th>run</th><th>step</th><th>precision</th><th>recall</th><th>h-mean</th>"
         "<th>matched / words</th><th>detections</th><th>mean P</th><th>seconds</th></tr>\n";
    const RowWindow w = window(main.evals.size(), kHtmlMaxStepRows, kHtmlMaxStepRows / 2);
    for (size_t i = 0; i < main.evals.size(); ++i) {
      if (!w.shown(i)) continue;
      const auto& e = main.evals[i];
      h << "<tr><td class=\"num\">" << e.run << "</td><td class=\"num\">" << e.step << "</td>"
        << num_cell(e.precision, 3) << num_cell(e.recall, 3) << num_cell(e.hmean, 3) << "<td class=\"num\">"
        << e.matched << " / " << e.gt << "</td><td class=\"num\">" << e.det << "</td>" << num_cell(e.prob_mean, 3)
        << num_cell(e.seconds, 2) << "</tr>\n";
      if (w.gap_after(i)) h << gap_row(w.omitted(), 9, "report.json");
    }
    h << "</table>\n";
  }

}

// Faults.
void html_faults(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const auto& s = r.scenario;
  const supervisor::TrialAnalysis& main = p.main_trial.analysis;
  // Faults.
  if (!main.faults.empty()) {
    h << "<h2 id=\"faults\">Injected faults</h2>\n<table><tr><th>fault</th><th>scheduled step</th><th>module</th>"
         "<th>fired</th><th>fired at steps</th><th>raised by</th></tr>\n";
    for (const auto& fr : main.faults) {
      const bool known = fr.index >= 0 && static_cast<size_t>(fr.index) < s.faults.size();
      const scenario::FaultConfig* cfg = known ? &s.faults[static_cast<size_t>(fr.index)] : nullptr;
      std::string steps;
      for (size_t i = 0; i < fr.steps.size() && i < 20; ++i)
        steps += (i ? ", " : "") + std::to_string(fr.steps[i]);
      if (fr.steps.size() > 20) steps += ", …";
      const std::string how = !fr.real ? "-"
                              : *fr.real
                                  ? "the GPU (real" + (fr.hardware_error.empty() ? "" : ": " + fr.hardware_error) + ")"
                                  : "dbh (emulated: the error's text)";
      h << "<tr><td>" << esc(fr.name) << "</td><td class=\"num\">" << (cfg ? std::to_string(cfg->at_step) : "-")
        << "</td><td>" << (cfg && !cfg->module().empty() ? esc(cfg->module()) : "-") << "</td><td>"
        << (fr.fired ? "yes" : "no") << "</td><td>" << esc(steps.empty() ? "-" : steps) << "</td><td>" << esc(how)
        << "</td></tr>\n";
    }
    h << "</table>\n";
  }

}

// Memory.
void html_memory(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const auto& s = r.scenario;
  const supervisor::TrialAnalysis& main = p.main_trial.analysis;
  // Memory.
  h << "<h2 id=\"memory\">Memory</h2>\n<p>Peak " << esc(scenario::format_bytes(main.peak_memory_bytes)) << " ("
    << esc(supervisor::peak_memory_kind(main)) << ").";
  if (!main.budget.is_null() && !main.budget.empty()) {
    h << " Budget " << esc(scenario::format_bytes(field_or(main.budget, "budget_bytes", int64_t{0}))) << ", enforced by "
      << esc(field_or(main.budget, "method", std::string("nothing"))) << ". "
      << esc(field_or(main.budget, "detail", std::string()));
  }
  h << "</p>\n";
  if (!main.memory_at_failure.is_null() && main.memory_at_failure.is_object() &&
      main.memory_at_failure.contains("memory") && main.memory_at_failure["memory"].is_object()) {
    const auto& m = main.memory_at_failure["memory"];
    h << "<p>At the failing moment: RSS " << esc(scenario::format_bytes(field_or(m, "rss_bytes", int64_t{0}))) << ", process peak "
      << esc(scenario::format_bytes(field_or(m, "peak_rss_bytes", int64_t{0})));
    if (m.contains("cuda_allocated_bytes")) {
      h << ", CUDA allocated " << esc(scenario::format_bytes(field_or(m, "cuda_allocated_bytes", int64_t{0}))) << ", reserved "
        << esc(scenario::format_bytes(field_or(m, "cuda_reserved_bytes", int64_t{0})));
    }
    h << ".</p>\n";
  }
  if (!main.steps.empty() && !main.steps.front().phases.is_null()) {
    const char* key = s.hardware.device == "cpu" ? "rss_bytes" : "cuda_allocated_bytes";
    h << "<table><tr><th>run</th><th>step</th><th>data</th><th>forward</th><th>backward</th><th>optimizer</th>"
         "<th>step peak</th></tr>\n";
    const RowWindow w = window(main.steps.size(), kHtmlMaxMemoryRows, kHtmlMaxMemoryRows / 2);
    for (size_t i = 0; i < main.steps.size(); ++i) {
      if (!w.shown(i)) continue;
      const auto& st = main.steps[i];
      auto cell = [&](const char* phase) {
        const bool has = st.phases.is_object() && st.phases.contains(phase) && st.phases[phase].is_object();
        return "<td class=\"num\">" + (has ? esc(scenario::format_bytes(field_or(st.phases[phase], key, int64_t{0}))) : "-") +
               "</td>";
      };
      h << "<tr><td class=\"num\">" << st.run << "</td><td class=\"num\">" << st.step << "</td>" << cell("data")
        << cell("forward") << cell("backward") << cell("optimizer") << "<td class=\"num\">"
        << esc(scenario::format_bytes(st.peak_bytes)) << "</td></tr>\n";
      if (w.gap_after(i)) h << gap_row(w.omitted(), 7, "metrics.csv");
    }
    h << "</table>\n";
  }
  if (!main.memory_snapshot.empty()) {
    h << "<p>The CUDA caching allocator's state at the failing moment: <code>" << esc(main.memory_snapshot)
      << "</code> (open it with PyTorch's memory_viz).</p>\n";
  }

}

// The event stream, and the worker's last stderr lines of a failed run.
void html_events_and_logs(std::ostream& h, const RunPage& p) {
  const run::RunReport& r = p.r;
  const bool failed = supervisor::is_failure(r.outcome);
  const fs::path& root = p.root;
  const run::TrialRecord& main_trial = p.main_trial;
  const std::string& trial_rel = p.trial_rel;
  events_section(h, root / "events.jsonl");

  // Logs.
  if (failed && !main_trial.stderr_tail.empty()) {
    const std::string& tail = main_trial.stderr_tail;
    h << "<h2 id=\"logs\">Worker stderr (last lines)</h2>\n<pre>"
      << esc(tail.size() > 4000 ? "…" + tail.substr(tail.size() - 4000) : tail) << "</pre>\n"
      << "<p>The whole log: <a href=\"" << esc(html_url_path(trial_rel + "/stderr.log")) << "\"><code>" << esc(trial_rel)
      << "/stderr.log</code></a>.</p>\n";
  }
}

}  // namespace

std::string report_html(const run::RunReport& r) {
  const fs::path root(r.out_dir);
  const run::TrialRecord empty_trial;
  const run::TrialRecord& main_trial = r.trials.empty() ? empty_trial : r.trials.front();
  // Trial folders are children of the run folder; the page links them relative to itself.
  const std::string trial_rel = main_trial.dir.empty() ? "main" : fs::path(main_trial.dir).filename().string();
  const std::string title = report_title(r);
  ImageEmbedder images(root);
  const RunPage page{r, main_trial, root, trial_rel, images};
  const auto& s = r.scenario;
  std::ostringstream h;
  h << html_page_head(supervisor::is_failure(r.outcome) ? title + " — " + one_line(s.name) + " — dbh" : title + " — dbh");
  h << "<h1>" << esc(title) << "</h1>\n"
    << "<p class=\"sub\">Scenario <strong>" << esc(s.name) << "</strong> · started " << esc(r.started_at) << " · "
    << esc(fmt(r.seconds, 3)) << " s · " << esc(r.out_dir) << "</p>\n";
  if (!s.description.empty()) h << "<p>" << esc(s.description) << "</p>\n";

  html_summary(h, page);
  html_analysis(h, page);
  html_reproduce(h, page);
  html_environment(h, page);
  html_trials(h, page);
  html_steps(h, page);
  html_plots(h, page);
  html_overlays(h, page);
  html_validation(h, page);
  html_faults(h, page);
  html_memory(h, page);
  html_events_and_logs(h, page);
  h << "<hr><p class=\"sub\">Written by dbh " << esc(r.env.dbh_version) << " from the same data as report.md and "
    << "report.json.</p>\n</body>\n</html>\n";
  return valid_utf8(h.str());
}

std::string suite_index_html(const std::string& root, const std::vector<run::RunReport>& runs,
                             const std::vector<std::string>& interrupted, const std::string& shard_text) {
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::absolute(root, ec), ec);
  // Unmet expectations first, then the other failures, then the rest; the
  // suite's order within each group.
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    order[i] = i;
  auto rank = [&](const run::RunReport& r) {
    return run::verdict_of(r) == run::RunVerdict::kNotMet ? 0 : supervisor::is_failure(r.outcome) ? 1 : run::verdict_of(r) == run::RunVerdict::kSkipped ? 3 : 2;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(runs[a]) < rank(runs[b]); });
  const run::VerdictCounts counts = run::count_verdicts(runs);
  std::map<std::string, int> by_outcome;
  for (const auto& r : runs) ++by_outcome[to_string(r.outcome)];
  const std::string title = "dbh suite" + (shard_text.empty() ? "" : ", shard " + shard_text) + ": " +
                            std::to_string(counts.met) + " of " + std::to_string(runs.size() - counts.skipped) +
                            " expectations met" +
                            (counts.skipped > 0 ? ", " + std::to_string(counts.skipped) + " skipped" : "");
  std::ostringstream h;
  h << html_page_head(title) << "<h1>" << esc(title) << "</h1>\n<p class=\"totals\">"
    << "<span><strong>" << runs.size() << "</strong> runs</span>"
    << "<span class=\"met\">" << counts.met << " met</span>"
    << "<span class=\"unmet\">" << counts.not_met << " not met</span>";
  if (counts.skipped > 0) h << "<span class=\"note\">" << counts.skipped << " skipped (not run on this machine)</span>";
  if (!interrupted.empty()) h << "<span class=\"note\">" << interrupted.size() << " interrupted</span>";
  h << "</p>\n<p>Outcomes:";
  for (const auto& [o, n] : by_outcome)
    h << " " << esc(o) << " " << n << ";";
  h << " the suite's files: <a href=\"./suite.json\"><code>suite.json</code></a>, "
       "<a href=\"./junit.xml\"><code>junit.xml</code></a>.</p>\n";
  h << "<table><tr><th>scenario</th><th>outcome</th><th>class</th><th>expected</th><th>expectation</th>"
       "<th>seconds</th></tr>\n";
  for (const size_t i : order) {
    const auto& r = runs[i];
    std::string link;
    std::string expected;
    if (!r.out_dir.empty()) {
      const fs::path dir = fs::weakly_canonical(fs::absolute(r.out_dir, ec), ec);
      for (const char* name : {"report.html", "report.md"}) {
        if (fs::exists(dir / name, ec)) {
          link = (dir / name).lexically_relative(base).generic_string();
          break;
        }
      }
      uintmax_t size = 0;
      if (const auto text = read_small_file((dir / "report.json").string(), 64 * 1024 * 1024, &size)) {
        const auto j = ojson::parse(*text, nullptr, false);
        if (!j.is_discarded() && j.is_object() && j.contains("expectation") && j["expectation"].is_object() &&
            j["expectation"].contains("expected")) {
          expected = expectation_text(j["expectation"]["expected"]);
        }
      }
    }
    const std::string name = r.scenario.name.empty() ? "(unnamed)" : r.scenario.name;
    const run::RunVerdict verdict = run::verdict_of(r);
    h << "<tr" << (verdict == run::RunVerdict::kNotMet ? " class=\"hl\"" : "") << "><td>"
      << (link.empty() ? esc(name) : "<a href=\"" + esc(html_url_path(link)) + "\">" + esc(name) + "</a>") << "</td><td>"
      << badge(r.outcome) << "</td><td>"
      << (r.failure.klass.empty() ? "-" : "<code>" + esc(r.failure.klass) + "</code>")
      << (r.failure.step ? " at step " + std::to_string(*r.failure.step) : "")
      << (r.failure.module.empty() ? "" : " in <code>" + esc(r.failure.module) + "</code>") << "</td><td><code>"
      << esc(expected.empty() ? "-" : expected) << "</code></td><td>"
      << (verdict == run::RunVerdict::kMet       ? "<span class=\"met\">met</span>"
          : verdict == run::RunVerdict::kSkipped ? "<span class=\"note\">skipped: not run on this machine</span>"
                                         : "<span class=\"unmet\">not met</span>");
    if (!r.expectation_why.empty()) h << list_items(r.expectation_why, "ul");
    h << "</td>" << num_cell(r.seconds, 3) << "</tr>\n";
  }
  for (const auto& id : interrupted) {
    h << "<tr class=\"hl\"><td>" << esc(id) << "</td><td><span class=\"badge warn\">interrupted</span></td>"
      << "<td>-</td><td>-</td><td class=\"unmet\">not run (resume with <code>dbh suite --resume</code>)</td>"
      << "<td></td></tr>\n";
  }
  h << "</table>\n</body>\n</html>\n";
  return valid_utf8(h.str());
}

}  // namespace dbh::harness::report

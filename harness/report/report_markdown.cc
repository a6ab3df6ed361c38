#include "harness/report/report.h"

#include <iomanip>
#include <sstream>

#include "harness/common/files.h"
#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/report/markdown_html.h"
#include "harness/report/markdown_text.h"
#include "harness/report/numbers.h"
#include "harness/scenario/schema.h"

// report.md: the bug report of a run, section by section (report.cc holds
// what every output shares: the title, the verdict, the environment lines).
namespace dbh::harness::report {

namespace {

// The suite command that runs the scenario of `repro` (a `… run SCENARIO
// overrides` line) with its overrides, as pasted.
std::string suite_command_of(const std::string& repro) {
  const size_t at = repro.find(" run ");
  return at == std::string::npos ? repro : repro.substr(0, at) + " suite " + repro.substr(at + 5);
}

// Text for a fenced code block: a ``` inside it would end the block, and
// every line is indented by two spaces, so no line a worker wrote starts a
// line of report.md (`cat report.md` in a CI log would run a "::" line as a
// workflow command; a CI log breaks lines at "\r" too).
std::string fenced(const std::string& text) {
  std::string out = "  ";
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "```") == 0) {
      out += "` `";
      i += 2;
      continue;
    }
    out += text[i];
    const bool breaks = text[i] == '\n' || (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'));
    if (breaks && i + 1 < text.size()) out += "  ";
  }
  return out;
}

// A value inside a YAML single-quoted scalar: one line, ' doubled.
std::string yaml_single_quoted(const std::string& s) {
  std::string out;
  for (const char c : one_line(s)) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out;
}

// Each item one line of markdown_text: an item quoting a worker's words
// cannot start a heading, a link or a tag.
std::string bullet_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += "- " + markdown_text(i) + "\n";
  return out;
}

std::string numbered(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += std::to_string(i + 1) + ". " + items[i] + "\n";
  return out;
}

// The YAML front matter.
void md_front_matter(std::ostream& md, const run::RunReport& r, const std::string& title) {
  const auto& s = r.scenario;
  const auto& f = r.failure;
  const bool failed = supervisor::is_failure(r.outcome);
  const bool skipped = r.outcome == scenario::Outcome::kSkipped;
  // Front matter values are JSON strings, which YAML reads as they are.
  const auto yaml_string = [](const std::string& v) { return front_matter_string(v); };
  md << "---\n"
     << "title: " << yaml_string(title) << "\n"
     << "date: \"" << r.started_at << "\"\n"
     << "type: \"bug_report\"\n"
     << "status: \"" << (failed ? "open" : skipped ? "skipped" : r.expectation_met ? "passed" : "expectation not met")
     << "\"\n"
     << "scenario: " << yaml_string(s.name) << "\n"
     << "outcome: \"" << to_string(r.outcome) << "\"\n"
     << "expectation_met: " << (r.expectation_met ? "true" : "false") << "\n"
     << "tags: ['bug_report', 'dbh'" << (f.klass.empty() ? "" : ", '" + yaml_single_quoted(f.klass) + "'") << "]\n"
     << "---\n\n";
}

// "# title" and Summary: the outcome, how it was judged, the expectation.
void md_summary(std::ostream& md, const run::RunReport& r, const std::string& title) {
  const auto& s = r.scenario;
  const auto& f = r.failure;
  const bool failed = supervisor::is_failure(r.outcome);
  const bool skipped = r.outcome == scenario::Outcome::kSkipped;
  const std::string name_md = markdown_inline(r.scenario.name);
  md << "# " << markdown_inline(title) << "\n\n";
  md << "## Summary\n\n";
  if (failed) {
    md << "Training under scenario " << name_md << " ended **" << to_string(r.outcome) << "**";
    if (!f.klass.empty()) md << " (class " << markdown_code(f.klass) << ")";
    if (f.step) md << " at step " << *f.step;
    if (!f.module.empty()) md << " in module " << markdown_code(f.module);
    md << ": " << markdown_inline(f.message) << "\n\n";
    // Note [An injected failure says so].
    if (const std::string injected = supervisor::injected_faults(r.trials.front().analysis); !injected.empty()) {
      md << "**Injected by the scenario:** " << markdown_inline(injected)
         << ". The causes and resolutions below are those of the failure class it stands for, not a diagnosis of "
            "this training.\n\n";
    }
  } else if (skipped) {
    md << "Scenario " << name_md << " was **not run**: " << markdown_inline(f.message)
       << ". Nothing about the training was judged; run it on a machine that has what it needs.\n\n";
  } else {
    md << "Training under scenario " << name_md << " completed " << r.trials.front().analysis.steps_completed
       << " steps with every health check passing.\n\n";
  }
  if (const std::string skips = supervisor::scaler_skips_text(r.trials.front().analysis); !skips.empty() && !skipped) {
    md << "**Loss scaler (fp16):** " << markdown_inline(skips) << ".\n\n";
  }
  if (r.data_dependent) {
    md << "**Data-dependent:** " << (*r.data_dependent ? "yes" : "no") << ". " << markdown_text(r.data_dependent_reason)
       << "\n\n";
  }
  if (r.determinism.checked) {
    md << "**Determinism:** " << r.determinism.processes << " processes were "
       << (r.determinism.identical ? "bit-identical" : "not identical") << ". " << r.determinism.detail
       << "\n\n";
  }
  md << "The scenario's expectation (`outcome: " << to_string(s.expect.outcome) << "`"
     << (s.expect.failure_class ? ", " + markdown_code("failure_class: " + *s.expect.failure_class) : "")
     << (s.expect.step ? ", `step: " + std::to_string(*s.expect.step) + "`" : "")
     << (s.expect.module ? ", " + markdown_code("module: " + *s.expect.module) : "") << ") was **"
     << (r.expectation_met  ? "met"
         : r.not_run_here() ? "not judged"
                            : "not met")
     << "**.\n";
  md << bullet_list(r.expectation_why);
}

// Environment: the machine, libraries, settings and inputs.
void md_environment(std::ostream& md, const run::RunReport& r) {
  const auto& s = r.scenario;
  md << "\n## Environment\n\n";
  for (const auto& line : environment_lines(r)) {
    md << "- " << line.key << ": " << (line.literal ? markdown_inline(line.value) : line.value) << "\n";
  }
  if (const auto& tuning = r.trials.front().analysis.tuning; !tuning.is_null()) {
    md << "- Layout and threads: " << measured_choices_line(tuning) << "\n";
  }
  md << "- Settings: " << settings_text(s) << "\n";
  if (!r.inputs_manifest.empty()) {
    std::string vars;
    for (const auto& v : r.outcome_environment) vars += (vars.empty() ? "" : ", ") + v;
    md << "- Inputs manifest: `" << r.inputs_manifest << "` (scenario, datasets, weights, knowledge base, build, "
       << "machine and the variables that can change the outcome: " << (vars.empty() ? "none set" : markdown_inline(vars))
       << ")\n";
  }
  md << "\n";
}

// Steps to Reproduce and Expected Behavior (its last sentence ends in
// md_trials).
void md_reproduce(std::ostream& md, const run::RunReport& r) {
  const auto& s = r.scenario;
  // One line (shell_quote'd words): no line of it can close the fence.
  md << "## Steps to Reproduce\n\n```sh\n" << one_line(r.repro_command) << "\n```\n\n"
     << "The fully resolved scenario is saved as `scenario.resolved.json` next to this report; `repro.sh` runs "
        "the command above.\n\n";
  md << "## Expected Behavior\n\n";
  md << "Training completes " << s.train.last_step() << " steps"
     << (s.train.last_step() < s.train.max_steps
             ? " (it stops there, " + std::string(DBH_SCENARIO_KEY(train.stop_after)) + ", in a schedule of " +
                   std::to_string(s.train.max_steps) + ")"
             : std::string())
     << (s.repeat.in_process > 1 ? " in each of " + std::to_string(s.repeat.in_process) + " in-process runs" : "")
     << " with finite batches, activations, losses and gradients";
  if (s.expect.outcome != scenario::Outcome::kPassed) {
    md << ". This scenario injects faults and expects dbh to catch them: outcome `" << to_string(s.expect.outcome)
       << "`" << (s.expect.failure_class ? ", class " + markdown_code(*s.expect.failure_class) : "");
  }
}

// Actual Behavior: one row per trial.
void md_trials(std::ostream& md, const run::RunReport& r) {
  md << ".\n\n## Actual Behavior\n\n";
  md << "| trial | outcome | class | step | module | steps done | seconds |\n|---|---|---|---|---|---|---|\n";
  for (const auto& t : r.trials) {
    const auto& a = t.analysis;
    // A table cell: escaped text rather than a code span, in which GitHub
    // would still end the cell at a `|`.
    md << "| " << markdown_inline(t.label) << (t.overrides.empty() ? "" : " (" + [&] {
      std::string o;
      for (const auto& x : t.overrides) o += (o.empty() ? "" : " ") + x;
      return markdown_inline(o);
    }() + ")")
       << " | " << to_string(a.outcome) << " | " << (a.failure.klass.empty() ? "-" : a.failure.klass) << " | "
       << (a.failure.step ? std::to_string(*a.failure.step) : "-") << " | "
       << (a.failure.module.empty() ? "-" : markdown_inline(a.failure.module)) << " | " << a.steps_completed << " | "
       << significant(a.seconds, 3) << " |\n";
  }
}

// The main trial's losses and memory: budget, the failing moment, phases.
void md_main_memory(std::ostream& md, const run::RunReport& r) {
  const auto& main = r.trials.front().analysis;
  if (!main.steps.empty()) {
    md << "\nLoss per step (main trial): ";
    for (size_t i = 0; i < main.steps.size() && i < 20; ++i) md << (i ? ", " : "") << significant(main.steps[i].loss);
    md << (main.steps.size() > 20 ? ", …" : "") << ". Peak memory " << scenario::format_bytes(main.peak_memory_bytes)
       << " (host RSS). Plots: `loss.png`, `memory.png`; per-step numbers: `metrics.csv`.\n";
  }
  if (!main.budget.is_null() && !main.budget.empty()) {
    md << "\nMemory budget: " << scenario::format_bytes(field_or(main.budget, "budget_bytes", int64_t{0})) << ", enforced by "
       << markdown_inline(field_or(main.budget, "method", std::string("nothing"))) << ". "
       << markdown_inline(field_or(main.budget, "detail", std::string())) << "\n";
  }
  if (!main.memory_at_failure.is_null() && !main.memory_at_failure.empty()) {
    const auto& m = main.memory_at_failure["memory"];
    md << "\nMemory at the failing moment: RSS " << scenario::format_bytes(field_or(m, "rss_bytes", int64_t{0})) << ", process peak "
       << scenario::format_bytes(field_or(m, "peak_rss_bytes", int64_t{0}));
    if (m.contains("cuda_allocated_bytes")) {
      md << ", CUDA allocated " << scenario::format_bytes(field_or(m, "cuda_allocated_bytes", int64_t{0})) << ", reserved "
         << scenario::format_bytes(field_or(m, "cuda_reserved_bytes", int64_t{0}));
    }
    const auto& phases = main.memory_at_failure["phases"];
    if (phases.is_object() && !phases.empty()) {
      md << "; phases reached in that step:";
      for (const auto& [phase, pm] : phases.items()) {
        md << " " << markdown_inline(phase) << " " << scenario::format_bytes(field_or(pm, "rss_bytes", int64_t{0}));
      }
    }
    md << ".\n";
  }
  if (!main.steps.empty() && !main.steps.front().phases.is_null()) {
    md << "\nMemory per step and phase (" << (r.scenario.hardware.device == "cpu" ? "host RSS" : "CUDA allocated")
       << "):\n\n| run | step | data | forward | backward | optimizer | step peak |\n|---|---|---|---|---|---|---|\n";
    const char* key = r.scenario.hardware.device == "cpu" ? "rss_bytes" : "cuda_allocated_bytes";
    for (size_t i = 0; i < main.steps.size() && i < 12; ++i) {
      const auto& st = main.steps[i];
      auto cell = [&](const char* phase) {
        return st.phases.contains(phase) ? scenario::format_bytes(field_or(st.phases[phase], key, int64_t{0})) : std::string("-");
      };
      md << "| " << st.run << " | " << st.step << " | " << cell("data") << " | " << cell("forward") << " | "
         << cell("backward") << " | " << cell("optimizer") << " | " << scenario::format_bytes(st.peak_bytes) << " |\n";
    }
  }
}

// The main trial's allocator snapshot, injected faults, overlays and
// validation.
void md_main_evidence(std::ostream& md, const run::RunReport& r) {
  const auto& main = r.trials.front().analysis;
  const auto& s = r.scenario;
  if (!main.memory_snapshot.empty()) {
    md << "\nThe CUDA caching allocator's state and its last allocation events at the failing moment: `"
       << markdown_inline(main.memory_snapshot)
       << "` (drag it onto https://pytorch.org/memory_viz, or `python -m torch.cuda._memory_viz trace_plot`).\n";
  }
  if (!main.faults.empty()) {
    md << "\nInjected faults:\n\n| fault | scheduled step | module | fired | raised by |\n|---|---|---|---|---|\n";
    for (const auto& fr : main.faults) {
      const auto& cfg = s.faults[static_cast<size_t>(fr.index)];
      const std::string how = !fr.real ? "-"
                              : *fr.real ? "the GPU (real" + (fr.hardware_error.empty() ? "" : ": " + markdown_inline(fr.hardware_error)) + ")"
                                         : "dbh (emulated: the error's text)";
      md << "| " << fr.name << " | " << cfg.at_step << " | " << (cfg.module().empty() ? "-" : cfg.module())
         << " | " << (fr.fired ? "yes" : "no") << " | " << how << " |\n";
    }
  }
  if (!main.overlays.empty()) {
    md << "\nOverlays of the failing batch (input as the model saw it; green: text kernels, red: threshold band, "
          "grey: ignored, magenta: non-finite):";
    for (const auto& o : main.overlays) md << " [`" << o << "`](main/overlays/" << o << ")";
    md << "\n";
  }
  if (!main.evals.empty() && !main.evals.front().metrics.empty()) {
    // Note [A worker's own validation metrics]: the training's own names.
    const auto& names = main.evals.front().metrics;
    const size_t shown = std::min<size_t>(names.size(), 8);
    md << "\nValidation (the training's own metrics" << (names.size() > shown ? ", the first 8" : "") << "):\n\n| step |";
    for (size_t i = 0; i < shown; ++i) md << " " << markdown_inline(names[i].first) << " |";
    md << "\n|---|" << [&] {
      std::string bars;
      for (size_t i = 0; i < shown; ++i) bars += "---|";
      return bars;
    }() << "\n";
    for (const auto& e : main.evals) {
      md << "| " << e.step << " |";
      for (size_t i = 0; i < shown; ++i) {
        const auto it = std::find_if(e.metrics.begin(), e.metrics.end(),
                                     [&](const auto& m) { return m.first == names[i].first; });
        md << " " << (it == e.metrics.end() ? std::string("-") : significant(it->second, 3)) << " |";
      }
      md << "\n";
    }
  } else if (!main.evals.empty() || main.evaluator_self_check) {
    md << "\nValidation (ICDAR 2015 protocol";
    if (main.evaluator_self_check) {
      md << "; evaluator self-check on the ground truth: h-mean " << significant(*main.evaluator_self_check, 3);
    }
    md << "):\n\n| step | precision | recall | h-mean | matched / words | detections | mean P | seconds |\n"
          "|---|---|---|---|---|---|---|---|\n";
    for (const auto& e : main.evals) {
      md << "| " << e.step << " | " << significant(e.precision, 3) << " | " << significant(e.recall, 3) << " | " << significant(e.hmean, 3)
         << " | " << e.matched << " / " << e.gt << " | " << e.det << " | " << significant(e.prob_mean, 3) << " | "
         << significant(e.seconds, 1) << " |\n";
    }
    if (!main.eval_overlays.empty()) {
      md << "\nWorst images at the last validation (green: ground truth, red: predictions, grey: don't care):";
      for (const auto& o : main.eval_overlays) md << " [`" << o << "`](main/" << o << ")";
      md << "\n";
    }
    md << "\n![h-mean per validation](hmean.png)\n";
  }
}

// Logs / Stack Trace, and the worker's warnings.
void md_logs(std::ostream& md, const run::RunReport& r) {
  const auto& f = r.failure;
  const bool failed = supervisor::is_failure(r.outcome);
  md << "\n## Logs / Stack Trace\n\n";
  if (failed) {
    md << "```\n" << fenced(f.message) << "\n";
    for (const auto& sec : f.secondary) md << fenced(sec) << "\n";
    md << "```\n\n";
    const std::string tail = r.trials.front().stderr_tail;
    if (!tail.empty()) {
      const std::string trimmed = tail.size() > 1500 ? "…" + tail.substr(tail.size() - 1500) : tail;
      md << "Last lines of the worker's stderr (`main/stderr.log`):\n\n```\n" << fenced(trimmed) << "\n```\n\n";
    }
    const auto& first = r.trials.front().analysis;
    if (!first.stacks_tool.empty()) {
      md << "Where it was when the watchdog stopped it (" << first.stacks_tool
         << "; every thread in `main/stacks.txt`):\n\n```\n" << fenced(first.stacks_excerpt) << "```\n\n";
    }
  } else {
    md << "No errors. Full event stream: `events.jsonl`.\n\n";
  }
  if (const auto& warnings = r.trials.front().analysis.warnings; !warnings.empty()) {
    md << "Warnings from the worker:\n\n" << bullet_list(warnings) << "\n";
  }
}

// Root Cause Analysis, Resolution, Testing, Prevention.
void md_analysis(std::ostream& md, const run::RunReport& r) {
  const auto& f = r.failure;
  const bool failed = supervisor::is_failure(r.outcome);
  const kb::FailureClass* cls = r.failure.klass.empty() ? nullptr : kb::KnowledgeBase::shipped().find(r.failure.klass);
  md << "## Root Cause Analysis\n\n";
  if (failed) {
    md << "Evidence gathered by dbh:\n\n" << bullet_list(f.evidence);
    if (!f.secondary.empty()) {
      md << "- later errors were consequences of the first (" << f.secondary.size()
         << "), e.g. the teardown failing after the context was corrupted\n";
    }
    if (cls != nullptr && !cls->causes.empty()) {
      md << "\nLikely causes for `" << cls->id << "` (knowledge base):\n\n" << bullet_list(cls->causes);
    }
  } else {
    md << "Nothing to analyse: no monitor flagged a problem.\n";
  }
  md << "\n## Resolution\n\n";
  if (cls != nullptr && !cls->resolutions.empty()) {
    const auto lines = resolutions_with_checks(cls->resolutions, r.resolution_checks, true);
    md << numbered(lines);
  } else if (failed) {
    md << "1. Re-run the reproduction command and inspect `events.jsonl` around the failing step.\n";
  } else {
    md << "None needed.\n";
  }
  md << "\n## Testing\n\n"
     << "1. Apply the resolution.\n2. Re-run " << markdown_code(r.repro_command) << ".\n"
     << "3. Check that `report.json` shows `outcome: passed` and that every health check passed.\n\n";
  md << "## Prevention\n\n"
     << "- Keep this scenario, with its expectation, in the CI suite that runs with "
     << markdown_code(suite_command_of(r.repro_command)) << ".\n"
     << "- Keep the cheap finite monitors on in training runs: one synchronisation per step catches non-finite "
        "tensors before they reach the weights.\n";
}

}  // namespace

std::string report_markdown(const run::RunReport& r) {
  std::ostringstream md;
  const std::string title = report_title(r);
  md_front_matter(md, r, title);
  md_summary(md, r, title);
  md_environment(md, r);
  md_reproduce(md, r);
  md_trials(md, r);
  md_main_memory(md, r);
  md_main_evidence(md, r);
  md_logs(md, r);
  md_analysis(md, r);
  return valid_utf8(md.str());
}

}  // namespace dbh::harness::report

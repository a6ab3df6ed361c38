#include "harness/report/report.h"

#include "harness/report/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/report/markdown_html.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::report {

using ojson = nlohmann::ordered_json;

namespace {

// The suite command that runs the scenario of `repro` (a `… run SCENARIO
// overrides` line) with its overrides, as pasted.
std::string suite_command_of(const std::string& repro) {
  const size_t at = repro.find(" run ");
  return at == std::string::npos ? repro : repro.substr(0, at) + " suite " + repro.substr(at + 5);
}

// Text for a fenced code block: a ``` inside it would end the block.
std::string fenced(std::string text) {
  for (size_t pos = 0; (pos = text.find("```", pos)) != std::string::npos; pos += 3) text.replace(pos, 3, "` `");
  return text;
}
}  // namespace

namespace {

nlohmann::ordered_json failure_json(const supervisor::Failure& f) {
  nlohmann::ordered_json j;
  j["class"] = f.klass.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.klass);
  j["step"] = f.step ? nlohmann::ordered_json(*f.step) : nlohmann::ordered_json(nullptr);
  j["run"] = f.run ? nlohmann::ordered_json(*f.run) : nlohmann::ordered_json(nullptr);
  j["module"] = f.module.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.module);
  j["message"] = f.message;
  j["evidence"] = f.evidence;
  j["secondary_errors"] = f.secondary;
  return j;
}

nlohmann::ordered_json env_json(const env::Environment& e) {
  return nlohmann::ordered_json::parse(env::environment_json(e));
}

}  // namespace

std::string measured_choices_line(const nlohmann::json& t) {
  auto setting = [&](const char* key) { return t.contains(key) && t[key].is_object() ? t[key] : nlohmann::json::object(); };
  const auto cl = setting("channels_last"), th = setting("threads");
  std::ostringstream o;
  o << (cl.value("value", false) ? "channels-last" : "NCHW") << " (" << cl.value("source", std::string("?")) << "), "
    << th.value("value", int64_t{0}) << " intra-op thread(s) (" << th.value("source", std::string("?"))
    << ")";
  if (t.contains("timings") && t["timings"].is_array() && !t["timings"].empty()) {
    o << "; best step of each candidate at " << t.value("size", int64_t{0}) << "², batch " << t.value("batch", int64_t{0})
      << ":";
    const char* sep = " ";
    for (const auto& c : t["timings"]) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f ms", 1000.0 * c.value("best_seconds", 0.0));
      o << sep << (c.value("channels_last", false) ? "channels-last" : "NCHW") << " × " << c.value("threads", int64_t{0})
        << " " << ms;
      sep = ", ";
    }
    if (t.contains("cache")) o << " (measured " << t.value("measured_at", std::string("?")) << "; cached in `" << t.value("cache", std::string()) << "`)";
  }
  if (t.contains("untrusted")) {
    o << "; **the measurement was not trusted**: " << t.value("untrusted", std::string())
      << ", so PyTorch's defaults were used and nothing was cached (it is measured again next run)";
  }
  if (t.contains("over_budget")) {
    o << "; not measured: " << t.value("over_budget", std::string()) << ", so PyTorch's defaults were used";
    if (t.contains("cache")) o << " (the verdict is cached in `" << t.value("cache", std::string()) << "`)";
  }
  if (t.contains("remeasured")) o << "; measured again: " << t.value("remeasured", std::string());
  if (t.contains("error")) o << "; the measurement failed (" << t.value("error", std::string()) << "), so PyTorch's defaults were used";
  if (t.contains("cache_note")) o << "; " << t.value("cache_note", std::string());
  return o.str();
}

nlohmann::ordered_json report_json(const RunReport& r) {
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["scenario_name"] = r.scenario.name;
  j["started_at"] = r.started_at;
  j["seconds"] = r.seconds;
  j["outcome"] = to_string(r.outcome);
  j["expectation"] = {{"met", r.expectation_met},
                      {"verdict", to_string(verdict_of(r))},
                      {"expected", nlohmann::ordered_json::parse(scenario::resolved_json(r.scenario))["expect"]},
                      {"mismatches", r.expectation_why}};
  j["failure"] = failure_json(r.failure);
  const auto& main = r.trials.empty() ? supervisor::TrialAnalysis{} : r.trials.front().analysis;
  j["faults"] = nlohmann::ordered_json::array();
  for (const auto& f : main.faults) {
    const auto& cfg = r.scenario.faults[static_cast<size_t>(f.index)];
    j["faults"].push_back({{"name", f.name},
                           {"step", cfg.at_step},
                           {"module", cfg.module().empty() ? nlohmann::ordered_json(nullptr)
                                                                : nlohmann::ordered_json(cfg.module())},
                           {"fired", f.fired},
                           {"fired_at_steps", f.steps},
                           {"real", f.real ? nlohmann::ordered_json(*f.real) : nlohmann::ordered_json(nullptr)}});
    if (!f.hardware_error.empty()) j["faults"].back()["hardware_error"] = f.hardware_error;
  }
  j["steps_completed"] = main.steps_completed;
  j["scaler_skipped_steps"] = supervisor::scaler_skipped_steps(main);
  j["overlays"] = main.overlays;
  if (!main.memory_snapshot.empty()) j["memory_snapshot"] = main.memory_snapshot;
  if (!r.resolution_checks.empty()) j["resolutions_tried"] = resolution_checks_json(r.resolution_checks);
  if (!main.stacks_tool.empty()) j["stacks"] = {{"tool", main.stacks_tool}, {"excerpt", main.stacks_excerpt}};
  if (main.evaluator_self_check || !main.evals.empty()) {
    ojson evals = ojson::array();
    for (const auto& e : main.evals) {
      ojson own = ojson::object();
      for (const auto& [name, value] : e.metrics) own[name] = value;
      evals.push_back({{"run", e.run}, {"step", e.step}, {"precision", e.precision}, {"recall", e.recall},
                       {"hmean", e.hmean}, {"gt", e.gt}, {"det", e.det}, {"matched", e.matched},
                       {"images", e.images}, {"prob_mean", e.prob_mean}, {"text_fraction", e.text_fraction},
                       {"seconds", e.seconds}});
      if (!own.empty()) evals.back()["metrics"] = own;
    }
    j["evaluation"] = {{"evaluator_self_check", main.evaluator_self_check ? ojson(*main.evaluator_self_check) : ojson()},
                       {"evaluations", evals},
                       {"final", evals.empty() ? ojson() : evals.back()},
                       {"overlays", main.eval_overlays}};
  }
  {
    // Note [A trial's events are read as they arrive]: the timeline holds a
    // trial's first and last kJsonTimelineEnds steps; metrics.csv has every
    // kept step's memory.
    ojson steps = ojson::array();
    const size_t n = main.steps.size(), ends = kJsonTimelineEnds;
    for (size_t i = 0; i < n; ++i) {
      if (n > 2 * ends && i >= ends && i < n - ends) continue;
      const auto& st = main.steps[i];
      steps.push_back({{"run", st.run}, {"step", st.step}, {"rss_bytes", st.rss_bytes}, {"peak_bytes", st.peak_bytes},
                       {"phases", ojson::parse(st.phases.is_null() ? "{}" : st.phases.dump())}});
    }
    j["memory"] = {{"peak_bytes", main.peak_memory_bytes},
                   {"kind", supervisor::peak_memory_kind(main)},
                   {"budget", ojson::parse(main.budget.is_null() ? "null" : main.budget.dump())},
                   {"at_failure", ojson::parse(main.memory_at_failure.is_null() ? "null" : main.memory_at_failure.dump())},
                   {"timeline", steps},
                   {"timeline_omitted", n > 2 * ends ? n - 2 * ends : 0}};
  }
  j["environment"] = env_json(r.env);
  if (r.scenario.worker.external()) {
    const auto& main = r.trials.front().analysis;
    j["worker"] = {{"name", main.worker}, {"environment", main.worker_environment}};
  }
  if (!r.inputs_manifest.empty()) {
    j["inputs"] = {{"manifest", r.inputs_manifest}, {"environment", r.outcome_environment}};
  }
  j["measured_choices"] = ojson::parse(
      main.tuning.is_null() ? "null" : main.tuning.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  j["repro"] = {{"command", r.repro_command}};
  j["determinism"] = {{"checked", r.determinism.checked},
                      {"identical", r.determinism.identical},
                      {"processes", r.determinism.processes},
                      {"first_divergent_step", r.determinism.first_divergent_step
                                                   ? nlohmann::ordered_json(*r.determinism.first_divergent_step)
                                                   : nlohmann::ordered_json(nullptr)},
                      {"detail", r.determinism.detail},
                      {"pass_rate", r.determinism.pass_rate}};
  j["data_dependent"] = r.data_dependent ? nlohmann::ordered_json(*r.data_dependent) : nlohmann::ordered_json(nullptr);
  j["data_dependent_reason"] = r.data_dependent_reason;
  j["trials"] = nlohmann::ordered_json::array();
  for (const auto& t : r.trials) {
    j["trials"].push_back({{"label", t.label},
                           {"overrides", t.overrides},
                           {"dir", t.dir},
                           {"outcome", to_string(t.analysis.outcome)},
                           {"failure", failure_json(t.analysis.failure)},
                           {"steps_completed", t.analysis.steps_completed},
                           {"seconds", t.analysis.seconds},
                           {"exit_code", t.analysis.exit_code},
                           {"signal", t.analysis.term_signal ? nlohmann::ordered_json(supervisor::signal_name(t.analysis.term_signal))
                                                             : nlohmann::ordered_json(nullptr)},
                           {"run_checksums", t.analysis.run_checksums}});
  }
  j["scenario"] = {{"file", r.scenario.file},
                   {"overrides", r.scenario.overrides},
                   {"hash", scenario::scenario_hash(r.scenario)},
                   {"resolved", nlohmann::ordered_json::parse(scenario::resolved_json(r.scenario))}};
  return j;
}

namespace {

std::string fmt(double v, int precision = 4) {
  std::ostringstream s;
  s << std::setprecision(precision) << v;
  return s.str();
}

std::string bullet_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += "- " + i + "\n";
  return out;
}

std::string numbered(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += std::to_string(i + 1) + ". " + items[i] + "\n";
  return out;
}


// How many steps a run trains, in words: "20 steps", or "6 of 20 steps"
// when it stops before the end of its schedule (train.stop_after).
std::string steps_text(const scenario::Scenario& s) {
  const int64_t last = s.train.last_step(), all = s.train.max_steps;
  return last < all ? std::to_string(last) + " of " + std::to_string(all) + " steps" : std::to_string(all) + " steps";
}

}  // namespace

std::string settings_text(const scenario::Scenario& s) {
  std::ostringstream o;
  if (s.worker.external()) {
    // The user's training: what dbh passes it, never dbh's own model.
    // Its words are the user's: one line (a newline would start a line of its
    // own on the terminal, where `::warning::` is a GitHub workflow command)
    // and no backtick that would end the code span in report.md.
    std::string command;
    for (const auto& a : s.worker.command) command += (command.empty() ? "" : " ") + a;
    command = one_line(command);
    std::replace(command.begin(), command.end(), '`', '\'');
    o << "worker `" << command << "`, data " << to_string(s.data.source)
      << (s.data.path.empty() ? "" : " (" + one_line(s.data.path) + ")") << ", batch " << s.data.batch_size << "x"
      << s.train.accumulation << ", " << steps_text(s) << ", lr " << s.train.lr << ", "
      << model::to_string(s.train.precision) << " on " << s.hardware.device << ", seed " << s.train.seed;
    return o.str();
  }
  o << "resnet" << s.model.encoder << " + " << model::to_string(s.model.decoder) << ", data "
    << to_string(s.data.source) << (s.data.path.empty() ? "" : " (" + s.data.path + ")") << ", batch "
    << s.data.batch_size << "x" << s.train.accumulation << ", " << s.data.size << "x" << s.data.size << ", "
    << steps_text(s) << ", " << model::to_string(s.train.optimizer) << " lr " << s.train.lr << ", "
    << model::to_string(s.train.precision) << " on " << s.hardware.device << ", seed " << s.train.seed;
  return o.str();
}

RunVerdict verdict_of(const RunReport& r) {
  if (r.expectation_met) return RunVerdict::kMet;
  return r.not_run_here() ? RunVerdict::kSkipped : RunVerdict::kNotMet;
}

std::string to_string(RunVerdict v) {
  switch (v) {
    case RunVerdict::kMet: return "met";
    case RunVerdict::kNotMet: return "not met";
    case RunVerdict::kSkipped: return "skipped";
  }
  return "not met";
}

VerdictCounts count_verdicts(const std::vector<RunReport>& runs) {
  VerdictCounts c;
  for (const auto& r : runs) {
    switch (verdict_of(r)) {
      case RunVerdict::kMet: ++c.met; break;
      case RunVerdict::kNotMet: ++c.not_met; break;
      case RunVerdict::kSkipped: ++c.skipped; break;
    }
  }
  return c;
}

std::string report_title(const RunReport& r) {
  const auto& f = r.failure;
  const std::string name = one_line(r.scenario.name);
  if (supervisor::is_failure(r.outcome)) {
    const kb::FailureClass* cls = f.klass.empty() ? nullptr : kb::KnowledgeBase::shipped().find(f.klass);
    return (cls ? cls->title : "Training " + to_string(r.outcome)) + (f.module.empty() ? "" : " in " + f.module) +
           (f.step ? " at step " + std::to_string(*f.step) : "");
  }
  switch (verdict_of(r)) {
    case RunVerdict::kSkipped: return "Scenario " + name + " not run on this machine";
    case RunVerdict::kNotMet: return "Scenario " + name + ": expectation not met (training " + to_string(r.outcome) + ")";
    case RunVerdict::kMet: break;
  }
  return "Scenario " + name + " " + to_string(r.outcome);
}

namespace {

// The YAML front matter.
void md_front_matter(std::ostream& md, const RunReport& r, const std::string& title) {
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
     << "tags: ['bug_report', 'dbh'" << (f.klass.empty() ? "" : ", '" + f.klass + "'") << "]\n"
     << "---\n\n";
}

// "# title" and Summary: the outcome, how it was judged, the expectation.
void md_summary(std::ostream& md, const RunReport& r, const std::string& title) {
  const auto& s = r.scenario;
  const auto& f = r.failure;
  const bool failed = supervisor::is_failure(r.outcome);
  const bool skipped = r.outcome == scenario::Outcome::kSkipped;
  const std::string name_md = markdown_inline(r.scenario.name);
  md << "# " << markdown_inline(title) << "\n\n";
  md << "## Summary\n\n";
  if (failed) {
    md << "Training under scenario " << name_md << " ended **" << to_string(r.outcome) << "**";
    if (!f.klass.empty()) md << " (class `" << f.klass << "`)";
    if (f.step) md << " at step " << *f.step;
    if (!f.module.empty()) md << " in module `" << f.module << "`";
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
    md << "**Data-dependent:** " << (*r.data_dependent ? "yes" : "no") << ". " << r.data_dependent_reason
       << "\n\n";
  }
  if (r.determinism.checked) {
    md << "**Determinism:** " << r.determinism.processes << " processes were "
       << (r.determinism.identical ? "bit-identical" : "not identical") << ". " << r.determinism.detail
       << "\n\n";
  }
  md << "The scenario's expectation (`outcome: " << to_string(s.expect.outcome) << "`"
     << (s.expect.failure_class ? ", `failure_class: " + *s.expect.failure_class + "`" : "")
     << (s.expect.step ? ", `step: " + std::to_string(*s.expect.step) + "`" : "")
     << (s.expect.module ? ", `module: " + *s.expect.module + "`" : "") << ") was **"
     << (r.expectation_met  ? "met"
         : r.not_run_here() ? "not judged"
                            : "not met")
     << "**.\n";
  for (const auto& w : r.expectation_why) md << "- " << w << "\n";
}

// The words an external worker's `hello` environment holds, in the order
// shown, with their labels; values are cut (the worker chose them).
constexpr std::pair<const char*, const char*> kWorkerEnvironment[] = {
    {"python", "Python"}, {"torch", "torch"},         {"cuda", "CUDA (torch build)"}, {"cudnn", "cuDNN"},
    {"lightning", "Lightning"}, {"device", "Device"}, {"device_name", "Device name"}};
constexpr size_t kWorkerEnvironmentValueBytes = 200;

}  // namespace

std::vector<EnvironmentLine> environment_lines(const RunReport& r) {
  const auto& s = r.scenario;
  const auto& e = r.env;
  const auto& main = r.trials.front().analysis;
  const bool external = s.worker.external();
  std::vector<EnvironmentLine> out;
  auto line = [&](std::string k, std::string v) { out.push_back({std::move(k), std::move(v), false}); };
  if (external) {
    out.push_back({"Training", main.worker.empty() ? "your command (it said nothing of itself)" : main.worker, true});
    for (const auto& [key, label] : kWorkerEnvironment) {
      const auto it = main.worker_environment.is_object() ? main.worker_environment.find(key)
                                                          : main.worker_environment.end();
      if (it == main.worker_environment.end() || !it->is_string() || it->get<std::string>().empty()) continue;
      out.push_back({label, truncate_utf8(it->get<std::string>(), kWorkerEnvironmentValueBytes), true});
    }
  }
  line("GPU", e.gpus.empty() ? "none (CPU run)" : e.gpus.front());
  for (size_t i = 1; i < e.gpus.size(); ++i) line("GPU " + std::to_string(i), e.gpus[i]);
  line("Driver", e.driver_version.empty() ? "none" : e.driver_version);
  if (!external) {
    line("CUDA (LibTorch build)", e.torch_cuda.empty() ? "none" : e.torch_cuda);
    line("cuDNN", e.cudnn_version.empty() ? "unavailable" : e.cudnn_version);
    line("LibTorch", e.torch_version);
    line("OpenCV", e.opencv_version);
  }
  line("OS", e.os);
  line("Kernel", e.kernel + (e.wsl ? " (WSL2)" : " (not WSL2)"));
  line("CPU", e.cpu_model + " (" + std::to_string(e.cpu_cores) + " cores)");
  line("RAM", scenario::format_bytes(e.ram_bytes));
  line("dbh", e.dbh_version);
  if (s.hardware.device.rfind("cuda", 0) == 0) {
    line("Compute capability", e.compute_capability.empty() ? "unknown" : e.compute_capability);
    if (!external) line("Fault kernels built for", e.kernel_archs.empty() ? "none (no nvcc at build time)" : e.kernel_archs);
    line("CUDA allocator", e.alloc_conf.empty() ? "defaults (no PYTORCH_CUDA_ALLOC_CONF)" : e.alloc_conf);
    if (!external) {
      line("cuDNN settings", std::string(s.hardware.cudnn_enabled ? "enabled" : "disabled") + ", benchmark " +
                                 (s.hardware.cudnn_benchmark ? "on" : "off") + ", deterministic " +
                                 (s.hardware.cudnn_deterministic ? "on" : "off") + "; TF32 " +
                                 (s.hardware.allow_tf32 ? "allowed" : "off"));
    }
  } else if (const auto set = scenario::cuda_only_settings_on_cpu(s); !set.empty()) {
    out.push_back({"Not tested on the CPU", scenario::join(set) + " (CUDA settings; only a run on a GPU shows their effect)", true});
  }
  if (const auto set = scenario::real_data_settings_unread(s); !set.empty()) {
    out.push_back({"Not read",
                   scenario::join(set) + " (read only with data.source=real; this run trained on " + to_string(s.data.source) + ")",
                   true});
  }
  return out;
}

namespace {

// Environment: the machine, libraries, settings and inputs.
void md_environment(std::ostream& md, const RunReport& r) {
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
void md_reproduce(std::ostream& md, const RunReport& r) {
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
       << "`" << (s.expect.failure_class ? ", class `" + *s.expect.failure_class + "`" : "");
  }
}

// Actual Behavior: one row per trial.
void md_trials(std::ostream& md, const RunReport& r) {
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
       << fmt(a.seconds, 3) << " |\n";
  }
}

// The main trial's losses and memory: budget, the failing moment, phases.
void md_main_memory(std::ostream& md, const RunReport& r) {
  const auto& main = r.trials.front().analysis;
  if (!main.steps.empty()) {
    md << "\nLoss per step (main trial): ";
    for (size_t i = 0; i < main.steps.size() && i < 20; ++i) md << (i ? ", " : "") << fmt(main.steps[i].loss);
    md << (main.steps.size() > 20 ? ", …" : "") << ". Peak memory " << scenario::format_bytes(main.peak_memory_bytes)
       << " (host RSS). Plots: `loss.png`, `memory.png`; per-step numbers: `metrics.csv`.\n";
  }
  if (!main.budget.is_null() && !main.budget.empty()) {
    md << "\nMemory budget: " << scenario::format_bytes(main.budget.value("budget_bytes", int64_t{0})) << ", enforced by "
       << main.budget.value("method", std::string("nothing")) << ". " << main.budget.value("detail", std::string()) << "\n";
  }
  if (!main.memory_at_failure.is_null() && !main.memory_at_failure.empty()) {
    const auto& m = main.memory_at_failure["memory"];
    md << "\nMemory at the failing moment: RSS " << scenario::format_bytes(m.value("rss_bytes", int64_t{0})) << ", process peak "
       << scenario::format_bytes(m.value("peak_rss_bytes", int64_t{0}));
    if (m.contains("cuda_allocated_bytes")) {
      md << ", CUDA allocated " << scenario::format_bytes(m.value("cuda_allocated_bytes", int64_t{0})) << ", reserved "
         << scenario::format_bytes(m.value("cuda_reserved_bytes", int64_t{0}));
    }
    const auto& phases = main.memory_at_failure["phases"];
    if (phases.is_object() && !phases.empty()) {
      md << "; phases reached in that step:";
      for (const auto& [phase, pm] : phases.items()) {
        md << " " << phase << " " << scenario::format_bytes(pm.value("rss_bytes", int64_t{0}));
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
        return st.phases.contains(phase) ? scenario::format_bytes(st.phases[phase].value(key, int64_t{0})) : std::string("-");
      };
      md << "| " << st.run << " | " << st.step << " | " << cell("data") << " | " << cell("forward") << " | "
         << cell("backward") << " | " << cell("optimizer") << " | " << scenario::format_bytes(st.peak_bytes) << " |\n";
    }
  }
}

// The main trial's allocator snapshot, injected faults, overlays and
// validation.
void md_main_evidence(std::ostream& md, const RunReport& r) {
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
                              : *fr.real ? "the GPU (real" + (fr.hardware_error.empty() ? "" : ": " + fr.hardware_error) + ")"
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
        md << " " << (it == e.metrics.end() ? std::string("-") : fmt(it->second, 3)) << " |";
      }
      md << "\n";
    }
  } else if (!main.evals.empty() || main.evaluator_self_check) {
    md << "\nValidation (ICDAR 2015 protocol";
    if (main.evaluator_self_check) {
      md << "; evaluator self-check on the ground truth: h-mean " << fmt(*main.evaluator_self_check, 3);
    }
    md << "):\n\n| step | precision | recall | h-mean | matched / words | detections | mean P | seconds |\n"
          "|---|---|---|---|---|---|---|---|\n";
    for (const auto& e : main.evals) {
      md << "| " << e.step << " | " << fmt(e.precision, 3) << " | " << fmt(e.recall, 3) << " | " << fmt(e.hmean, 3)
         << " | " << e.matched << " / " << e.gt << " | " << e.det << " | " << fmt(e.prob_mean, 3) << " | "
         << fmt(e.seconds, 1) << " |\n";
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
void md_logs(std::ostream& md, const RunReport& r) {
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
    std::vector<std::string> escaped;
    for (const auto& w : warnings) escaped.push_back(markdown_inline(w));
    md << "Warnings from the worker:\n\n" << bullet_list(escaped) << "\n";
  }
}

// Root Cause Analysis, Resolution, Testing, Prevention.
void md_analysis(std::ostream& md, const RunReport& r) {
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

std::string report_markdown(const RunReport& r) {
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

std::string junit_xml(const std::vector<RunReport>& runs, const std::string& suite_name, const CiEnvironment& ci) {
  const auto esc = [](const std::string& s) { return xml_escape(s); };
  int failures = 0, errors = 0, skipped = 0;
  double total = 0;
  for (const auto& r : runs) {
    total += r.seconds;
    if (r.not_run_here()) ++skipped;
    if (r.expectation_met || r.not_run_here()) continue;
    const bool error = r.outcome == scenario::Outcome::kCrashed || r.outcome == scenario::Outcome::kTimedOut ||
                       r.outcome == scenario::Outcome::kHung || r.outcome == scenario::Outcome::kUnresolved;
    (error ? errors : failures)++;
  }
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"dbh\" tests=\"" << runs.size() << "\" failures=\"" << failures
    << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << fmt(total, 6) << "\">\n"
    << "  <testsuite name=\"" << esc(suite_name) << "\" tests=\"" << runs.size() << "\" failures=\""
    << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << fmt(total, 6)
    << "\">\n";
  for (const auto& r : runs) {
    x << "    <testcase classname=\"" << esc(suite_name) << "\" name=\"" << esc(r.scenario.name)
      << "\" time=\"" << fmt(r.seconds, 6) << "\">\n";
    if (r.not_run_here()) {
      x << "      <skipped message=\"" << esc(r.failure.message) << "\"/>\n";
    } else if (!r.expectation_met) {
      const bool error = r.outcome == scenario::Outcome::kCrashed || r.outcome == scenario::Outcome::kTimedOut ||
                         r.outcome == scenario::Outcome::kHung || r.outcome == scenario::Outcome::kUnresolved;
      std::string why;
      for (const auto& w : r.expectation_why) why += w + "; ";
      x << "      <" << (error ? "error" : "failure") << " type=\"" << to_string(r.outcome)
        << "\" message=\"" << esc(why) << "\">" << esc(r.failure.message) << "\n"
        << esc("repro: " + r.repro_command) << "</" << (error ? "error" : "failure") << ">\n";
    }
    std::string out = "report: " + r.out_dir + "/report.md";
    if (const std::string a = ci.gitlab_ci ? gitlab_attachments(r.out_dir, ci.gitlab_project_dir) : ""; !a.empty()) {
      out += "\n" + a;
    }
    x << "      <system-out>" << esc(out) << "</system-out>\n";
    x << "    </testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

void write_plot_png(const std::string& path, const std::string& title,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<double>>& series, const std::string& y_label) {
  // Per step: x is the step index; a non-finite value is marked where it
  // happened (Note [Plots that tell the truth]).
  PlotOptions o;
  o.title = title;
  o.y_label = y_label;
  o.integer_x = true;
  o.failed_label = "non-finite value";
  std::vector<PlotSeries> lines;
  for (size_t k = 0; k < series.size(); ++k) {
    PlotSeries s;
    s.name = k < names.size() ? names[k] : "";
    for (size_t i = 0; i < series[k].size(); ++i) {
      s.x.push_back(static_cast<double>(i));
      s.y.push_back(series[k][i]);
      if (!std::isfinite(series[k][i])) s.failed_x.push_back(static_cast<double>(i));
    }
    lines.push_back(std::move(s));
  }
  write_plot(path, o, lines);
}

}  // namespace dbh::harness::report

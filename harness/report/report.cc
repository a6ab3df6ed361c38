#include "harness/report/report.h"

#include "harness/common/json_fields.h"
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
#include "harness/report/numbers.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::report {

using ojson = nlohmann::ordered_json;

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
  o << (field_or(cl, "value", false) ? "channels-last" : "NCHW") << " (" << field_or(cl, "source", std::string("?")) << "), "
    << field_or(th, "value", int64_t{0}) << " intra-op thread(s) (" << field_or(th, "source", std::string("?"))
    << ")";
  if (t.contains("timings") && t["timings"].is_array() && !t["timings"].empty()) {
    o << "; best step of each candidate at " << field_or(t, "size", int64_t{0}) << "², batch " << field_or(t, "batch", int64_t{0})
      << ":";
    const char* sep = " ";
    for (const auto& c : t["timings"]) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f ms", 1000.0 * field_or(c, "best_seconds", 0.0));
      o << sep << (field_or(c, "channels_last", false) ? "channels-last" : "NCHW") << " × " << field_or(c, "threads", int64_t{0})
        << " " << ms;
      sep = ", ";
    }
    if (t.contains("cache")) o << " (measured " << field_or(t, "measured_at", std::string("?")) << "; cached in `" << field_or(t, "cache", std::string()) << "`)";
  }
  if (t.contains("untrusted")) {
    o << "; **the measurement was not trusted**: " << field_or(t, "untrusted", std::string())
      << ", so PyTorch's defaults were used and nothing was cached (it is measured again next run)";
  }
  if (t.contains("over_budget")) {
    o << "; not measured: " << field_or(t, "over_budget", std::string()) << ", so PyTorch's defaults were used";
    if (t.contains("cache")) o << " (the verdict is cached in `" << field_or(t, "cache", std::string()) << "`)";
  }
  if (t.contains("remeasured")) o << "; measured again: " << field_or(t, "remeasured", std::string());
  if (t.contains("error")) o << "; the measurement failed (" << field_or(t, "error", std::string()) << "), so PyTorch's defaults were used";
  if (t.contains("cache_note")) o << "; " << field_or(t, "cache_note", std::string());
  return o.str();
}

nlohmann::ordered_json report_json(const run::RunReport& r) {
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["scenario_name"] = r.scenario.name;
  j["started_at"] = r.started_at;
  j["seconds"] = r.seconds;
  j["outcome"] = to_string(r.outcome);
  j["expectation"] = {{"met", r.expectation_met},
                      {"verdict", to_string(run::verdict_of(r))},
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
                           {"forked", t.analysis.forked},
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

std::string report_title(const run::RunReport& r) {
  const auto& f = r.failure;
  const std::string name = one_line(r.scenario.name);
  if (supervisor::is_failure(r.outcome)) {
    const kb::FailureClass* cls = f.klass.empty() ? nullptr : kb::KnowledgeBase::shipped().find(f.klass);
    return (cls ? cls->title : "Training " + to_string(r.outcome)) + (f.module.empty() ? "" : " in " + f.module) +
           (f.step ? " at step " + std::to_string(*f.step) : "");
  }
  switch (run::verdict_of(r)) {
    case run::RunVerdict::kSkipped: return "Scenario " + name + " not run on this machine";
    case run::RunVerdict::kNotMet: return "Scenario " + name + ": expectation not met (training " + to_string(r.outcome) + ")";
    case run::RunVerdict::kMet: break;
  }
  return "Scenario " + name + " " + to_string(r.outcome);
}

namespace {

// The words an external worker's `hello` environment holds, in the order
// shown, with their labels; values are cut (the worker chose them).
constexpr std::pair<const char*, const char*> kWorkerEnvironment[] = {
    {"python", "Python"}, {"torch", "torch"},         {"cuda", "CUDA (torch build)"}, {"cudnn", "cuDNN"},
    {"lightning", "Lightning"}, {"device", "Device"}, {"device_name", "Device name"}};
constexpr size_t kWorkerEnvironmentValueBytes = 200;

}  // namespace

std::vector<EnvironmentLine> environment_lines(const run::RunReport& r) {
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

std::string junit_xml(const std::vector<run::RunReport>& runs, const std::string& suite_name, const CiEnvironment& ci) {
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
    << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << significant(total, 6) << "\">\n"
    << "  <testsuite name=\"" << esc(suite_name) << "\" tests=\"" << runs.size() << "\" failures=\""
    << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << significant(total, 6)
    << "\">\n";
  for (const auto& r : runs) {
    x << "    <testcase classname=\"" << esc(suite_name) << "\" name=\"" << esc(r.scenario.name)
      << "\" time=\"" << significant(r.seconds, 6) << "\">\n";
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

#include "harness/cli/run_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "harness/bisect/probe.h"
#include "harness/common/error.h"
#include "harness/env/environment.h"
#include "harness/faults/catalog.h"
#include "harness/report/knowledge_base.h"
#include "harness/report/report.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"

namespace dbh::harness {
namespace fs = std::filesystem;

namespace {

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream s;
  s << std::put_time(&tm, "%Y-%m-%dT%H:%M:%S%z");
  return s.str();
}

std::string stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream s;
  s << std::put_time(&tm, "%Y%m%d-%H%M%S");
  return s.str();
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@") ==
                        std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Printer {
  bool quiet, verbose, tty, json;
  void line(const std::string& s) const {
    if (!quiet) std::cout << s << std::endl;
  }
};

TrialRecord run_one_trial(const Scenario& s, const std::string& label,
                          const std::vector<std::string>& overrides, const fs::path& dir,
                          int64_t index, const RunOptions& o, const Printer& p) {
  const int64_t total = s.train.max_steps;
  auto on_event = [&](const Event& e) {
    if (p.quiet) return;
    if (e.type == "step_end") {
      const int64_t step = e.get<int64_t>("step", 0);
      std::ostringstream l;
      const double elapsed = e.t;
      const double eta = step + 1 < total ? elapsed / static_cast<double>(step + 1) * static_cast<double>(total - step - 1) : 0.0;
      l << "  [" << label << "] run " << e.get<int64_t>("run", 0) << " step " << std::setw(3) << step + 1 << "/"
        << total << "  loss " << std::fixed << std::setprecision(4) << e.get<double>("loss", 0) << "  "
        << std::setprecision(2) << e.get<double>("seconds", 0) << " s/step  ETA " << std::setprecision(0) << eta << " s";
      if (p.tty) {
        std::cout << "\r" << l.str() << "   " << std::flush;
      } else if (p.verbose || step + 1 == total || (step + 1) % 10 == 0) {
        std::cout << l.str() << std::endl;
      }
    } else if (e.type == "fault_fired" && p.verbose) {
      std::cout << (p.tty ? "\n" : "") << "  [" << label << "] fault " << e.get<std::string>("fault", "")
                << " fired at step " << e.get<int64_t>("step", 0) << std::endl;
    } else if (e.type == "error" || (e.type == "health" && e.get<std::string>("check", "") == "finite")) {
      std::cout << (p.tty ? "\n" : "") << "  [" << label << "] " << e.type << ": "
                << (e.type == "error" ? e.get<std::string>("message", "")
                                      : "non-finite " + e.get<std::string>("kind", "") + " " +
                                            e.get<std::string>("site", ""))
                << std::endl;
    }
  };
  TrialRecord t;
  t.label = label;
  t.overrides = overrides;
  t.dir = dir.string();
  t.analysis = run_scenario_trial(s, dir.string(), index, o.withhold_fault_records, &t.stderr_tail, on_event);
  if (p.tty && !p.quiet) std::cout << std::endl;
  return t;
}

void write_metrics(const fs::path& path, const TrialAnalysis& a) {
  std::ostringstream csv;
  csv << "run,step,loss,bce,l1,dice,lr,grad_norm,seconds,rss_bytes,loss_bits\n";
  csv << std::setprecision(9);
  for (const auto& s : a.steps) {
    csv << s.run << "," << s.step << "," << s.loss << "," << s.bce << "," << s.l1 << "," << s.dice << ","
        << s.lr << "," << s.grad_norm << "," << s.seconds << "," << s.rss_bytes << "," << s.loss_bits << "\n";
  }
  write_file_atomically(path.string(), csv.str());
}

DeterminismCheck compare_processes(const std::vector<TrialRecord>& trials) {
  DeterminismCheck d;
  d.checked = true;
  d.processes = static_cast<int64_t>(trials.size());
  int passed = 0;
  for (const auto& t : trials) passed += t.analysis.outcome == Outcome::kPassed ? 1 : 0;
  d.pass_rate = static_cast<double>(passed) / static_cast<double>(trials.size());
  const auto& ref = trials.front().analysis;
  for (size_t k = 1; k < trials.size(); ++k) {
    const auto& other = trials[k].analysis;
    const size_t n = std::min(ref.steps.size(), other.steps.size());
    for (size_t i = 0; i < n; ++i) {
      if (ref.steps[i].loss_bits != other.steps[i].loss_bits) {
        d.identical = false;
        if (!d.first_divergent_step || ref.steps[i].step < *d.first_divergent_step) {
          d.first_divergent_step = ref.steps[i].step;
          std::ostringstream s;
          s << "first divergence at step " << ref.steps[i].step << ": total loss " << std::setprecision(9)
            << ref.steps[i].loss << " (process 1) vs " << other.steps[i].loss << " (process " << k + 1 << ")";
          d.detail = s.str();
        }
        break;
      }
    }
    if (d.identical && ref.run_checksums != other.run_checksums) {
      d.identical = false;
      d.detail = "per-step losses agree but final parameter checksums differ (process 1 vs " +
                 std::to_string(k + 1) + ")";
    }
    if (ref.steps.size() != other.steps.size() && d.identical) {
      d.identical = false;
      d.detail = "processes completed different numbers of steps";
    }
  }
  if (d.identical) {
    d.detail = "per-step loss bit patterns and final parameter checksums are identical across " +
               std::to_string(trials.size()) + " processes";
    if (!ref.run_checksums.empty()) d.detail += " (checksum " + ref.run_checksums.back() + ")";
  }
  return d;
}

std::string repro_command(const Scenario& s, const std::string& scenario_path) {
  std::string cmd = "dbh run " + shell_quote(scenario_path);
  for (const auto& o : s.overrides) cmd += " " + shell_quote(o);
  return cmd;
}

// Runs one scenario and writes its reports into `out`. Throws ScenarioError.
RunReport run_scenario(const std::string& path, const RunOptions& o, const fs::path& out, const Printer& p) {
  std::vector<std::string> overrides = o.overrides;
  if (!o.device.empty()) overrides.push_back("hardware.device=" + o.device);
  if (!o.seed.empty()) overrides.push_back("train.seed=" + o.seed);
  const auto t0 = std::chrono::steady_clock::now();
  RunReport r;
  r.scenario = load_scenario(path, overrides);
  r.started_at = now_iso();
  r.out_dir = fs::absolute(out).string();
  fs::create_directories(out);
  write_file_atomically((out / "scenario.resolved.json").string(), resolved_json(r.scenario) + "\n");
  const Scenario& s = r.scenario;
  p.line("dbh run " + s.name + ": " + [&] {
    std::ostringstream d;
    d << "resnet" << s.model.encoder << "+" << s.model.decoder << ", " << s.data.source << ", batch "
      << s.data.batch_size << ", " << s.data.size << "px, " << s.train.max_steps << " steps on " << s.hardware.device;
    if (!s.faults.empty()) {
      d << ", faults:";
      for (const auto& f : s.faults) d << " " << f.name << "@" << f.at_step;
    }
    if (!s.overrides.empty()) {
      d << ", overrides:";
      for (const auto& x : s.overrides) d << " " << x;
    }
    return d.str();
  }());
  // Main trial (and repeated processes).
  const int64_t processes = s.repeat.processes;
  for (int64_t i = 0; i < processes; ++i) {
    const std::string label = processes == 1 ? "main" : "process " + std::to_string(i + 1);
    const fs::path dir = out / (processes == 1 ? std::string("main") : "process-" + std::to_string(i + 1));
    r.trials.push_back(run_one_trial(s, label, {}, dir, i, o, p));
  }
  // Controls: the same scenario with a few keys changed.
  for (size_t c = 0; c < s.controls.size(); ++c) {
    auto control_overrides = overrides;
    control_overrides.insert(control_overrides.end(), s.controls[c].begin(), s.controls[c].end());
    Scenario cs = load_scenario(path, control_overrides);
    r.trials.push_back(run_one_trial(cs, "control " + std::to_string(c + 1), s.controls[c],
                                     out / ("control-" + std::to_string(c + 1)), 100 + static_cast<int64_t>(c), o, p));
  }
  // Outcome of the run.
  const auto& main = r.trials.front().analysis;
  r.outcome = main.outcome;
  r.failure = main.failure;
  if (processes > 1) {
    std::vector<TrialRecord> procs(r.trials.begin(), r.trials.begin() + processes);
    r.determinism = compare_processes(procs);
    if (!r.determinism.identical && r.outcome == Outcome::kPassed) {
      r.outcome = Outcome::kNondeterministic;
      r.failure.klass = "nondeterminism";
      r.failure.step = r.determinism.first_divergent_step;
      r.failure.message = r.determinism.detail;
      r.failure.evidence.push_back(r.determinism.detail);
    }
  }
  if (!s.controls.empty()) {
    bool controls_pass = true;
    std::string keys;
    bool data_key = false;
    for (size_t c = 0; c < s.controls.size(); ++c) {
      controls_pass = controls_pass && !is_failure(r.trials[static_cast<size_t>(processes) + c].analysis.outcome);
      for (const auto& kv : s.controls[c]) {
        keys += (keys.empty() ? "" : ", ") + kv;
        data_key = data_key || kv.rfind("data.source=", 0) == 0 || kv.rfind("data.path=", 0) == 0;
      }
    }
    const bool main_fails = is_failure(r.outcome);
    if (main_fails && controls_pass) {
      r.data_dependent = data_key;
      if (data_key) {
        r.data_dependent_reason = "the same training passed with " + keys + " and failed with the scenario's data (" +
                                  s.data.source + (s.data.path.empty() ? "" : " " + s.data.path) +
                                  "): the failure depends on the data, not on the model, trainer or device";
        r.failure.evidence.push_back(r.data_dependent_reason);
      } else {
        r.failure.evidence.push_back("a control run with " + keys +
                                     " passed: the failure depends on these settings");
      }
    } else if (main_fails) {
      r.data_dependent = false;
      r.data_dependent_reason = "the control run with " + keys + " failed too: the failure does not depend on it";
      r.failure.evidence.push_back(r.data_dependent_reason);
    }
  }
  // Expectation.
  TrialAnalysis judged = main;
  judged.outcome = r.outcome;
  judged.failure = r.failure;
  r.expectation_met = expectation_met(s.expect, judged, &r.expectation_why);
  if (s.expect.deterministic) {
    if (!r.determinism.checked) {
      r.expectation_met = false;
      r.expectation_why.push_back("deterministic: expected a check, but repeat.processes is 1");
    } else if (*s.expect.deterministic != r.determinism.identical) {
      r.expectation_met = false;
      r.expectation_why.push_back(std::string("deterministic: expected ") + (*s.expect.deterministic ? "true" : "false") +
                                  ", got " + (r.determinism.identical ? "true" : "false"));
    }
  }
  if (s.expect.data_dependent && (!r.data_dependent || *r.data_dependent != *s.expect.data_dependent)) {
    r.expectation_met = false;
    r.expectation_why.push_back(std::string("data_dependent: expected ") + (*s.expect.data_dependent ? "true" : "false") +
                                ", got " + (r.data_dependent ? (*r.data_dependent ? "true" : "false") : "undecided"));
  }
  r.repro_command = repro_command(s, path);
  r.env = collect_environment();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Files.
  write_metrics(out / "metrics.csv", main);
  {
    std::error_code ec;
    fs::copy_file(fs::path(r.trials.front().dir) / "events.jsonl", out / "events.jsonl",
                  fs::copy_options::overwrite_existing, ec);
  }
  std::vector<double> loss, bce, l1, dice, rss;
  for (const auto& st : main.steps) {
    loss.push_back(st.loss), bce.push_back(st.bce), l1.push_back(st.l1), dice.push_back(st.dice);
    rss.push_back(static_cast<double>(st.rss_bytes) / (1024.0 * 1024.0));
  }
  write_plot_png((out / "loss.png").string(), "loss parts per step: " + s.name, {"total", "bce", "l1", "dice"},
                 {loss, bce, l1, dice}, "loss");
  write_plot_png((out / "memory.png").string(), "host RSS per step (MiB): " + s.name, {"rss MiB"}, {rss}, "MiB");
  write_file_atomically((out / "repro.sh").string(),
                        "#!/bin/sh\n# Reproduces this run (" + s.name + ").\nset -e\ncd " +
                            shell_quote(fs::current_path().string()) + "\nexec " + r.repro_command + "\n");
  fs::permissions(out / "repro.sh", fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add);
  write_file_atomically((out / "report.json").string(), report_json(r).dump(2) + "\n");
  write_file_atomically((out / "report.md").string(), report_markdown(r));
  const fs::path sentinel = out / ".FAILURE";
  if (is_failure(r.outcome)) {
    write_file_atomically(sentinel.string(), to_string(r.outcome) + " " + r.failure.klass + "\n" +
                                                 r.failure.message + "\n");
  } else {
    fs::remove(sentinel);
  }
  return r;
}

void print_summary(const RunReport& r, const Printer& p) {
  std::ostringstream s;
  s << (r.expectation_met ? "PASS" : "FAIL") << "  " << r.scenario.name << ": " << to_string(r.outcome);
  if (!r.failure.klass.empty()) s << " (" << r.failure.klass;
  if (r.failure.step) s << " at step " << *r.failure.step;
  if (!r.failure.module.empty()) s << " in " << r.failure.module;
  if (!r.failure.klass.empty()) s << ")";
  s << ", expectation " << (r.expectation_met ? "met" : "NOT met");
  for (const auto& w : r.expectation_why) s << "\n      " << w;
  s << "\n      report: " << r.out_dir << "/report.md";
  if (!r.expectation_met) s << "\n      repro:  " << r.repro_command;
  if (!p.json) std::cout << s.str() << std::endl;
}

fs::path default_out(const std::string& name) {
  return fs::path("reports") / "runs" / (name + "-" + stamp() + "-" + std::to_string(getpid()));
}

}  // namespace

int run_command(const RunOptions& o) {
  const Printer p{o.quiet || o.json, o.verbose, isatty(STDOUT_FILENO) != 0, o.json};
  try {
    if (o.scenarios.size() != 1) throw ScenarioError("dbh run: expected one scenario file");
    const std::string name = fs::path(o.scenarios.front()).stem().string();
    // Validate before creating anything, so bad input leaves nothing behind.
    (void)load_scenario(o.scenarios.front(), o.overrides);
    const fs::path out = o.out.empty() ? default_out(name) : fs::path(o.out);
    RunReport r = run_scenario(o.scenarios.front(), o, out, p);
    if (!o.junit.empty()) write_file_atomically(o.junit, junit_xml({r}, "dbh.run"));
    if (o.json) std::cout << report_json(r).dump(2) << std::endl;
    print_summary(r, p);
    return r.expectation_met ? 0 : 1;
  } catch (const ScenarioError& e) {
    std::cerr << "dbh: " << e.what() << "\n";
    return 2;
  } catch (const ReportError& e) {
    std::cerr << "dbh: " << e.what() << "\n";
    return 2;
  }
}

namespace {
std::vector<std::string> expand_scenarios(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in)) {
        const auto ext = e.path().extension();
        if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml")) found.push_back(e.path().string());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(in)) {
      files.push_back(in);
    } else {
      throw ScenarioError(in + ": expected a scenario file or folder, got none");
    }
  }
  return files;
}
}  // namespace

int suite_command(const RunOptions& o) {
  const Printer p{o.quiet || o.json, o.verbose, isatty(STDOUT_FILENO) != 0, o.json};
  std::vector<std::string> files;
  try {
    files = expand_scenarios(o.scenarios);
    if (files.empty()) throw ScenarioError("dbh suite: expected at least one scenario, got none");
    for (const auto& f : files) (void)load_scenario(f, o.overrides);  // all valid before anything runs
  } catch (const ScenarioError& e) {
    std::cerr << "dbh: " << e.what() << "\n";
    return 2;
  }
  const fs::path root = o.out.empty() ? fs::path("reports") / "runs" / ("suite-" + stamp()) : fs::path(o.out);
  std::vector<RunReport> reports;
  int met = 0;
  for (const auto& f : files) {
    try {
      reports.push_back(run_scenario(f, o, root / fs::path(f).stem(), p));
      print_summary(reports.back(), p);
      met += reports.back().expectation_met ? 1 : 0;
    } catch (const ScenarioError& e) {
      std::cerr << "dbh: " << e.what() << "\n";
      return 2;
    }
  }
  if (!o.junit.empty()) write_file_atomically(o.junit, junit_xml(reports, "dbh.suite"));
  nlohmann::ordered_json summary;
  summary["schema_version"] = 1;
  summary["scenarios"] = files.size();
  summary["expectations_met"] = met;
  summary["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : reports) {
    summary["runs"].push_back({{"scenario", r.scenario.name}, {"outcome", to_string(r.outcome)},
                               {"expectation_met", r.expectation_met}, {"report", r.out_dir + "/report.md"}});
  }
  write_file_atomically((root / "suite.json").string(), summary.dump(2) + "\n");
  if (o.json) std::cout << summary.dump(2) << std::endl;
  std::cout << met << " passed, " << files.size() - static_cast<size_t>(met) << " failed" << std::endl;
  return met == static_cast<int>(files.size()) ? 0 : 1;
}

int list_command(const std::string& what, const std::string& dir) {
  if (what == "faults") {
    for (const auto& f : fault_catalog()) {
      std::cout << f.name << "\n    " << f.help << "\n";
      auto print = [](const ParamSpec& p) {
        std::cout << "    " << p.name << " (" << to_string(p.type)
                  << (p.required ? ", required" : p.default_value.empty() ? "" : ", default " + p.default_value) << ")";
        if (!p.allowed.empty()) {
          std::cout << " one of:";
          for (const auto& a : p.allowed) std::cout << " " << a;
        }
        if (!p.help.empty()) std::cout << ": " << p.help;
        std::cout << "\n";
      };
      for (const auto& p : f.params) print(p);
    }
    std::cout << "every fault also takes:\n";
    for (const auto& p : schedule_params()) {
      std::cout << "    " << p.name << " (" << to_string(p.type) << "): " << p.help << "\n";
    }
    return 0;
  }
  if (what == "profiles") {
    try {
      for (const auto& p : list_profiles()) {
        std::cout << std::left << std::setw(16) << p.name << std::setw(32) << p.display_name << std::setw(10)
                  << format_bytes(p.memory_bytes) << std::setw(14) << p.architecture << p.notes << "\n";
      }
    } catch (const ScenarioError& e) {
      std::cerr << "dbh: " << e.what() << "\n";
      return 2;
    }
    return 0;
  }
  if (what == "scenarios") {
    const fs::path d = dir.empty() ? fs::path(dbh_home()) / "scenarios" : fs::path(dir);
    std::vector<std::string> files;
    try {
      files = expand_scenarios({d.string()});
    } catch (const ScenarioError& e) {
      std::cerr << "dbh: " << e.what() << "\n";
      return 2;
    }
    for (const auto& f : files) {
      try {
        const auto s = load_scenario(f);
        std::cout << std::left << std::setw(36) << s.name << " expect " << s.expect.outcome
                  << (s.expect.failure_class ? "/" + *s.expect.failure_class : "") << "  "
                  << (s.description.size() > 90 ? s.description.substr(0, 87) + "..." : s.description) << "\n";
      } catch (const ScenarioError& e) {
        std::cout << std::left << std::setw(36) << fs::path(f).stem().string() << " INVALID: " << e.what() << "\n";
      }
    }
    return 0;
  }
  std::cerr << "dbh list: expected faults or scenarios, got " << what << "\n";
  return 2;
}

}  // namespace dbh::harness

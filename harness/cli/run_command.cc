#include "harness/common/environment_vars.h"
#include "harness/cli/run_command.h"
#include "harness/cli/suite_outputs.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <tuple>
#include <utility>

#include "harness/bisect/probe.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/hash.h"
#include "harness/common/home.h"
#include "harness/common/out_file.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/env/environment.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/report/ci_conventions.h"
#include "harness/kb/knowledge_base.h"
#include "harness/proto/event_types.h"
#include "harness/report/report.h"
#include "harness/report/report_html.h"
#include "harness/report/run_files.h"
#include "harness/report/run_verdict.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/judge.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/resolutions.h"
#include "harness/supervisor/scenario_trial.h"
#include "harness/supervisor/shard.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness {
namespace fs = std::filesystem;

namespace {

struct Printer {
  bool quiet, verbose, tty, json;
  bool progress = true;  // step progress lines (--no-progress turns them off)
  void line(const std::string& s) const {
    if (!quiet) std::cout << s << std::endl;
  }
};

TrialRecord run_one_trial(const Scenario& s, const std::string& label,
                          const std::vector<std::string>& overrides, const fs::path& dir,
                          int64_t index, const RunOptions& o, const Printer& p) {
  const int64_t total = s.train.last_step();
  auto on_event = [&](const Event& e) {
    if (p.quiet) return;
    if (e.type == event::kStepEnd) {
      if (!p.progress) return;
      const auto end = proto::step_end_from(e);
      const int64_t step = end.step;
      std::ostringstream l;
      const double elapsed = e.t;
      const double eta = step + 1 < total ? elapsed / static_cast<double>(step + 1) * static_cast<double>(total - step - 1) : 0.0;
      l << "  [" << label << "] run " << end.run << " step " << std::setw(3) << step + 1 << "/"
        << total << "  loss " << std::fixed << std::setprecision(4) << end.loss << "  "
        << std::setprecision(2) << end.seconds << " s/step  ETA " << std::setprecision(0) << eta << " s";
      if (p.tty) {
        std::cout << "\r" << l.str() << "   " << std::flush;
      } else if (p.verbose || step + 1 == total || (step + 1) % 10 == 0) {
        std::cout << l.str() << std::endl;
      }
    } else if (e.type == event::kFaultFired && p.verbose) {
      const auto fired = proto::fault_fired_from(e);
      std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] fault " << one_line(fired.fault)
                << " fired at step " << fired.step << std::endl;
    } else if (e.type == event::kError) {
      // What this machine lacks (a CUDA device) is a skip, not an error.
      const auto err = proto::error_from(e);
      const bool unavailable = err.kind == proto::error_kind::kUnavailable;
      std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] "
                << (unavailable ? std::string("not available here") : e.type) << ": " << one_line(err.message)
                << std::endl;
    } else if (e.type == event::kHealth) {
      const auto h = proto::health_from(e);
      if (h.check != "finite") return;
      std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] " << e.type << ": "
                << one_line("non-finite " + h.kind + " " + h.site) << std::endl;
    }
  };
  TrialRecord t;
  t.label = label;
  t.overrides = overrides;
  t.dir = dir.string();
  t.analysis = run_scenario_trial(s, dir.string(), index, o.withhold_fault_records, &t.stderr_tail, on_event);
  if (p.tty && p.progress && !p.quiet) std::cout << std::endl;
  // A trial the disk could not hold says nothing about the training: never
  // an outcome (a scenario expecting a failure would pass on it).
  std::vector<std::string> texts = {t.stderr_tail, t.analysis.failure.message};
  texts.insert(texts.end(), t.analysis.failure.secondary.begin(), t.analysis.failure.secondary.end());
  if (const std::string why = disk_full_evidence(texts); !why.empty()) throw ReportError(dir.string() + ": " + why);
  return t;
}


// The words of the command that reproduces a run of `s` from `scenario_path`.
std::vector<std::string> repro_args(const Scenario& s, const std::string& scenario_path) {
  std::vector<std::string> args = {self_command(), "run", path_for_command(scenario_path)};
  args.insert(args.end(), s.overrides.begin(), s.overrides.end());
  return args;
}

// An error message as one line: a path or value in it may hold a line break,
// and a CI log reads a line that starts with "::" as a workflow command.
std::string message(const std::exception& e) { return one_line(e.what()); }

// The command line's overrides, with the --device and --seed shortcuts.
std::vector<std::string> run_overrides(const RunOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  // A flag and an override of its key, both given: one would silently win.
  for (const auto& [flag, given, key] : {std::tuple<const char*, bool, const char*>{"--device", !o.device.empty(),
                                                                                    DBH_SCENARIO_KEY(hardware.device)},
                                         {"--seed", !o.seed.empty(), DBH_SCENARIO_KEY(train.seed)}}) {
    if (!given) continue;
    for (const auto& x : o.overrides) {
      if (override_sets(x, key)) {
        throw ScenarioError(std::string(flag) + ": expected either " + flag + " or the override " + key +
                            "=…, got both (" + flag + " " + (flag == std::string("--seed") ? o.seed : o.device) +
                            " and " + one_line(x) + ")");
      }
    }
  }
  if (!o.device.empty()) overrides.push_back(override_text(DBH_SCENARIO_KEY(hardware.device), o.device));
  if (!o.seed.empty()) overrides.push_back(override_text(DBH_SCENARIO_KEY(train.seed), o.seed));
  return overrides;
}

// Runs one scenario and writes its reports into `out`. Throws ScenarioError.
RunReport run_scenario(const std::string& path, const RunOptions& o, const fs::path& out, const Printer& p) {
  const std::vector<std::string> overrides = run_overrides(o);
  const auto t0 = std::chrono::steady_clock::now();
  RunReport r;
  r.scenario = load_scenario(path, overrides);
  r.started_at = now_iso();
  r.out_dir = fs::absolute(out).string();
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) {
      throw ReportError(out.string() + ": expected a writable output folder, got: " + ec.message());
    }
  }
  write_file_atomically((out / "scenario.resolved.json").string(), resolved_json(r.scenario) + "\n");
  const Scenario& s = r.scenario;
  p.line("dbh run " + one_line(s.name) + ": " + [&] {
    std::ostringstream d;
    if (s.worker.external()) {
      d << settings_text(s);
    } else {
      d << "resnet" << s.model.encoder << "+" << s.model.decoder << ", " << s.data.source << ", batch "
        << s.data.batch_size << ", " << s.data.size << "px, " << s.train.max_steps << " steps on " << s.hardware.device;
    }
    if (!s.faults.empty()) {
      d << ", faults:";
      for (const auto& f : s.faults) d << " " << f.name << "@" << f.at_step;
    }
    if (!s.overrides.empty()) {
      d << ", overrides:";
      for (const auto& x : s.overrides) d << " " << one_line(x);
    }
    return d.str();
  }());
  // A CUDA setting on a CPU run changes nothing: say so, so a pass is not
  // read as "cudnn_benchmark=true works".
  if (const auto set = cuda_only_settings_on_cpu(s); !set.empty()) {
    p.line("  note: " + join(set, " ") + (set.size() == 1 ? " configures" : " configure") + " CUDA; this run on " +
           s.hardware.device + " does not test " + (set.size() == 1 ? "it" : "them"));
  }
  // So is a dataset setting on synthetic data (a control that swaps the data
  // keeps the path): a pass is not "the dataset trains".
  if (const auto set = real_data_settings_unread(s); !set.empty()) {
    p.line("  note: " + join(set, " ") + (set.size() == 1 ? " is" : " are") +
           " read only with data.source=real; this run trains on " + s.data.source +
           " and does not read " + (set.size() == 1 ? "it" : "them"));
  }
  // Main trial (and repeated processes). After a stop request (SIGINT,
  // SIGTERM) no further trial starts; the main trial always exists.
  const int64_t processes = s.repeat.processes;
  for (int64_t i = 0; i < processes; ++i) {
    if (i > 0 && stop_requested() != 0) break;
    const std::string label = processes == 1 ? "main" : "process " + std::to_string(i + 1);
    const fs::path dir = out / (processes == 1 ? std::string("main") : "process-" + std::to_string(i + 1));
    r.trials.push_back(run_one_trial(s, label, {}, dir, i, o, p));
  }
  // Controls: the same scenario with a few keys changed.
  for (size_t c = 0; c < s.controls.size(); ++c) {
    if (stop_requested() != 0) break;
    auto control_overrides = overrides;
    control_overrides.insert(control_overrides.end(), s.controls[c].begin(), s.controls[c].end());
    Scenario cs = load_scenario(path, control_overrides);
    r.trials.push_back(run_one_trial(cs, "control " + std::to_string(c + 1), s.controls[c],
                                     out / ("control-" + std::to_string(c + 1)), 100 + static_cast<int64_t>(c), o, p));
  }
  // Resolutions of the main trial's failure, tried as controls.
  if (o.verify_resolutions && stop_requested() == 0 && is_failure(r.trials.front().analysis.outcome)) {
    const FailureClass* cls = KnowledgeBase::shipped().find(r.trials.front().analysis.failure.klass);
    if (cls != nullptr) {
      const RunResolution run = [&](const ResolutionCheck& check, const std::vector<std::string>& with, size_t k) {
        auto trial_overrides = overrides;
        trial_overrides.insert(trial_overrides.end(), with.begin(), with.end());
        const Scenario rs = load_scenario(path, trial_overrides);
        const std::string number = std::to_string(check.resolution + 1);
        ResolutionRun result;
        result.dir = "resolution-" + number;
        const auto t = run_one_trial(rs, "resolution " + number, check.overrides, out / result.dir,
                                     200 + static_cast<int64_t>(k), o, p);
        result.outcome = t.analysis.outcome;
        result.klass = t.analysis.failure.klass;
        return result;
      };
      r.resolution_checks = try_resolutions(*cls, nlohmann::json::parse(resolved_json(s)), run,
                                            [] { return stop_requested() != 0; });
    }
  }
  // What the trials mean (Note [The run's verdicts]).
  const int stopped = stop_requested();
  decide_run(r, processes, stopped);
  const auto& main = r.trials.front().analysis;
  std::vector<std::string> repro = repro_args(s, path);
  if (r.not_run_here() && s.hardware.device != "cpu") {
    // How to run it here instead, as a command that runs as pasted.
    std::vector<std::string> on_cpu = repro;
    on_cpu.push_back(override_text(DBH_SCENARIO_KEY(hardware.device), "cpu"));
    if (s.train.precision != "fp32") on_cpu.push_back(override_text(DBH_SCENARIO_KEY(train.precision), "fp32"));
    r.expectation_why.push_back("on this machine's CPU: " + shell_command(on_cpu));
  }
  // The layout and threads this run measured or found in the cache, pinned:
  // the repro runs with them even where the cache says otherwise (Note
  // [Measured choices]).
  if (const auto& t = main.tuning; t.is_object() && !t.contains("error")) {
    // (the tuning's name of a choice, the key that pins it)
    const std::pair<const char*, const char*> pinned[] = {{"channels_last", DBH_SCENARIO_KEY(train.channels_last)},
                                                          {"threads", DBH_SCENARIO_KEY(train.threads)}};
    for (const auto& [choice, key] : pinned) {
      const auto& v = t[choice];
      if (v.value("source", std::string()) == "explicit") continue;
      repro.push_back(override_text(key, v["value"].dump()));
    }
  }
  // One line, every word quoted (`$'…'` for a line break in a file name), so
  // it can be printed, put in Markdown and a CI log, and pasted back into bash.
  r.repro_command = shell_command(repro);
  r.env = collect_environment();
  r.inputs_manifest = input_manifest(s).hash();
  for (const auto& [name, value] : outcome_environment()) r.outcome_environment.push_back(name + "=" + value);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_run_files(r, out, repro, stopped != 0);
  return r;
}

// `dbh run`'s exit code when the scenario was not run here (Outcome::kSkipped:
// a device this machine lacks); `--bisect-exit` makes it git bisect's 125.
constexpr int kExitNotRunHere = kNotRunHereExit;

void print_summary(const RunReport& r, const Printer& p) {
  std::ostringstream s;
  // Every value on its own line: a name, path or message with a line break
  // would start a line of its own (under GitHub Actions, a "::" line is a
  // workflow command).
  const bool skipped = r.not_run_here();
  s << (r.expectation_met ? "PASS" : skipped ? "SKIP" : "FAIL") << "  " << one_line(r.scenario.name) << ": "
    << to_string(r.outcome);
  if (!r.failure.klass.empty()) s << " (" << one_line(r.failure.klass);
  if (r.failure.step) s << " at step " << *r.failure.step;
  if (!r.failure.module.empty()) s << " in " << one_line(r.failure.module);
  if (!r.failure.klass.empty()) s << ")";
  s << ", expectation " << (r.expectation_met ? "met" : skipped ? "not judged" : "NOT met");
  // Note [An injected failure says so].
  if (is_failure(r.outcome) && !r.trials.empty()) {
    if (const std::string injected = injected_faults(r.trials.front().analysis); !injected.empty()) {
      s << "\n      injected: " << one_line(injected);
    }
  }
  for (const auto& w : r.expectation_why) s << "\n      " << one_line(w);
  s << "\n      report: " << one_line(r.out_dir + "/report.md");
  if (!r.expectation_met && !skipped) s << "\n      repro:  " << one_line(r.repro_command);
  if (!p.json) std::cout << s.str() << std::endl;
}



}  // namespace

int run_command(const RunOptions& o) {
  install_stop_handlers();
  const Printer p{o.quiet || o.json, o.verbose, isatty(STDOUT_FILENO) != 0, o.json, !o.no_progress};
  try {
    if (o.scenarios.empty()) throw ScenarioError("dbh run: expected a scenario file, got none");
    if (o.scenarios.size() > 1) {
      throw ScenarioError("dbh run: expected one scenario file followed by key.path=value overrides, got \"" +
                          o.scenarios[1] + "\" (an override needs '=')");
    }
    const std::string name = safe_file_name(fs::path(o.scenarios.front()).stem().string());
    // Validate before creating anything, so bad input leaves nothing behind.
    const Scenario resolved = load_scenario(o.scenarios.front(), run_overrides(o));
    if (o.print_config) {
      // As Hydra's --cfg job: the scenario.resolved.json the run would write.
      std::cout << resolved_json(resolved) << std::endl;
      return 0;
    }
    // An external worker that cannot serve the scenario is refused here.
    for (const auto& note : check_worker(resolved)) std::cerr << "dbh run: note: " << note << "\n";
    const CiEnvironment ci = ci_environment(process_environment());
    const fs::path out = o.out.empty() ? fs::path(default_output_folder(name)) : fs::path(o.out);
    check_junit(o.junit, "dbh run", out.string(), {o.scenarios.front()});
    check_outside_datasets("dbh run", "--out", out.string(), dataset_folders(resolved));
    check_outside_datasets("dbh run", "--junit", o.junit, dataset_folders(resolved));
    if (const int sig = stop_requested(); sig != 0) {
      std::cerr << "dbh run: interrupted by " << signal_name(sig) << " before the run started; nothing written\n";
      return 128 + sig;
    }
    // The folder is ours until the run ends: locked against a second writer,
    // and removed (what this run created of it) unless the run completes.
    OutputDir claim(out, "run " + fs::absolute(o.scenarios.front()).lexically_normal().string(),
                    OutputDir::Reuse::kReplace, {resolved.model.weights, resolved.train.resume_from});
    RunReport r = run_scenario(o.scenarios.front(), o, out, p);
    claim.commit();
    // The run is complete and kept whatever becomes of --junit.
    std::string junit_error;
    if (!o.junit.empty()) {
      try {
        write_junit(o.junit, "dbh run", junit_xml({r}, "dbh.run", ci));
      } catch (const UsageError& e) {
        junit_error = message(e);
      }
    }
    if (o.json) std::cout << report_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    print_summary(r, p);
    // Annotations go to stderr when stdout carries JSON.
    std::vector<std::string> keep = input_paths(resolved);
    keep.push_back(o.scenarios.front());
    keep.push_back(r.out_dir);
    publish_to_github(ci, "dbh run " + r.scenario.name, {ci_result(r)}, o.json ? std::cerr : std::cout, std::cerr,
                      keep);
    if (!junit_error.empty()) {
      std::cerr << "dbh: " << junit_error << "; the run's reports are in " << one_line(r.out_dir) << "\n";
      return 2;
    }
    if (const int sig = stop_requested(); sig != 0) {
      // As `dbh suite`: what ran is written (outcome unresolved), exit 128 + signal.
      std::cerr << "dbh run: interrupted by " << signal_name(sig) << "; the unfinished run is in "
                << one_line(r.out_dir) << "\n";
      return 128 + sig;
    }
    if (r.not_run_here()) return kExitNotRunHere;
    return r.expectation_met ? 0 : 1;
  } catch (const UsageError& e) {
    std::cerr << "dbh: " << message(e) << "\n";
    return 2;
  }
}



namespace {

// What a suite runs, decided before anything runs.
struct SuitePlan {
  std::vector<std::string> files;                  // the scenario files this shard runs, in order
  std::vector<std::string> data_paths;             // each scenario's dataset folder, never written into
  std::vector<std::string> inputs;                 // every file and folder the scenarios read (input_paths)
  std::map<std::string, std::string> hash_of;      // file -> hash of its resolved scenario (overrides applied)
  std::map<std::string, InputManifest> inputs_of;  // file -> what else decides its outcome, as now
  std::map<std::string, std::string> ids_of;       // file -> its id in the suite
  std::optional<Shard> shard;
  std::string suite_hash;  // every scenario's id and configuration, before sharding
};

// The suite's scenarios from the folders and files given (a file named twice
// runs once; a file another one includes is a shared base, not a scenario),
// each valid with the overrides before anything runs, and the shard this
// invocation runs. Throws ScenarioError for bad input.
SuitePlan plan_suite(const RunOptions& o) {
  SuitePlan p;
  p.files = expand_scenarios(o.scenarios);
  if (p.files.empty()) {
    std::string where;
    for (const auto& in : o.scenarios) where += (where.empty() ? "" : ", ") + in;
    throw ScenarioError("dbh suite: expected at least one scenario (*.yaml) in " + where + ", got none");
  }
  // The same file named twice runs once.
  std::set<std::string> seen;
  std::vector<std::string> unique;
  for (const auto& f : p.files) {
    std::error_code ec;
    const std::string key = fs::weakly_canonical(f, ec).string();
    if (seen.insert(ec ? f : key).second) unique.push_back(f);
  }
  p.files = unique;
  // A file another scenario of the suite includes is an include file (a
  // shared base), not a scenario: a glob over a folder names both.
  {
    std::map<std::string, std::string> included_by;  // canonical path → a file that includes it
    for (const auto& f : p.files) {
      std::error_code ec;
      const fs::path self = fs::weakly_canonical(f, ec);
      std::vector<std::string> closure;
      try {
        closure = scenario_files(f);
      } catch (const ScenarioError&) {
        continue;  // load_scenario below says what is wrong with it
      }
      for (const auto& inc : closure) {
        const fs::path canon = fs::weakly_canonical(inc, ec);
        if (!ec && canon != self) included_by.emplace(canon.string(), f);
      }
    }
    std::vector<std::string> scenarios;
    for (const auto& f : p.files) {
      std::error_code ec;
      const auto it = included_by.find(fs::weakly_canonical(f, ec).string());
      if (it == included_by.end()) {
        scenarios.push_back(f);
      } else {
        std::cerr << "dbh suite: " << one_line(f) << " is not run as a scenario: " << one_line(it->second)
                  << " includes it\n";
      }
    }
    p.files = scenarios;
    if (p.files.empty()) throw ScenarioError("dbh suite: expected at least one scenario, got only include files");
  }
  for (const auto& f : p.files) {  // all valid before anything runs
    const Scenario s = load_scenario(f, o.overrides);
    for (const auto& d : dataset_folders(s)) p.data_paths.push_back(d);
    for (const auto& in : input_paths(s)) p.inputs.push_back(in);
    p.hash_of[f] = scenario_hash(s);
    p.inputs_of[f] = input_manifest(s);
  }
  if (o.shard_count > 0 && !o.shard.empty()) {
    throw ScenarioError("--shard-count: expected either --shard K/N or --shard-count (with JOB_COMPLETION_INDEX), "
                        "got both");
  }
  const auto env = process_environment();
  if (o.shard_count > 0 && env.count("JOB_COMPLETION_INDEX") == 0) {
    // Without the index the count names no shard: running the whole suite
    // where a part was meant would be silently wrong.
    throw ScenarioError("--shard-count: expected JOB_COMPLETION_INDEX set (a Kubernetes indexed Job), got it "
                        "unset; use --shard K/N elsewhere");
  }
  p.shard = o.shard.empty() ? detect_shard(env, o.shard_count) : parse_shard(o.shard);
  p.ids_of = scenario_ids(p.files);
  // The whole suite (every scenario's id and resolved configuration, before
  // sharding): merge checks that its shards all ran the same one.
  {
    std::vector<std::string> parts;
    for (const auto& f : p.files) parts.push_back(p.ids_of.at(f) + "=" + p.hash_of.at(f));
    std::sort(parts.begin(), parts.end());
    Fnv1a64 h;
    for (const auto& part : parts) h.update(part + "\n");
    p.suite_hash = h.hex();
  }
  if (p.shard) {
    std::vector<std::string> mine;
    for (const auto& f : p.files) {
      if (in_shard(p.ids_of.at(f), *p.shard)) mine.push_back(f);
    }
    p.files = mine;
  }
  return p;
}

}  // namespace

namespace {

// --print-config: each scenario this shard would run, by suite id, as it
// would run.
int print_suite_config(const RunOptions& o, const SuitePlan& plan) {
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  for (const auto& f : plan.files) {
    all[plan.ids_of.at(f)] = nlohmann::ordered_json::parse(resolved_json(load_scenario(f, run_overrides(o))));
  }
  std::cout << all.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return 0;
}

// What an earlier run of the suite in the same folder left (--resume).
struct SuiteResume {
  std::map<std::string, nlohmann::json> finished;  // id -> its `finished` record
  std::set<std::string> started;
};

// --resume: reads the journal, which must be this suite's (this shard of
// it): resuming another suite's folder would mix two suites' results into
// one answer. Throws UsageError.
SuiteResume resume_suite(const fs::path& root, const SuiteJournal& journal, const SuitePlan& plan,
                         const std::string& shard_text, const Printer& p) {
  const std::string resume_hint = " (--resume continues a journal dbh wrote; choose another --out)";
  std::set<std::string> mine;
  for (const auto& f : plan.files) mine.insert(plan.ids_of.at(f));
  std::vector<std::string> bad;
  std::vector<nlohmann::json> records;
  try {
    records = journal.read(&bad);
  } catch (const ScenarioError& e) {
    throw ScenarioError(e.what() + resume_hint);
  }
  if (!bad.empty()) {
    // A record in the middle that does not decode: resumed, the folder
    // would never merge (merge refuses it), and what it said is unknown.
    throw UsageError(bad.front() + resume_hint);
  }
  const ResumeState state = resume_state(records, mine, shard_text.substr(0, shard_text.find(' ')));
  if (!state.foreign.empty()) {
    throw UsageError((root / "journal.jsonl").string() + ": --resume: expected the journal of this suite" +
                     (plan.shard ? " shard" : "") + ", got " + state.foreign + " (choose another --out)");
  }
  if (journal.drop_torn_tail()) p.line("resume: cut the journal's torn last line (the suite was killed mid-write)");
  return SuiteResume{state.finished, state.started};
}

// The suite's reports, in order, with the ids of the scenarios a stop left
// unrun.
struct SuiteRun {
  std::vector<RunReport> reports;
  std::vector<std::string> ids, interrupted;
};

// Runs each scenario of the plan, or takes its report from an earlier run
// when it finished there with the same configuration and inputs; every
// start and finish is journaled. Throws UsageError (a scenario's half-written
// folder removed first).
SuiteRun run_suite_scenarios(const RunOptions& o, const SuitePlan& plan, const fs::path& root,
                             const SuiteJournal& journal, SuiteResume& earlier, const Printer& p) {
  SuiteRun run;
  for (const auto& f : plan.files) {
    const std::string& id = plan.ids_of.at(f);
    run.ids.push_back(id);
    auto it = earlier.finished.find(id);
    if (it != earlier.finished.end()) {
      if (const std::string why = rerun_reason(it->second, plan.hash_of.at(f), plan.inputs_of.at(f)); !why.empty()) {
        p.line("rerun " + id + ": " + why);
        it = earlier.finished.end();
      }
    }
    if (it != earlier.finished.end()) {
      const auto text = read_regular_file((fs::path(it->second.value("dir", "")) / "report.json").string(),
                                          size_t{64} << 20);
      const auto j = nlohmann::json::parse(text.value_or(""), nullptr, false);
      if (!j.is_discarded()) {
        RunReport r = report_from_json(j);
        r.out_dir = it->second.value("dir", "");
        p.line("skip  " + id + ": finished in an earlier run (" + to_string(r.outcome) + ")");
        run.reports.push_back(r);
        continue;
      }
    }
    if (earlier.started.count(id) && !earlier.finished.count(id)) p.line("rerun " + id + ": interrupted in an earlier run");
    earlier.finished.erase(id);  // whatever an earlier run says, this one runs it
    if (stop_requested() != 0) {
      run.interrupted.push_back(id);
      continue;
    }
    const fs::path dir = root / id;
    try {
      journal.append({{"type", "started"}, {"scenario", id}, {"file", f}, {"time", now_iso()}});
      RunReport r = run_scenario(f, o, dir, p);
      if (stop_requested() != 0) {
        // Stopped mid-scenario: its result is not a result.
        run.interrupted.push_back(id);
        continue;
      }
      journal.append({{"type", "finished"}, {"scenario", id}, {"outcome", to_string(r.outcome)},
                      {"expectation_met", r.expectation_met}, {"dir", fs::absolute(dir).string()},
                      {"hash", plan.hash_of.at(f)}, {"inputs", plan.inputs_of.at(f).hash()}, {"time", now_iso()}});
      print_summary(r, p);
      run.reports.push_back(std::move(r));
    } catch (const ReportError&) {
      // Cannot write (disk full): the journal keeps what finished; this
      // scenario's half-written folder goes, and --resume re-runs it.
      std::error_code ec;
      fs::remove_all(dir, ec);
      throw;
    }
  }
  return run;
}

// The suite's results for a CI system (GitHub's annotations and summary),
// interrupted scenarios included.
void publish_suite_results(const RunOptions& o, const SuitePlan& plan, const fs::path& root, const SuiteRun& run,
                           const std::string& shard_text) {
  std::vector<CiResult> results;
  for (const auto& r : run.reports) results.push_back(ci_result(r));
  for (const auto& id : run.interrupted) {
    CiResult c;
    c.scenario = id;
    c.outcome = "interrupted";
    c.message = "the suite was stopped before this scenario finished; continue it with --resume";
    results.push_back(c);
  }
  std::vector<std::string> keep = plan.files;
  keep.insert(keep.end(), plan.inputs.begin(), plan.inputs.end());
  keep.push_back(root.string());
  publish_to_github(ci_environment(process_environment()),
                    "dbh suite" + (shard_text.empty() ? std::string() : " shard " + shard_text), results,
                    o.json ? std::cerr : std::cout, std::cerr, keep);
}

// Runs the suite into `root` (claimed, journaled, resumed with --resume) and
// writes its outputs. Throws UsageError.
SuiteRun run_suite(const RunOptions& o, const SuitePlan& plan, const fs::path& root, const std::string& shard_text,
                   const Printer& p) {
  check_junit(o.junit, "dbh suite", root.string(), plan.files, {}, true);
  check_outside_datasets("dbh suite", "--out", root.string(), plan.data_paths);
  check_outside_datasets("dbh suite", "--junit", o.junit, plan.data_paths);
  if (!o.resume && fs::exists(root / "journal.jsonl")) {
    throw UsageError(root.string() + ": expected an empty folder for a new suite, got one holding an earlier "
                     "suite's journal (add --resume to continue it, or choose another --out)");
  }
  OutputDir claim(root, "suite", o.resume ? OutputDir::Reuse::kContinue : OutputDir::Reuse::kReplace);
  SuiteJournal journal(root / "journal.jsonl");
  SuiteResume earlier;
  if (o.resume) earlier = resume_suite(root, journal, plan, shard_text, p);
  if (plan.shard) p.line("dbh suite: shard " + shard_text + ": " + std::to_string(plan.files.size()) + " scenario(s)");
  // A `suite` record opens every invocation, so even a shard with nothing to
  // run leaves a journal saying that it ran, with what and when.
  journal.append({{"type", "suite"}, {"shard", shard_text}, {"scenarios", plan.files.size()},
                  {"suite_hash", plan.suite_hash}, {"resume", o.resume}, {"host", host_name()}, {"pid", ::getpid()},
                  {"time", now_iso()}});
  // From here the journal is the suite's record: kept whatever happens,
  // so --resume can continue from it.
  claim.commit();
  SuiteRun run = run_suite_scenarios(o, plan, root, journal, earlier, p);
  write_suite_outputs(root, run.reports, run.ids, run.interrupted, o.junit, shard_text, "dbh suite");
  return run;
}

}  // namespace

int suite_command(const RunOptions& o) {
  const Printer p{o.quiet || o.json, o.verbose, isatty(STDOUT_FILENO) != 0, o.json, !o.no_progress};
  // From the start: a stop requested while the scenarios are being validated
  // still ends in written outputs (every scenario interrupted) and 128 + signal.
  install_stop_handlers();
  SuitePlan plan;
  fs::path root;
  std::string shard_text;
  SuiteRun run;
  try {
    plan = plan_suite(o);
    if (o.print_config) return print_suite_config(o, plan);
    const auto& shard = plan.shard;
    shard_text =
        shard ? std::to_string(shard->index) + "/" + std::to_string(shard->count) + " (" + shard->source + ")" : "";
    root = o.out.empty() ? fs::path(default_output_folder("suite")) : fs::path(o.out);
    if (shard) root /= "shard-" + std::to_string(shard->index) + "-of-" + std::to_string(shard->count);
    run = run_suite(o, plan, root, shard_text, p);
  } catch (const UsageError& e) {  // bad input, a ReportError, --junit, --resume
    std::cerr << "dbh: " << message(e) << "\n";
    return 2;
  }
  if (o.json) {
    std::ifstream in(root / "suite.json");
    std::cout << in.rdbuf();
  }
  publish_suite_results(o, plan, root, run, shard_text);
  // With --json stdout is exactly the JSON document: the closing lines go to
  // stderr.
  std::ostream& human = o.json ? std::cerr : std::cout;
  if (stop_requested() != 0) {
    human << "interrupted by signal " << stop_requested() << ": " << run.interrupted.size()
          << " scenario(s) not run; resume with --resume --out "
          << shell_quote(o.out.empty() ? root.string() : o.out) << std::endl;
    return 128 + stop_requested();
  }
  // As pytest and ctest: a scenario this machine cannot run (its device) is
  // skipped, said, and fails nothing.
  const VerdictCounts c = count_verdicts(run.reports);
  human << c.met << " passed, " << c.not_met << " failed"
        << (c.skipped > 0 ? ", " + std::to_string(c.skipped) + " skipped (not run on this machine)" : "") << std::endl;
  return c.not_met == 0 ? 0 : 1;
}

}  // namespace dbh::harness

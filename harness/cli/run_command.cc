#include "harness/common/environment_vars.h"
#include "harness/cli/run_command.h"
#include "harness/cli/run_scenario.h"
#include "harness/cli/suite_outputs.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <set>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <tuple>
#include <utility>

#include "harness/probe/probe.h"
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
#include "harness/numerics/reference.h"
#include "harness/proto/event_types.h"
#include "harness/report/report.h"
#include "harness/report/report_html.h"
#include "harness/report/run_files.h"
#include "harness/run/run_verdict.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/judge.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/resolutions.h"
#include "harness/supervisor/scenario_trial.h"
#include "harness/supervisor/shard.h"  // process_environment
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"
#include "harness/worker/worker.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

void Printer::line(const std::string& s) const {
  if (!quiet) std::cout << s << std::endl;
}

namespace {

// A progress line quotes at most this much of what the worker wrote.
constexpr size_t kProgressQuoteBytes = 500;
// At most this many error and health lines per trial (without --verbose):
// a worker's flood of errors never floods the terminal or a CI log.
constexpr int64_t kMaxProgressNotices = 20;

// Off a terminal, a step line every 10 steps up to step 999, then every 100
// up to 9,999, every 1,000 up to 99,999, and so on: about 90 lines a decade,
// however many steps a trial (or a worker) reports.
int64_t progress_interval(int64_t steps_done) {
  int64_t interval = 10;
  for (int64_t bound = 1000; steps_done >= bound && bound <= INT64_MAX / 10; bound *= 10) interval *= 10;
  return interval;
}

run::TrialRecord run_one_trial(const scenario::Scenario& s, const std::string& label,
                          const std::vector<std::string>& overrides, const fs::path& dir,
                          int64_t index, const RunOptions& o, const Printer& p) {
  const int64_t total = s.train.last_step();
  int64_t notices = 0;  // error and health lines printed
  auto on_event = [&](const proto::Event& e) {
    if (p.quiet) return;
    if ((e.type == proto::event::kError || e.type == proto::event::kHealth) && !p.verbose && ++notices > kMaxProgressNotices) {
      if (notices == kMaxProgressNotices + 1) {
        std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] … more errors and findings are not "
                  << "printed (the report lists them; --verbose prints every one)" << std::endl;
      }
      return;
    }
    if (e.type == proto::event::kStepEnd) {
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
      } else if (p.verbose || step + 1 == total || (step + 1) % progress_interval(step + 1) == 0) {
        std::cout << l.str() << std::endl;
      }
    } else if (e.type == proto::event::kFaultFired && p.verbose) {
      const auto fired = proto::fault_fired_from(e);
      std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] fault "
                << one_line(truncate_utf8(fired.fault, kProgressQuoteBytes))
                << " fired at step " << fired.step << std::endl;
    } else if (e.type == proto::event::kError) {
      // What this machine lacks (a CUDA device) is a skip, not an error.
      const auto err = proto::error_from(e);
      const bool unavailable = err.kind == proto::error_kind::kUnavailable;
      std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] "
                << (unavailable ? std::string("not available here") : e.type) << ": "
                << one_line(truncate_utf8(err.message, kProgressQuoteBytes)) << std::endl;
    } else if (e.type == proto::event::kHealth) {
      const auto h = proto::health_from(e);
      if (h.check != "finite") return;
      std::cout << (p.tty && p.progress ? "\n" : "") << "  [" << label << "] " << e.type << ": "
                << one_line(truncate_utf8("non-finite " + h.kind + " " + h.site, kProgressQuoteBytes)) << std::endl;
    }
  };
  run::TrialRecord t;
  t.label = label;
  t.overrides = overrides;
  t.dir = dir.string();
  t.analysis = supervisor::run_scenario_trial(s, dir.string(), index, o.withhold_fault_records, &t.stderr_tail, on_event);
  if (p.tty && p.progress && !p.quiet) std::cout << std::endl;
  // A trial the disk could not hold says nothing about the training: never
  // an outcome (a scenario expecting a failure would pass on it).
  std::vector<std::string> texts = {t.stderr_tail, t.analysis.failure.message};
  texts.insert(texts.end(), t.analysis.failure.secondary.begin(), t.analysis.failure.secondary.end());
  if (const std::string why = probe::disk_full_evidence(texts); !why.empty()) throw ReportError(dir.string() + ": " + why);
  return t;
}


// The words of the command that reproduces a run of `s` from `scenario_path`.
std::vector<std::string> repro_args(const scenario::Scenario& s, const std::string& scenario_path) {
  std::vector<std::string> args = {self_command(), "run", path_for_command(scenario_path)};
  args.insert(args.end(), s.overrides.begin(), s.overrides.end());
  return args;
}

}  // namespace

std::string message(const std::exception& e) { return one_line(e.what()); }

std::vector<std::string> run_overrides(const RunOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  // A flag and an override of its key, both given: one would silently win.
  for (const auto& [flag, given, key] : {std::tuple<const char*, bool, const char*>{"--device", !o.device.empty(),
                                                                                    DBH_SCENARIO_KEY(hardware.device)},
                                         {"--seed", !o.seed.empty(), DBH_SCENARIO_KEY(train.seed)}}) {
    if (!given) continue;
    for (const auto& x : o.overrides) {
      if (scenario::override_sets(x, key)) {
        throw ScenarioError(std::string(flag) + ": expected either " + flag + " or the override " + key +
                            "=…, got both (" + flag + " " + (flag == std::string("--seed") ? o.seed : o.device) +
                            " and " + one_line(x) + ")");
      }
    }
  }
  if (!o.device.empty()) overrides.push_back(scenario::override_text(DBH_SCENARIO_KEY(hardware.device), o.device));
  if (!o.seed.empty()) overrides.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.seed), o.seed));
  return overrides;
}

namespace {

// The line a run starts with: what it trains, its faults and overrides.
std::string scenario_line(const scenario::Scenario& s) {
  std::ostringstream d;
  if (s.worker.external()) {
    d << report::settings_text(s);
  } else {
    d << "resnet" << s.model.encoder << "+" << model::to_string(s.model.decoder) << ", " << to_string(s.data.source)
      << ", batch " << s.data.batch_size << ", " << s.data.size << "px, " << s.train.max_steps << " steps on "
      << s.hardware.device;
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
}

// Settings this run cannot test, said before it starts, so that a pass is
// not read as their success.
void note_untested_settings(const scenario::Scenario& s, const Printer& p) {
  // A CUDA setting on a CPU run changes nothing: say so, so a pass is not
  // read as "cudnn_benchmark=true works".
  if (const auto set = scenario::cuda_only_settings_on_cpu(s); !set.empty()) {
    p.line("  note: " + scenario::join(set, " ") + (set.size() == 1 ? " configures" : " configure") + " CUDA; this run on " +
           s.hardware.device + " does not test " + (set.size() == 1 ? "it" : "them"));
  }
  // So is a dataset setting on synthetic data (a control that swaps the data
  // keeps the path): a pass is not "the dataset trains".
  if (const auto set = scenario::real_data_settings_unread(s); !set.empty()) {
    p.line("  note: " + scenario::join(set, " ") + (set.size() == 1 ? " is" : " are") +
           " read only with data.source=real; this run trains on " + to_string(s.data.source) +
           " and does not read " + (set.size() == 1 ? "it" : "them"));
  }
}

// Resolutions of the main trial's failure, tried as controls (each a trial
// of the scenario with the resolution's overrides).
void try_resolutions_of_failure(run::RunReport& r, const std::string& path, const std::vector<std::string>& overrides,
                                const fs::path& out, const RunOptions& o, const Printer& p) {
  const scenario::Scenario& s = r.scenario;
  if (!o.verify_resolutions || supervisor::stop_requested() != 0 ||
      !supervisor::is_failure(r.trials.front().analysis.outcome)) {
    return;
  }
  const kb::FailureClass* cls = kb::KnowledgeBase::shipped().find(r.trials.front().analysis.failure.klass);
  if (cls == nullptr) return;
  const supervisor::RunResolution run = [&](const supervisor::ResolutionCheck& check, const std::vector<std::string>& with, size_t k) {
    auto trial_overrides = overrides;
    trial_overrides.insert(trial_overrides.end(), with.begin(), with.end());
    const scenario::Scenario rs = scenario::load_scenario(path, trial_overrides, worker::input_checks());
    // Note [Keys that never reach the worker]: not applicable, never
    // refuted by a run that did not change.
    if (const std::string why = supervisor::overrides_not_passed(rs, check.overrides); !why.empty()) throw ScenarioError(why);
    const std::string number = std::to_string(check.resolution + 1);
    // A resolution tried two ways has a folder per way.
    bool again = false;
    for (size_t e = 0; e < k; ++e) again = again || cls->checks[e].resolution == check.resolution;
    supervisor::ResolutionRun result;
    result.dir = "resolution-" + number + (again ? "-" + std::to_string(k + 1) : "");
    const auto t = run_one_trial(rs, "resolution " + number, check.overrides, out / result.dir,
                                 200 + static_cast<int64_t>(k), o, p);
    result.outcome = t.analysis.outcome;
    result.klass = t.analysis.failure.klass;
    return result;
  };
  r.resolution_checks = supervisor::try_resolutions(*cls, nlohmann::json::parse(scenario::resolved_json(s)), run,
                                        [] { return supervisor::stop_requested() != 0; });
}

// The command that reproduces the run: the scenario, its overrides and the
// measured choices pinned (Note [Measured choices]). A run not tried here
// also says how to run it on this machine's CPU.
std::vector<std::string> repro_words(run::RunReport& r, const std::string& path) {
  const scenario::Scenario& s = r.scenario;
  const auto& main = r.trials.front().analysis;
  std::vector<std::string> repro = repro_args(s, path);
  if (r.not_run_here() && s.hardware.device != "cpu") {
    // How to run it here instead, as a command that runs as pasted.
    std::vector<std::string> on_cpu = repro;
    on_cpu.push_back(scenario::override_text(DBH_SCENARIO_KEY(hardware.device), "cpu"));
    if (s.train.precision != model::Precision::kFp32)
      on_cpu.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.precision), "fp32"));
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
      repro.push_back(scenario::override_text(key, v["value"].dump()));
    }
  }
  return repro;
}

}  // namespace

run::RunReport run_scenario(const std::string& path, const RunOptions& o, const fs::path& out, const Printer& p) {
  const std::vector<std::string> overrides = run_overrides(o);
  const auto t0 = std::chrono::steady_clock::now();
  run::RunReport r;
  r.scenario = scenario::load_scenario(path, overrides, worker::input_checks());
  r.started_at = now_iso();
  r.out_dir = fs::absolute(out).string();
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) {
      throw ReportError(out.string() + ": expected a writable output folder, got: " + ec.message());
    }
  }
  write_file_atomically((out / "scenario.resolved.json").string(), scenario::resolved_json(r.scenario) + "\n");
  const scenario::Scenario& s = r.scenario;
  p.line("dbh run " + one_line(s.name) + ": " + scenario_line(s));
  note_untested_settings(s, p);
  // Main trial (and repeated processes). After a stop request (SIGINT,
  // SIGTERM) no further trial starts; the main trial always exists.
  const int64_t processes = s.repeat.processes;
  for (int64_t i = 0; i < processes; ++i) {
    if (i > 0 && supervisor::stop_requested() != 0) break;
    const std::string label = processes == 1 ? "main" : "process " + std::to_string(i + 1);
    const fs::path dir = out / (processes == 1 ? std::string("main") : "process-" + std::to_string(i + 1));
    r.trials.push_back(run_one_trial(s, label, {}, dir, i, o, p));
  }
  // Controls: the same scenario with a few keys changed.
  for (size_t c = 0; c < s.controls.size(); ++c) {
    if (supervisor::stop_requested() != 0) break;
    auto control_overrides = overrides;
    control_overrides.insert(control_overrides.end(), s.controls[c].begin(), s.controls[c].end());
    scenario::Scenario cs = scenario::load_scenario(path, control_overrides, worker::input_checks());
    r.trials.push_back(run_one_trial(cs, "control " + std::to_string(c + 1), s.controls[c],
                                     out / ("control-" + std::to_string(c + 1)), 100 + static_cast<int64_t>(c), o, p));
  }
  try_resolutions_of_failure(r, path, overrides, out, o, p);
  // What the trials mean (Note [The run's verdicts]).
  const int stopped = supervisor::stop_requested();
  run::decide_run(r, processes, stopped);
  const std::vector<std::string> repro = repro_words(r, path);
  // One line, every word quoted (`$'…'` for a line break in a file name), so
  // it can be printed, put in Markdown and a CI log, and pasted back into bash.
  r.repro_command = shell_command(repro);
  r.env = env::collect_environment();
  r.inputs_manifest = probe::input_manifest(s).hash();
  for (const auto& [name, value] : outcome_environment()) r.outcome_environment.push_back(name + "=" + value);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report::write_run_files(r, out, repro, stopped != 0);
  return r;
}

// `dbh run`'s exit code when the scenario was not run here (Outcome::kSkipped:
// a device this machine lacks); `--bisect-exit` makes it git bisect's 125.
constexpr int kExitNotRunHere = kNotRunHereExit;

void print_summary(const run::RunReport& r, const Printer& p) {
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
  if (supervisor::is_failure(r.outcome) && !r.trials.empty()) {
    if (const std::string injected = supervisor::injected_faults(r.trials.front().analysis); !injected.empty()) {
      s << "\n      injected: " << one_line(injected);
    }
  }
  for (const auto& w : r.expectation_why) s << "\n      " << one_line(w);
  s << "\n      report: " << one_line(r.out_dir + "/report.md");
  if (!r.expectation_met && !skipped) s << "\n      repro:  " << one_line(r.repro_command);
  if (!p.json) std::cout << s.str() << std::endl;
}


namespace {

// The first bytes of a reference dbh wrote (record_reference): a file with
// them and a closing brace may be replaced by the next --record.
constexpr const char* kReferenceHead = "{\n \"format\": \"dbh-numerics-reference/1\",";

bool is_numerics_reference(const std::string& path) {
  return file_has_head_and_tail(path, kReferenceHead, "}\n");
}

// `--record`: checked before the run as --junit is (a new file, or one dbh
// wrote, outside the output folder).
void check_record(const RunOptions& o, const fs::path& out) {
  if (o.record.empty()) return;
  if (path_within(o.record, out.string())) {
    throw UsageError("dbh repeat: --record: expected a file outside the output folder " + out.string() + ", got " +
                     o.record);
  }
  check_output_file(o.record, OutputFileRule{"dbh repeat", "--record", is_numerics_reference,
                                             "a numerics reference dbh wrote", ""});
}

// Note [A numerics reference]: the processes of a run that trained, as a
// reference file; "" when written, else why not (nothing is written).
std::string record_reference(const run::RunReport& r, const std::string& path) {
  if (r.outcome != scenario::Outcome::kPassed && r.outcome != scenario::Outcome::kNondeterministic) {
    return "expected a run whose processes trained to the end, got " + to_string(r.outcome) +
           (r.failure.message.empty() ? "" : " (" + one_line(r.failure.message) + ")") + ": nothing recorded";
  }
  const size_t processes = std::min<size_t>(r.trials.size(), static_cast<size_t>(r.scenario.repeat.processes));
  std::vector<const supervisor::TrialAnalysis*> trials;
  for (size_t i = 0; i < processes; ++i) trials.push_back(&r.trials[i].analysis);
  numerics::Reference ref;
  ref.scenario = r.scenario.name;
  ref.scenario_hash = scenario::scenario_hash(r.scenario);
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  ref.recorded_at = when;
  ref.side = numerics::side_of(trials, numerics::machine_of(r.trials.front().analysis));
  write_file_atomically(path, numerics::to_json(ref).dump(1) + "\n");
  return "";
}

}  // namespace

int run_command(const RunOptions& o) {
  supervisor::install_stop_handlers();
  const Printer p{o.quiet || o.json, o.verbose, isatty(STDOUT_FILENO) != 0, o.json, !o.no_progress};
  try {
    if (o.scenarios.empty()) throw ScenarioError("dbh run: expected a scenario file, got none");
    if (o.scenarios.size() > 1) {
      throw ScenarioError("dbh run: expected one scenario file followed by key.path=value overrides, got \"" +
                          o.scenarios[1] + "\" (an override needs '=')");
    }
    const std::string name = safe_file_name(fs::path(o.scenarios.front()).stem().string());
    // Validate before creating anything, so bad input leaves nothing behind.
    const scenario::Scenario resolved = scenario::load_scenario(o.scenarios.front(), run_overrides(o), worker::input_checks());
    if (o.print_config) {
      // As Hydra's --cfg job: the scenario.resolved.json the run would write.
      std::cout << scenario::resolved_json(resolved) << std::endl;
      return 0;
    }
    // An external worker that cannot serve the scenario is refused here.
    for (const auto& note : supervisor::check_worker(resolved)) std::cerr << "dbh run: note: " << one_line(note) << "\n";
    const report::CiEnvironment ci = report::ci_environment(supervisor::process_environment());
    const fs::path out = o.out.empty() ? fs::path(default_output_folder(name)) : fs::path(o.out);
    check_junit(o.junit, "dbh run", out.string(), {o.scenarios.front()});
    check_record(o, out);
    check_outside_datasets("dbh run", "--out", out.string(), scenario::dataset_folders(resolved));
    check_outside_datasets("dbh run", "--junit", o.junit, scenario::dataset_folders(resolved));
    if (const int sig = supervisor::stop_requested(); sig != 0) {
      std::cerr << "dbh run: interrupted by " << supervisor::signal_name(sig) << " before the run started; nothing written\n";
      return 128 + sig;
    }
    // The folder is ours until the run ends: locked against a second writer,
    // and removed (what this run created of it) unless the run completes.
    OutputDir claim(out, "run " + fs::absolute(o.scenarios.front()).lexically_normal().string(),
                    OutputDir::Reuse::kReplace, {resolved.model.weights, resolved.train.resume_from});
    run::RunReport r = run_scenario(o.scenarios.front(), o, out, p);
    claim.commit();
    // The run is complete and kept whatever becomes of --junit.
    std::string junit_error;
    if (!o.junit.empty()) {
      try {
        write_junit(o.junit, "dbh run", report::junit_xml({r}, "dbh.run", ci));
      } catch (const UsageError& e) {
        junit_error = message(e);
      }
    }
    const std::string not_recorded = o.record.empty() ? "" : record_reference(r, o.record);
    if (o.json) std::cout << report::report_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    print_summary(r, p);
    if (!o.record.empty()) {
      if (not_recorded.empty()) {
        std::cerr << "dbh repeat: numerics reference of " << r.scenario.repeat.processes << " process(es): "
                  << one_line(o.record) << "\n";
      } else {
        std::cerr << "dbh repeat: --record: " << not_recorded << "\n";
      }
    }
    // Annotations go to stderr when stdout carries JSON.
    std::vector<std::string> keep = scenario::input_paths(resolved);
    keep.push_back(o.scenarios.front());
    keep.push_back(r.out_dir);
    report::publish_to_github(ci, "dbh run " + r.scenario.name, {report::ci_result(r)}, o.json ? std::cerr : std::cout, std::cerr,
                      keep);
    if (!junit_error.empty()) {
      std::cerr << "dbh: " << junit_error << "; the run's reports are in " << one_line(r.out_dir) << "\n";
      return 2;
    }
    if (const int sig = supervisor::stop_requested(); sig != 0) {
      // As `dbh suite`: what ran is written (outcome unresolved), exit 128 + signal.
      std::cerr << "dbh run: interrupted by " << supervisor::signal_name(sig) << "; the unfinished run is in "
                << one_line(r.out_dir) << "\n";
      return 128 + sig;
    }
    if (r.not_run_here()) return kExitNotRunHere;
    if (!not_recorded.empty()) return 1;
    return r.expectation_met ? 0 : 1;
  } catch (const UsageError& e) {
    std::cerr << "dbh: " << message(e) << "\n";
    return 2;
  }
}

}  // namespace dbh::harness::cli

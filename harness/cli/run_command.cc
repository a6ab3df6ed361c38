#include "harness/common/environment_vars.h"
#include "harness/cli/run_command.h"
#include "harness/cli/run_scenario.h"
#include "harness/cli/suite_outputs.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
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
#include "harness/numerics/reference.h"
#include "harness/numerics/states.h"
#include "harness/proto/event_types.h"
#include "harness/report/report.h"
#include "harness/report/report_html.h"
#include "harness/report/run_files.h"
#include "harness/run/trials.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/outcome.h"
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

// Note [The trial sequence]'s progress on the command line: a step line
// (rewritten in place on a terminal, thinned out off one), each error and
// non-finite finding up to kMaxProgressNotices, fault firings with -v.
class TrialProgress : public run::TrialObserver {
 public:
  explicit TrialProgress(const Printer& p) : p_(p) {}

  void trial_started(const std::string& label, const scenario::Scenario& s) override {
    label_ = label;
    total_ = s.train.last_step();
    notices_ = 0;
  }

  void trial_event(const proto::Event& e) override {
    if (p_.quiet) return;
    if ((e.type == proto::event::kError || e.type == proto::event::kHealth) && !p_.verbose &&
        ++notices_ > kMaxProgressNotices) {
      if (notices_ == kMaxProgressNotices + 1) {
        std::cout << break_line() << "  [" << label_ << "] … more errors and findings are not "
                  << "printed (the report lists them; --verbose prints every one)" << std::endl;
      }
      return;
    }
    if (e.type == proto::event::kStepEnd) {
      step_line(e);
    } else if (e.type == proto::event::kFaultFired && p_.verbose) {
      const auto fired = proto::fault_fired_from(e);
      std::cout << break_line() << "  [" << label_ << "] fault "
                << one_line(truncate_utf8(fired.fault, kProgressQuoteBytes)) << " fired at step " << fired.step
                << std::endl;
    } else if (e.type == proto::event::kError) {
      // What this machine lacks (a CUDA device) is a skip, not an error.
      const auto err = proto::error_from(e);
      const bool unavailable = err.kind == proto::error_kind::kUnavailable;
      std::cout << break_line() << "  [" << label_ << "] "
                << (unavailable ? std::string("not available here") : e.type) << ": "
                << one_line(truncate_utf8(err.message, kProgressQuoteBytes)) << std::endl;
    } else if (e.type == proto::event::kHealth) {
      const auto h = proto::health_from(e);
      if (h.check != "finite") return;
      std::cout << break_line() << "  [" << label_ << "] " << e.type << ": "
                << one_line(truncate_utf8("non-finite " + h.kind + " " + h.site, kProgressQuoteBytes)) << std::endl;
    }
  }

  void trial_finished(const run::TrialRecord&) override {
    if (p_.tty && p_.progress && !p_.quiet) std::cout << std::endl;
  }

 private:
  // A line printed while a step line is being rewritten starts on its own.
  const char* break_line() const { return p_.tty && p_.progress ? "\n" : ""; }

  void step_line(const proto::Event& e) const {
    if (!p_.progress) return;
    const auto end = proto::step_end_from(e);
    const int64_t step = end.step;
    std::ostringstream l;
    const double elapsed = e.t;
    const double eta =
        step + 1 < total_ ? elapsed / static_cast<double>(step + 1) * static_cast<double>(total_ - step - 1) : 0.0;
    l << "  [" << label_ << "] run " << end.run << " step " << std::setw(3) << step + 1 << "/" << total_ << "  loss "
      // A loss that explodes reads as its magnitude, never as 15 digits.
      << (std::abs(end.loss) < 1e6 ? fixed(end.loss, 4) : significant(end.loss)) << "  " << std::fixed
      << std::setprecision(2) << end.seconds
      << " s/step  ETA " << std::setprecision(0) << eta << " s";
    if (p_.tty) {
      std::cout << "\r" << l.str() << "   " << std::flush;
    } else if (p_.verbose || step + 1 == total_ || (step + 1) % progress_interval(step + 1) == 0) {
      std::cout << l.str() << std::endl;
    }
  }

  const Printer& p_;
  std::string label_;
  int64_t total_ = 0;
  int64_t notices_ = 0;  // error and health lines printed in this trial
};

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

}  // namespace

run::RunReport run_scenario(const std::string& path, const RunOptions& o, const fs::path& out, const Printer& p) {
  const std::vector<std::string> overrides = run_overrides(o);
  const auto t0 = std::chrono::steady_clock::now();
  scenario::Scenario s = scenario::load_scenario(path, overrides, worker::input_checks());
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) {
      throw ReportError(out.string() + ": expected a writable output folder, got: " + ec.message());
    }
  }
  write_file_atomically((out / "scenario.resolved.json").string(), scenario::resolved_json(s) + "\n");
  p.line("dbh run " + one_line(s.name) + ": " + scenario_line(s));
  note_untested_settings(s, p);
  run::TrialSettings settings;
  settings.input_checks = worker::input_checks();
  settings.verify_resolutions = o.verify_resolutions;
  settings.withhold_fault_records = o.withhold_fault_records;
  settings.infrastructure_failure = probe::disk_full_evidence;
  TrialProgress progress(p);
  run::RunReport r = run::run_trials(std::move(s), path, overrides, out.string(), settings, progress);
  r.env = env::collect_environment();
  r.inputs_manifest = probe::input_manifest(r.scenario).hash();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report::write_run_files(r, out);
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
  numerics::check_states_folder(o.record);
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
  ref.side.runs = numerics::runs_of(trials, r.scenario);
  ref.side.machine = numerics::machine_of(r.trials.front().analysis);
  // Note [The same state, step by step]: the first process's states, beside.
  std::vector<int64_t> steps;
  for (const auto& s : ref.side.runs.front().steps) steps.push_back(s.step);
  ref.state_steps = numerics::keep_states(r.trials.front().dir, path, steps);
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

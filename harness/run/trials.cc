#include "harness/run/trials.h"

#include <filesystem>
#include <utility>

#include "harness/common/environment_vars.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "harness/run/run_verdict.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/resolutions.h"
#include "harness/supervisor/scenario_trial.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::run {
namespace fs = std::filesystem;

namespace {

// The trials of one run, carried out in order (Note [The trial sequence]).
class TrialSequence {
 public:
  TrialSequence(const std::string& path, const std::vector<std::string>& overrides, const fs::path& out,
                const TrialSettings& settings, TrialObserver& observer)
      : path_(path), overrides_(overrides), out_(out), settings_(settings), observer_(observer) {}

  // The main trial and the repeated processes.
  void processes(RunReport& r) const {
    const int64_t processes = r.scenario.repeat.processes;
    for (int64_t i = 0; i < processes; ++i) {
      if (i > 0 && supervisor::stop_requested() != 0) break;
      const std::string label = processes == 1 ? "main" : "process " + std::to_string(i + 1);
      const std::string dir = processes == 1 ? std::string("main") : "process-" + std::to_string(i + 1);
      r.trials.push_back(trial(r.scenario, label, {}, out_ / dir, i));
    }
  }

  // The controls: the same scenario with a few keys changed.
  void controls(RunReport& r) const {
    const auto& controls = r.scenario.controls;
    for (size_t c = 0; c < controls.size(); ++c) {
      if (supervisor::stop_requested() != 0) break;
      const scenario::Scenario cs = load_with(controls[c]);
      r.trials.push_back(trial(cs, "control " + std::to_string(c + 1), controls[c],
                               out_ / ("control-" + std::to_string(c + 1)), 100 + static_cast<int64_t>(c)));
    }
  }

  // The resolutions of the main trial's failure, each a trial of the
  // scenario with the resolution's overrides.
  void resolutions(RunReport& r) const {
    if (!settings_.verify_resolutions || supervisor::stop_requested() != 0 ||
        !supervisor::is_failure(r.trials.front().analysis.outcome)) {
      return;
    }
    const kb::FailureClass* cls = kb::KnowledgeBase::shipped().find(r.trials.front().analysis.failure.klass);
    if (cls == nullptr) return;
    const supervisor::RunResolution run = [&](const supervisor::ResolutionCheck& check,
                                              const std::vector<std::string>& with, size_t k) {
      const scenario::Scenario rs = load_with(with);
      // Note [Keys that never reach the worker]: not applicable, never
      // refuted by a run that did not change.
      if (const std::string why = supervisor::overrides_not_passed(rs, check.overrides); !why.empty()) {
        throw ScenarioError(why);
      }
      const std::string number = std::to_string(check.resolution + 1);
      // A resolution tried two ways has a folder per way.
      bool again = false;
      for (size_t e = 0; e < k; ++e) again = again || cls->checks[e].resolution == check.resolution;
      supervisor::ResolutionRun result;
      result.dir = "resolution-" + number + (again ? "-" + std::to_string(k + 1) : "");
      const TrialRecord t =
          trial(rs, "resolution " + number, check.overrides, out_ / result.dir, 200 + static_cast<int64_t>(k));
      result.outcome = t.analysis.outcome;
      result.klass = t.analysis.failure.klass;
      return result;
    };
    r.resolution_checks = supervisor::try_resolutions(*cls, nlohmann::json::parse(scenario::resolved_json(r.scenario)),
                                                      run, [] { return supervisor::stop_requested() != 0; });
    supervisor::spell_as_passed(r.resolution_checks, r.scenario);
  }

 private:
  // The scenario with the run's overrides and then `more`.
  scenario::Scenario load_with(const std::vector<std::string>& more) const {
    std::vector<std::string> all = overrides_;
    all.insert(all.end(), more.begin(), more.end());
    return scenario::load_scenario(path_, all, settings_.input_checks);
  }

  TrialRecord trial(const scenario::Scenario& s, const std::string& label, const std::vector<std::string>& overrides,
                    const fs::path& dir, int64_t index) const {
    observer_.trial_started(label, s);
    TrialRecord t;
    t.label = label;
    t.overrides = overrides;
    t.dir = dir.string();
    t.analysis = supervisor::run_scenario_trial(s, dir.string(), index, settings_.withhold_fault_records,
                                                &t.stderr_tail, [&](const proto::Event& e) { observer_.trial_event(e); });
    observer_.trial_finished(t);
    // A trial the disk could not hold says nothing about the training: never
    // an outcome (a scenario expecting a failure would pass on it).
    if (settings_.infrastructure_failure) {
      std::vector<std::string> texts = {t.stderr_tail, t.analysis.failure.message};
      texts.insert(texts.end(), t.analysis.failure.secondary.begin(), t.analysis.failure.secondary.end());
      if (const std::string why = settings_.infrastructure_failure(texts); !why.empty()) {
        throw ReportError(dir.string() + ": " + why);
      }
    }
    return t;
  }

  const std::string& path_;
  const std::vector<std::string>& overrides_;
  const fs::path out_;
  const TrialSettings& settings_;
  TrialObserver& observer_;
};

// The command that reproduces the run: the scenario, its overrides and the
// measured choices pinned (Note [Measured choices]). A run not tried here
// also says how to run it on this machine's CPU.
std::vector<std::string> repro_words(RunReport& r, const std::string& path) {
  const scenario::Scenario& s = r.scenario;
  const auto& main = r.trials.front().analysis;
  std::vector<std::string> repro = {self_command(), "run", path_for_command(path)};
  repro.insert(repro.end(), s.overrides.begin(), s.overrides.end());
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
      if (field_or(v, "source", std::string()) == "explicit") continue;
      repro.push_back(scenario::override_text(key, v["value"].dump()));
    }
  }
  return repro;
}

}  // namespace

RunReport run_trials(scenario::Scenario s, const std::string& path, const std::vector<std::string>& overrides,
                     const std::string& out_dir, const TrialSettings& settings, TrialObserver& observer) {
  RunReport r;
  r.scenario = std::move(s);
  r.started_at = now_iso();
  r.out_dir = fs::absolute(out_dir).string();
  const TrialSequence sequence(path, overrides, out_dir, settings, observer);
  sequence.processes(r);
  sequence.controls(r);
  sequence.resolutions(r);
  // What the trials mean (Note [The run's verdicts]).
  r.stopped = supervisor::stop_requested();
  decide_run(r, r.scenario.repeat.processes, r.stopped);
  r.repro_words = repro_words(r, path);
  // One line, every word quoted (`$'…'` for a line break in a file name), so
  // it can be printed, put in Markdown and a CI log, and pasted back into bash.
  r.repro_command = shell_command(r.repro_words);
  for (const auto& [name, value] : outcome_environment()) r.outcome_environment.push_back(name + "=" + value);
  return r;
}

}  // namespace dbh::harness::run

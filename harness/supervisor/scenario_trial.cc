#include "harness/supervisor/scenario_trial.h"

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/kb/knowledge_base.h"
#include "harness/supervisor/event_digest.h"
#include "harness/supervisor/numerics_variant.h"
#include "harness/supervisor/tuning.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::supervisor {
namespace fs = std::filesystem;

ScenarioTrial run_classified_trial(const scenario::Scenario& scenario, const std::string& dir_text, int64_t index,
                                   bool withhold_fault_records, const std::function<void(const proto::Event&)>& on_event) {
  // Loaded before the worker runs: a missing knowledge base fails the trial
  // at once, not after a training run.
  const kb::KnowledgeBase& kb = kb::KnowledgeBase::shipped();
  const fs::path dir(dir_text);
  make_directories_no_follow(dir_text);  // never a link out of the output folder
  // `auto` settings become measured values before the worker starts (Note
  // [Measured choices]); the worker sees only the values.
  scenario::Scenario s = scenario;
  // Note [Real differences measure the noise]: before `auto` is measured, so
  // a variant's thread count is the one the trial runs with.
  std::optional<VariantSetting> variant;
  if (s.monitors.numerics && s.monitors.numerics_variant != scenario::NumericsVariant::kAsIs) {
    const char* isa = std::getenv("ATEN_CPU_CAPABILITY");
    variant = variant_setting(s.monitors.numerics_variant, index,
                              !s.worker.external() && s.hardware.device.rfind("cuda", 0) == 0, cpu_capabilities(),
                              isa == nullptr ? "" : isa);
    apply_variant(*variant, s);
  }
  nlohmann::json tuning = resolve_measured_choices(s, (dir / "tuning").string());
  const fs::path resolved = dir / "scenario.resolved.json";
  write_file_atomically(resolved.string(), scenario::resolved_json(s) + "\n");
  TrialSpec spec;
  if (s.worker.external()) {
    spec = external_trial_spec(s, resolved.string(), dir.string(), index);
    // A variant's threads and instruction set are read as the process
    // starts (Note [Real differences measure the noise]).
    if (variant) spec.may_fork = false;
  } else {
    // The running binary itself, even when its file was replaced or removed
    // meanwhile (a rebuild or an upgrade during a suite): /proc/self/exe.
    spec.argv = {"/proc/self/exe", "__worker", "--scenario", resolved.string(), "--run-dir", dir.string(),
                 "--trial", std::to_string(index)};
    spec.run_dir = dir.string();
    spec.deadline_s = s.limits.deadline_s;
    spec.silence_s = s.limits.silence_s;
    spec.grace_s = s.limits.grace_s;
    if (variant) spec.env.insert(spec.env.end(), variant->env.begin(), variant->env.end());
  }
  // Note [A trial's events are read as they arrive].
  EventDigester events;
  spec.on_event = [&events, &on_event](const proto::Event& e) {
    if (on_event) on_event(e);
    events.feed(e);
  };
  ScenarioTrial t;
  if (const auto why = external_device_unavailable(s)) {
    // The user's command would only fail to find the device (Lightning:
    // "No supported gpu backend found"): not started, skipped as dbh's own
    // worker's trial is when it reports the device unavailable.
    t.analysis = classify(t.result, events, s, kb, {});
    t.analysis.outcome = scenario::Outcome::kUnresolved;
    t.analysis.failure = Failure{};
    mark_not_run_here(t.analysis, s, *why);
    t.analysis.tuning = std::move(tuning);
    return t;
  }
  t.result = run_trial(spec);
  ClassifyOptions copts;
  copts.withhold_fault_records = withhold_fault_records;
  t.analysis = classify(t.result, events, s, kb, copts);
  t.analysis.tuning = std::move(tuning);
  if (variant) t.analysis.numerics_variant = variant->description;
  return t;
}

TrialAnalysis run_scenario_trial(const scenario::Scenario& s, const std::string& dir_text, int64_t index,
                                 bool withhold_fault_records, std::string* stderr_tail,
                                 const std::function<void(const proto::Event&)>& on_event) {
  ScenarioTrial t = run_classified_trial(s, dir_text, index, withhold_fault_records, on_event);
  // The trial's own outcome stands, but a run whose raw record is torn is not
  // one to report on.
  if (!t.result.journal_error.empty()) throw ReportError(t.result.journal_error);
  if (stderr_tail != nullptr) *stderr_tail = t.result.stderr_tail;
  return std::move(t.analysis);
}

}  // namespace dbh::harness::supervisor

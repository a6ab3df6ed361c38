#include "harness/supervisor/judge.h"

#include <algorithm>
#include <sstream>

#include "harness/common/text.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::supervisor {

namespace {

std::string yes_no(bool b) { return b ? "true" : "false"; }

using Miss = std::optional<std::string>;

Miss outcome_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (e.outcome == ev.outcome) return std::nullopt;
  return "outcome: expected " + to_string(e.outcome) + ", got " + to_string(ev.outcome);
}

Miss class_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.failure_class || *e.failure_class == ev.failure_class) return std::nullopt;
  return "failure_class: expected " + *e.failure_class + ", got " +
         (ev.failure_class.empty() ? "none" : ev.failure_class);
}

Miss step_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.step || (ev.failure_step && *ev.failure_step == *e.step)) return std::nullopt;
  return "step: expected " + std::to_string(*e.step) + ", got " +
         (ev.failure_step ? std::to_string(*ev.failure_step) : "none");
}

// A module matches itself and every module below it ("head" matches
// "head.thresh.up2", never "header.conv").
Miss module_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.module) return std::nullopt;
  const std::string& m = ev.failure_module;
  if (m == *e.module || m.rfind(*e.module + ".", 0) == 0) return std::nullopt;
  return "module: expected " + *e.module + ", got " + (m.empty() ? "none" : m);
}

Miss hmean_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.min_hmean) return std::nullopt;
  if (!ev.last_eval) return "min_hmean: expected at least " + fixed(*e.min_hmean) + ", got no evaluation";
  if (!ev.last_eval->has_hmean) {
    std::string names;
    for (const auto& [name, value] : ev.last_eval->metrics) names += (names.empty() ? "" : ", ") + name;
    return "min_hmean: expected at least " + fixed(*e.min_hmean) + ", got an evaluation without an h-mean (" +
           (names.empty() ? std::string("no metrics") : names) + ")";
  }
  if (ev.last_eval->hmean >= *e.min_hmean) return std::nullopt;
  return "min_hmean: expected at least " + fixed(*e.min_hmean) + ", got " + fixed(ev.last_eval->hmean) +
         " after step " + std::to_string(ev.last_eval->step - 1);
}

Miss loss_drop_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.loss_drop || (ev.loss_drop && *ev.loss_drop >= *e.loss_drop)) return std::nullopt;
  return "loss_drop: expected the loss to fall by at least " + fixed(100 * *e.loss_drop, 1) + " %, got " +
         (ev.loss_drop ? fixed(100 * *ev.loss_drop, 1) + " %" : std::string("too few steps to tell"));
}

Miss memory_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.max_peak_memory) return std::nullopt;
  if (!ev.peak_memory_bytes) {
    return "max_peak_memory: expected at most " + scenario::format_bytes(*e.max_peak_memory) +
           ", got no memory figure from the worker (none it reported was a count of bytes)";
  }
  if (*ev.peak_memory_bytes <= *e.max_peak_memory) return std::nullopt;
  return "max_peak_memory: expected at most " + scenario::format_bytes(*e.max_peak_memory) + ", got " +
         scenario::format_bytes(*ev.peak_memory_bytes);
}

Miss determinism_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.deterministic) return std::nullopt;
  if (!ev.identical) return std::string("deterministic: expected a comparison of fresh processes, got none");
  if (*ev.identical == *e.deterministic) return std::nullopt;
  return "deterministic: expected " + yes_no(*e.deterministic) + ", got " + yes_no(*ev.identical);
}

Miss data_dependence_mismatch(const scenario::Expectation& e, const Evidence& ev) {
  if (!e.data_dependent || (ev.data_dependent && *ev.data_dependent == *e.data_dependent)) return std::nullopt;
  return "data_dependent: expected " + yes_no(*e.data_dependent) + ", got " +
         (ev.data_dependent ? yes_no(*ev.data_dependent) : "undecided");
}

}  // namespace

std::string to_string(ExpectVerdict v) {
  switch (v) {
    case ExpectVerdict::kMet: return "met";
    case ExpectVerdict::kNotMet: return "not met";
    case ExpectVerdict::kNotJudged: return "not judged";
  }
  return "not met";
}

std::optional<double> loss_drop_of(const TrialAnalysis& a) {
  if (a.steps.size() < 2) return std::nullopt;
  const size_t k = std::max<size_t>(1, a.steps.size() / 5);
  double first = 0, last = 0;
  for (size_t i = 0; i < k; ++i) first += a.steps[i].loss, last += a.steps[a.steps.size() - 1 - i].loss;
  if (!(first > 0)) return std::nullopt;
  return 1.0 - last / first;
}

Evidence evidence_of(const TrialAnalysis& a) {
  Evidence ev;
  ev.outcome = a.outcome;
  ev.failure_class = a.failure.klass;
  ev.failure_step = a.failure.step;
  ev.failure_module = a.failure.module;
  if (a.outcome == scenario::Outcome::kSkipped) ev.skip_reason = a.failure.message;
  if (!a.evals.empty()) ev.last_eval = a.evals.back();
  ev.loss_drop = loss_drop_of(a);
  if (a.memory_known) ev.peak_memory_bytes = a.peak_memory_bytes;
  return ev;
}

const std::vector<ExpectKey>& expect_keys() {
  static const std::vector<ExpectKey> keys = {
      {"outcome", false, outcome_mismatch},
      {"failure_class", false, class_mismatch},
      {"step", false, step_mismatch},
      {"module", false, module_mismatch},
      {"min_hmean", true, hmean_mismatch},
      {"loss_drop", true, loss_drop_mismatch},
      {"max_peak_memory", true, memory_mismatch},
      {"deterministic", false, determinism_mismatch},
      {"data_dependent", false, data_dependence_mismatch},
  };
  return keys;
}

Judgement judge(const scenario::Expectation& e, const Evidence& ev, ExpectScope scope) {
  Judgement j;
  if (!ev.interrupted_by.empty()) {
    // Stopped by a signal: what ran is written, but it is not a result.
    j.verdict = ExpectVerdict::kNotMet;
    j.why = {"interrupted by " + ev.interrupted_by + ": the run did not finish"};
    return j;
  }
  if (ev.outcome == scenario::Outcome::kSkipped && e.outcome != scenario::Outcome::kSkipped) {
    // Not tried here: the expectation is neither met nor refuted.
    j.verdict = ExpectVerdict::kNotJudged;
    j.why = {"not judged: " + ev.skip_reason};
    return j;
  }
  for (const ExpectKey& k : expect_keys()) {
    if (scope == ExpectScope::kMetrics && !k.metric) continue;
    if (auto miss = k.mismatch(e, ev)) j.why.push_back(*miss);
  }
  j.verdict = j.why.empty() ? ExpectVerdict::kMet : ExpectVerdict::kNotMet;
  return j;
}

ControlsAnswer controls_answer(scenario::Outcome main, const std::vector<scenario::Outcome>& controls,
                               const std::vector<std::vector<std::string>>& control_overrides,
                               const std::string& data) {
  ControlsAnswer a;
  if (!is_failure(main) || controls.empty()) return a;
  const bool controls_pass =
      std::none_of(controls.begin(), controls.end(), [](scenario::Outcome o) { return is_failure(o); });
  std::string keys;
  bool data_key = false;
  for (const auto& overrides : control_overrides) {
    for (const auto& kv : overrides) {
      keys += (keys.empty() ? "" : ", ") + kv;
      const auto sets = [&kv](const char* key) { return kv.rfind(scenario::override_text(key, ""), 0) == 0; };
      data_key = data_key || sets(DBH_SCENARIO_KEY(data.source)) || sets(DBH_SCENARIO_KEY(data.path));
    }
  }
  if (!controls_pass) {
    a.data_dependent = false;
    a.reason = "The control run with " + keys + " failed too: the failure does not depend on it.";
    a.evidence = a.reason;
  } else if (data_key) {
    a.data_dependent = true;
    a.reason = "The same training passed with " + keys + " and failed with the scenario's data (" + data +
               "): the failure depends on the data, not on the model, trainer or device.";
    a.evidence = a.reason;
  } else {
    a.data_dependent = false;
    a.evidence = "A control run with " + keys + " passed: the failure depends on these settings";
  }
  return a;
}

}  // namespace dbh::harness::supervisor

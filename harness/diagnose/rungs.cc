#include "harness/diagnose/rungs.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "harness/common/text.h"
#include "harness/diagnose/lr_search.h"
#include "harness/kb/knowledge_base.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::diagnose {

std::string row_result(const Rung& r) {
  if (!r.applies.empty()) return "n/a (" + r.applies + ")";
  const auto& a = r.probe.analysis;
  if (a.outcome == scenario::Outcome::kUnresolved) return "could not tell (" + one_line(a.failure.message) + ")";
  std::string s = supervisor::is_failure(a.outcome) ? "FAILS: " + to_string(a.outcome) : "works";
  if (!a.failure.klass.empty()) s += " " + markdown_code(a.failure.klass);
  if (a.failure.step) s += " at step " + std::to_string(*a.failure.step);
  return s;
}

std::vector<std::string> concat_overrides(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Rung> ladder_rungs(const scenario::Scenario& s) {
  const bool real = s.data.source == scenario::DataSource::kReal;
  return {
      {RungId::kOps, "Basic tensor ops on the device", "ladder",
       {scenario::override_text(DBH_SCENARIO_KEY(train.mode), "ops"), "controls=[]"}, "", {}, false},
      {RungId::kModelStep, "Model forward/backward on synthetic data (1 step)", "ladder",
       {scenario::override_text(DBH_SCENARIO_KEY(data.source), to_string(scenario::DataSource::kSyntheticRandom)),
        scenario::override_text(DBH_SCENARIO_KEY(train.stop_after), "1"), "controls=[]"},
       "", {}, false},
      {RungId::kSynthetic, "Full trainer on synthetic data", "ladder",
       {scenario::override_text(DBH_SCENARIO_KEY(data.source), to_string(scenario::DataSource::kSyntheticBoxes)), "controls=[]"}, "", {},
       false},
      {RungId::kRealNoWorkers, "Trainer on real data, num_workers=0", "ladder",
       {scenario::override_text(DBH_SCENARIO_KEY(data.num_workers), "0"), "controls=[]"}, real ? "" : "data is not real", {},
       false},
      {RungId::kRealWorkers, "Trainer on real data with loader workers", "ladder",
       {scenario::override_text(DBH_SCENARIO_KEY(data.num_workers), "2"), "controls=[]"}, real ? "" : "data is not real", {},
       false},
      {RungId::kOneRunPerProcess, "Each run in a fresh process (the runs apart)", "ladder",
       {scenario::override_text(DBH_SCENARIO_KEY(repeat.processes),
                      std::to_string(s.repeat.processes * s.repeat.in_process)),
        scenario::override_text(DBH_SCENARIO_KEY(repeat.in_process), "1"), "controls=[]"},
       s.repeat.in_process > 1 ? "" : "one run per process already", {}, false},
      {RungId::kAsGiven, "The scenario as given", "ladder", {"controls=[]"}, "", {}, false},
  };
}

std::string number_text(double x) {
  std::ostringstream t;
  t << std::setprecision(6) << x;
  return t.str();
}

std::vector<Rung> variant_rungs(const scenario::Scenario& s) {
  const bool cuda = s.hardware.device != "cpu";
  const int64_t half = std::max<int64_t>(1, s.data.batch_size / 2);
  return {
      {RungId::kCudnnDeterministic, "cuDNN deterministic", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(hardware.cudnn_deterministic), "true"), "controls=[]"},
       cuda ? "" : "no cuDNN on cpu", {}, false},
      {RungId::kCudnnBenchmarkOff, "cuDNN benchmark off", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(hardware.cudnn_benchmark), "false"), "controls=[]"},
       cuda ? (s.hardware.cudnn_benchmark ? "" : "already off") : "no cuDNN on cpu", {}, false},
      {RungId::kCudnnDisabled, "cuDNN disabled", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(hardware.cudnn_enabled), "false"), "controls=[]"},
       cuda ? "" : "no cuDNN on cpu", {}, false},
      {RungId::kFp32, "AMP off (fp32)", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(train.precision), "fp32"), "controls=[]"},
       s.train.precision == model::Precision::kFp32 ? "already fp32" : "", {}, false},
      {RungId::kBf16, "AMP on (bf16)", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(train.precision), "bf16"), "controls=[]"},
       cuda ? (s.train.precision == model::Precision::kFp32 ? "" : "already AMP") : "AMP needs CUDA", {}, false},
      {RungId::kSmallerBatch,
       "Smaller batch (" + std::to_string(half) + " × " + std::to_string(s.train.accumulation * 2) + " accumulation)",
       "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(data.batch_size), std::to_string(half)),
        scenario::override_text(DBH_SCENARIO_KEY(train.accumulation), std::to_string(s.train.accumulation * 2)),
        "controls=[]"},
       s.data.batch_size > 1 ? "" : "batch is 1", {}, false},
      {RungId::kMoreMemory, "More memory headroom", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(hardware.memory_budget), std::to_string(s.hardware.memory_budget * 2)),
        "controls=[]"},
       s.hardware.memory_budget > 0 ? "" : "no memory budget set", {}, false},
      {RungId::kFixedBatch, "The first batch, repeated at every step", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(data.fixed_batch), "true"), "controls=[]"},
       s.data.fixed_batch ? "already one batch" : "", {}, false},
      {RungId::kBlockingLaunches, "Blocking kernel launches", "variant",
       {scenario::override_text(DBH_SCENARIO_KEY(hardware.launch_blocking), "true"), "controls=[]"},
       cuda ? "" : "CPU kernels are synchronous", {}, false},
  };
}

std::vector<Rung> learning_rungs(const scenario::Scenario& s, bool silent) {
  const bool real = s.data.source == scenario::DataSource::kReal;
  const int64_t window = s.monitors.learning_window > 0 ? s.monitors.learning_window
                                                        : std::clamp<int64_t>(s.train.max_steps, 4, 50);
  const std::vector<std::string> judged = {
      scenario::override_text(DBH_SCENARIO_KEY(monitors.learning_window), std::to_string(window)),
      scenario::override_text(DBH_SCENARIO_KEY(train.max_steps), std::to_string(std::max(window, s.train.max_steps))),
      "controls=[]"};
  return {
      {RungId::kLearnsSynthetic,
       "Learns on synthetic data (loss falls within " + std::to_string(window) + " steps)", "learning",
       concat_overrides({scenario::override_text(DBH_SCENARIO_KEY(data.source), to_string(scenario::DataSource::kSyntheticBoxes))}, judged),
       silent ? "" : "not a silent failure", {}, false},
      {RungId::kLearnsReal, "Learns on the real data (loss falls within " + std::to_string(window) + " steps)",
       "learning", judged,
       !silent ? "not a silent failure" : real ? "" : "data is not real", {}, false},
  };
}

Ladder ladder_of(std::initializer_list<const std::vector<Rung>*> groups, const std::string& klass, bool silent,
                 bool real_data) {
  Ladder ladder;
  for (const auto* group : groups) {
    for (const auto& r : *group) {
      RungEvidence e;
      e.id = r.id;
      e.name = r.name;
      e.result = row_result(r);
      e.ran = r.ran;
      e.outcome = r.probe.analysis.outcome;
      e.klass = r.probe.analysis.failure.klass;
      e.step = r.probe.analysis.failure.step;
      e.rate = r.rate;
      e.blocked = r.blocked;
      ladder.rungs.push_back(e);
    }
  }
  const bool fails = !klass.empty();
  const kb::FailureClass* kb = fails ? kb::KnowledgeBase::shipped().find(klass) : nullptr;
  ladder.klass = klass;
  ladder.kind = failure_kind(ladder.klass, silent, kb != nullptr && grows_across_runs(*kb));
  ladder.real_data = real_data;
  ladder.memory_exhaustion = fails && supervisor::is_memory_exhaustion(klass);
  ladder.data_invalid = fails && klass == "data_invalid";
  return ladder;
}

std::string ProbeBudget::why_not() const {
  return "not run: the probe budget (--max-probes " + std::to_string(max) + ") was spent";
}

void order_to_decide(std::vector<Rung>& rungs, const LadderConclusion& now, size_t from) {
  std::vector<HypothesisId> best = now.tied;
  if (best.empty() && !now.ranked.empty()) best.push_back(now.ranked.front().id);
  const auto speaks = [&](const Rung& r) {
    for (const HypothesisId h : best) {
      const auto& about = rungs_about(h);
      if (std::find(about.begin(), about.end(), r.id) != about.end()) return true;
    }
    return false;
  };
  if (from < rungs.size()) std::stable_partition(rungs.begin() + static_cast<std::ptrdiff_t>(from), rungs.end(), speaks);
}

void run_to_decide(std::vector<Rung>& rungs, const std::function<LadderConclusion()>& judge,
                   const std::function<void(Rung&)>& run) {
  for (size_t i = 0; i < rungs.size(); ++i) {
    order_to_decide(rungs, judge(), i);
    run(rungs[i]);
  }
}

// Why `r` cannot run here, "" when it can: it does not apply, is no valid
// scenario, or its worker lacks what it needs (`blocked`).
std::string cannot_run(probe::Prober& prober, const Rung& r, bool* blocked) {
  *blocked = false;
  if (!r.applies.empty()) return r.applies;
  try {
    const scenario::Scenario rs = prober.load(r.overrides);
    if (const auto cap = supervisor::missing_capability(rs)) {
      *blocked = true;
      return "the worker does not serve `" + *cap + "`";
    }
    // Note [Keys that never reach the worker]: a rung whose change the
    // worker never receives would only run the scenario as given again.
    if (std::string why = supervisor::overrides_not_passed(rs, r.overrides); !why.empty()) {
      *blocked = true;
      return why;
    }
  } catch (const ScenarioError& e) {
    return "not a valid scenario here: " + one_line(e.what());
  }
  return "";
}

namespace {

// A rung whose trial did not do what it asks (`why`, "" when it did) is
// unresolved: evidence of nothing, its row says why.
void could_not_tell(Rung& r, std::string why) {
  if (why.empty()) return;
  r.probe.analysis.outcome = scenario::Outcome::kUnresolved;
  r.probe.analysis.failure.message = std::move(why);
}

}  // namespace

void run_rung(probe::Prober& prober, Rung& r, ProbeBudget* budget) {
  if (!r.applies.empty()) return;
  bool blocked = false;
  if (std::string why = cannot_run(prober, r, &blocked); !why.empty()) {
    r.blocked = blocked;
    r.applies = std::move(why);
    return;
  }
  if (budget != nullptr && budget->exhausted()) {
    r.blocked = true;
    r.applies = budget->why_not();
    return;
  }
  if (budget != nullptr) ++budget->spent;
  r.probe = prober.probe(r.overrides, r.name);  // the whole name: a label cut mid-word says less
  r.ran = true;
  could_not_tell(r, rung_departure(r.id, r.probe.analysis));  // Note [A rung is checked …]
}

void check_against_scenario(std::vector<Rung>& rungs, const supervisor::TrialAnalysis& scenario_run) {
  for (Rung& r : rungs) {
    if (r.ran) could_not_tell(r, start_departure(r.id, r.probe.analysis, scenario_run));
  }
}

void run_rungs(probe::Prober& prober, std::vector<Rung>& rungs, ProbeBudget* budget) {
  // Which rungs can run at all, asked once (it loads each rung's scenario).
  std::vector<bool> can_run(rungs.size(), false);
  for (size_t k = 0; prober.jobs() > 1 && k < rungs.size(); ++k) {
    bool blocked = false;
    can_run[k] = cannot_run(prober, rungs[k], &blocked).empty();
  }
  for (size_t i = 0; i < rungs.size(); ++i) {
    if (prober.jobs() > 1) {
      // Note [Probes ahead, in parallel]: the rungs still to run that can,
      // within what is left of the budget.
      int64_t left = budget != nullptr && budget->max > 0 ? budget->max - budget->spent : INT64_MAX;
      std::vector<std::pair<std::vector<std::string>, std::string>> upcoming;
      for (size_t k = i; k < rungs.size() && left > 0; ++k) {
        if (!can_run[k]) continue;
        upcoming.emplace_back(rungs[k].overrides, rungs[k].name);
        --left;
      }
      prober.run_ahead(upcoming, probe::Prober::Own::kFirstInList);
    }
    run_rung(prober, rungs[i], budget);
  }
}

CommandOverrides split_command_overrides(const std::vector<std::string>& overrides) {
  // (a section that sets what is checked; the keys of it that change what a step computes)
  static const char* const kChecks[] = {"monitors", "expect", "limits", "repeat"};
  static const char* const kComputes[] = {DBH_SCENARIO_KEY(monitors.numerics_jitter),
                                          DBH_SCENARIO_KEY(monitors.numerics_replay),
                                          DBH_SCENARIO_KEY(monitors.numerics_variant)};
  CommandOverrides out;
  for (const auto& o : overrides) {
    const bool checks = std::any_of(std::begin(kChecks), std::end(kChecks),
                                    [&](const char* section) { return scenario::override_sets(o, section); }) &&
                        std::none_of(std::begin(kComputes), std::end(kComputes),
                                     [&](const char* key) { return scenario::override_sets(o, key); });
    (checks ? out.checks : out.changes).push_back(o);
  }
  return out;
}

std::vector<Rung> without_overrides_rungs(const CommandOverrides& overrides) {
  std::string list;
  for (const auto& o : overrides.changes) list += (list.empty() ? "" : " ") + o;
  const bool none = overrides.changes.empty();
  return {{RungId::kWithoutOverrides,
           none ? "Without the command's overrides" : "Without the command's overrides (" + one_line(list) + ")",
           "overrides",
           {"controls=[]"},
           none ? (overrides.checks.empty() ? "the command has none"
                                            : "the command's overrides set only what is checked")
                : "",
           {},
           false}};
}

RateSearch search_learning_rate(probe::Prober& prober, const scenario::Scenario& s,
                                const supervisor::TrialAnalysis& failure, double configured, ProbeBudget* budget) {
  RateSearch out;
  if (!supervisor::is_divergence(failure.failure.klass)) {
    out.not_run = "not a divergence";
    return out;
  }
  if (!(s.train.lr > 0)) {
    out.not_run = "the learning rate is 0";
    return out;
  }
  // At most every decade and every halving: the search's own bound.
  LearningRateSearch search(s.train.lr, configured, static_cast<int>(kLearningRateDecadesDown) + kLearningRateHalvings);
  out.floor = search.floor();
  out.floor_is_configured = configured > 0 && configured < s.train.lr && search.floor() == configured;
  int unchanged = 0;  // decades in a row whose failure is the scenario's, at its step
  const auto rung_of = [&](double rate) {
    const std::string text = number_text(rate);
    return Rung{RungId::kLowerLearningRate,
                "Learning rate " + text + " (" + number_text(s.train.lr / rate) + "× lower)",
                "learning rate",
                {scenario::override_text(DBH_SCENARIO_KEY(train.lr), text), "controls=[]"},
                "",
                {},
                false,
                rate};
  };
  while (const auto rate = search.next()) {
    if (unchanged >= 3) {
      out.reached_floor = true;  // 1000 times lower changed nothing: the rate is not what fails
      break;
    }
    Rung r = rung_of(*rate);
    // Note [Probes ahead, in parallel]: after this rate (which may run ahead
    // already), the rate the search asks for next if this one fails, then
    // the one if it trains, ahead (within the budget).
    if (prober.jobs() > 1 && (budget == nullptr || budget->max == 0 || budget->max - budget->spent >= 2)) {
      std::vector<std::pair<std::vector<std::string>, std::string>> upcoming = {{r.overrides, r.name}};
      for (const auto result : {RateTry::Result::kFails, RateTry::Result::kTrains}) {
        LearningRateSearch then = search;
        then.record(*rate, result);
        if (const auto after = then.next()) upcoming.emplace_back(rung_of(*after).overrides, rung_of(*after).name);
      }
      prober.run_ahead(upcoming, probe::Prober::Own::kFirstInList);
    }
    run_rung(prober, r, budget);
    if (!r.ran && r.blocked && budget != nullptr && budget->exhausted()) {
      out.rungs.push_back(std::move(r));  // the rate that would have been next, not run
      break;
    }
    const auto result = !r.ran ? RateTry::Result::kUnknown
                        : r.probe.analysis.outcome == scenario::Outcome::kUnresolved ? RateTry::Result::kUnknown
                        : supervisor::is_failure(r.probe.analysis.outcome)          ? RateTry::Result::kFails
                                                                                     : RateTry::Result::kTrains;
    search.record(*rate, result);
    const auto& a = r.probe.analysis;
    unchanged = result == RateTry::Result::kFails && a.failure.klass == failure.failure.klass &&
                        a.failure.step == failure.failure.step
                    ? unchanged + 1
                    : 0;
    out.rungs.push_back(std::move(r));
  }
  prober.run_ahead({});  // the rates guessed ahead that the search did not need
  out.reached_floor = out.reached_floor || search.reached_floor();
  return out;
}

const Rung* RateSearch::answer() const {
  const Rung* best = nullptr;
  for (const auto& t : rungs) {
    if (t.ran && t.probe.analysis.outcome == scenario::Outcome::kPassed && (best == nullptr || t.rate > best->rate)) {
      best = &t;
    }
  }
  return best;
}

std::string rate_search_summary(const RateSearch& r, const scenario::Scenario& s) {
  if (r.rungs.empty()) return "";
  const Rung* best = r.answer();
  const std::string tried = "the learning rate searched (" + std::to_string(r.rungs.size()) +
                            " rate(s), by decades down from " + number_text(s.train.lr) + ", then halvings)";
  if (best == nullptr) {
    return tried + ": no rate tried trains, down to " + number_text(r.rungs.back().rate) +
           (r.reached_floor ? (r.floor_is_configured ? " (the configuration's own rate)" : " (six decades below)")
                            : "");
  }
  const std::string text = number_text(best->rate);
  const std::string found = scenario::override_text(DBH_SCENARIO_KEY(train.lr), text);
  const auto written = supervisor::as_the_command_writes(s, found);
  return tried + ": `" + found + "`" + (written ? " (your `" + *written + "`)" : "") +
         " trains, confirmed by its run (" + (!best->probe.dir.empty() ? best->probe.dir
                                                : !best->probe.cached_from.empty() ? best->probe.cached_from
                                                                                   : "from the probe cache") +
         "), " + number_text(s.train.lr / best->rate) + "× below the rate that diverged. It is the largest rate tried "
         "at which this training does not diverge (no non-finite value, no exploded loss), not what a "
         "learning-rate finder answers (where the loss falls fastest)";
}

}  // namespace dbh::harness::diagnose

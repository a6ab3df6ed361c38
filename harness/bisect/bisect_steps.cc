// Bisection over steps and modules: replays of a prefix of the failing run
// (bisect/parts.h).
#include "harness/bisect/parts.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "harness/common/json_fields.h"
#include "harness/probe/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/event_digest.h"

namespace dbh::harness::bisect {
namespace fs = std::filesystem;

namespace {

// Nearest checkpoint written by `probe` whose step count is <= limit.
std::optional<std::pair<int64_t, std::string>> nearest_checkpoint(const probe::ProbeResult& probe, int64_t limit) {
  std::error_code ec;
  if (probe.dir.empty() || !fs::exists(probe.dir, ec)) return std::nullopt;
  std::optional<std::pair<int64_t, std::string>> best;
  for (const auto& e : fs::directory_iterator(probe.dir, ec)) {
    const auto step = checkpoint_step(e.path());
    if (step && *step <= limit && (!best || *step > best->first)) best = std::make_pair(*step, e.path().string());
  }
  return best;
}

// Note [Cheap probes]
// A replay of the first m steps need not train from step 0: the first
// reproduction run writes checkpoints (every max(2, ⌈n/8⌉) steps) and every
// replay resumes from the nearest one at or before step m-1, so a probe runs
// at most that many steps instead of up to n. bisect.json measures it: each
// probe's steps_run (steps executed after resuming) and resumed_from, and in
// total steps_run_total against steps_from_start, what the same probes would
// have executed from step 0. --replay-from-start turns it off (no checkpoints
// written, every replay from step 0): for disks too small for checkpoints, or
// to rule out checkpoint/resume as the cause. tests/integration/bisect_test.cc
// runs both ways; tests/bench/bisect_bench.cc (BM_BisectStepsReplay) times them.

// Where the replays start, for the report: from the reproduction's
// checkpoints (written every `every` steps when `checkpoints`), or from step 0.
std::string how_replays_start(bool resume, bool checkpoints, int64_t every) {
  if (resume) {
    return "replays resume from checkpoints written every " + std::to_string(every) +
           " step(s) by the first reproduction run; no other probe writes checkpoints";
  }
  return checkpoints ? "replays start at step 0: `loss_exploded` is judged against the run's first step's loss, "
                       "which a replay resumed from a checkpoint does not see"
                     : "replays start at step 0 (--replay-from-start); no probe writes checkpoints";
}

// A replay of the first `stop_after` steps, resuming from the nearest of the
// reproduction's checkpoints when `resume`.
std::vector<std::string> replay_overrides(const probe::ProbeResult& source, int64_t stop_after, bool resume = true) {
  std::vector<std::string> o = {scenario::override_text(DBH_SCENARIO_KEY(train.stop_after), std::to_string(stop_after)),
                                scenario::override_text(DBH_SCENARIO_KEY(train.checkpoint_every), "0")};
  if (resume) {
    if (const auto ck = nearest_checkpoint(source, stop_after - 1)) {
      o.push_back(scenario::override_text(DBH_SCENARIO_KEY(train.resume_from), ck->second));
    }
  }
  return o;
}

}  // namespace

Outputs bisect_steps(probe::Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = BisectKind::kSteps;
  const scenario::Scenario s = prober.load({});
  if (s.repeat.in_process != 1) {
    throw ScenarioError("bisect steps: expected " + std::string(DBH_SCENARIO_KEY(repeat.in_process)) + " 1, got " +
                        std::to_string(s.repeat.in_process));
  }
  const int64_t n = s.train.last_step();
  // At most 8 checkpoints (one is about as large as the model and its
  // optimizer state), at least 2 steps apart: replaying a step is cheaper than
  // writing and loading one.
  const int64_t every = std::max<int64_t>(2, (n + 7) / 8);
  const bool checkpoints = !o.replay_from_start;  // Note [Cheap probes]
  ReproducePlan plan;
  plan.first = {scenario::override_text(DBH_SCENARIO_KEY(train.checkpoint_every),
                                        std::to_string(checkpoints ? every : 0))};
  plan.rest = {scenario::override_text(DBH_SCENARIO_KEY(train.checkpoint_every), "0")};
  plan.keep_checkpoints = checkpoints;
  plan.check_step = true;
  out.rep = reproduce(prober, plan, o, s.model.decoder);
  // Note [A loss that explodes has diverged]: judged against the run's first
  // step's loss, which a replay resumed from a later checkpoint does not
  // see; such a failure is replayed from step 0.
  const bool resume = checkpoints && out.rep.baseline.analysis.failure.klass != supervisor::kLossExploded;
  out.replay_from_start = !resume;
  out.doubts = out.rep.notes;
  const std::string base_repro = command_line(prober.scenario_path(), prober.base_overrides());
  if (out.rep.failures == 0) {
    out.summary = "the failure does not reproduce (" + std::to_string(out.rep.runs) + " runs, none failed" +
                  (out.rep.different > 0 ? " the same way" : "") + ")";
    out.repro = base_repro;
    return out;
  }
  const auto& fail = out.rep.baseline.analysis.failure;
  if (out.rep.sig.before_training) {
    out.summary = "the failure happens before training (no step completed: `" + fail.klass + "`, \"" +
                  one_line(fail.message) + "\"), so there is no failing step to bisect";
    out.doubts.push_back("a failure before the first step (data validation, preflight, model or checkpoint "
                         "loading) cannot be bisected by steps; try `dbh bisect data` or `dbh diagnose`");
    out.result = {{"step", nullptr}, {"before_training", true}, {"class", fail.klass}, {"message", fail.message}};
    out.repro = base_repro;
    return out;
  }
  const auto hint = fail.step;
  Search search(prober, out.rep, out.rep.sig);
  std::map<int64_t, probe::Verdict> seen;  // prefix length → verdict
  auto fails = [&](int64_t m) {
    const probe::Verdict v = search.verdict(replay_overrides(out.rep.source, m, resume),
                                     "first " + std::to_string(m) + " step(s)", /*fresh=*/false);
    seen[m] = v;
    return v;
  };
  const auto r = find_first_failing(1, n, fails);
  if (!r.first_fail) {
    out.summary = "no failing prefix found: " + r.note;
    out.repro = base_repro;
    return out;
  }
  const int64_t step = *r.first_fail - 1;
  out.found = true;
  out.answer_step = step;
  if (!r.note.empty()) out.doubts.push_back(r.note);
  // Confirm both ends with fresh probes: the steps before the answer pass,
  // the answer fails the same way.
  bool before_passes = true;
  if (step >= 1) {
    before_passes = search.verdict(replay_overrides(out.rep.source, step, resume),
                                   "re-check: first " + std::to_string(step) + " step(s)", /*fresh=*/true) ==
                    probe::Verdict::kPass;
    if (!before_passes) {
      out.doubts.push_back("re-check: the first " + std::to_string(step) + " step(s) did not pass when run again");
    }
  }
  const bool answer_fails = search.verdict(replay_overrides(out.rep.source, step + 1, resume),
                                           "re-check: first " + std::to_string(step + 1) + " step(s)",
                                           /*fresh=*/true) == probe::Verdict::kFail;
  if (!answer_fails) {
    out.doubts.push_back("re-check: the first " + std::to_string(step + 1) +
                         " step(s) did not fail the same way when run again");
  }
  out.confirmed = before_passes && answer_fails;
  const bool agrees = !hint || *hint == step;
  if (!agrees) {
    out.doubts.push_back("the reproduction failed at step " + std::to_string(*hint) + ", the replays at step " +
                         std::to_string(step));
  }
  for (const auto& [m, v] : seen) {
    if (v != probe::Verdict::kFail) continue;
    for (const auto& [m2, v2] : seen) {
      if (m2 > m && v2 == probe::Verdict::kPass) {
        out.doubts.push_back("the first " + std::to_string(m) + " step(s) failed but the first " +
                             std::to_string(m2) + " passed");
      }
    }
  }
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  conclude(out, confidence(out.rep, search.passes()));
  out.result = {{"step", step},
                {"monitor_step", hint ? ojson(*hint) : ojson(nullptr)},
                {"agrees_with_monitors", agrees},
                {"class", fail.klass},
                {"flaky_boundary", !out.confirmed}};
  out.summary = (out.confirmed ? "the first failing step is **" : "the first failing step appears to be **") +
                std::to_string(step) + "** (class `" + fail.klass + "`)";
  if (hint) {
    out.details.push_back(std::string("the monitors of the full run flagged step ") + std::to_string(*hint) +
                          (*hint == step ? " (agrees)" : " (differs)"));
  }
  out.details.push_back(how_replays_start(resume, checkpoints, every));
  out.repro = command_line(prober.scenario_path(),
                           concat(prober.base_overrides(),
                                  replay_overrides(out.rep.source, step + 1, resume && prober.keep_checkpoints())));
  return out;
}

Outputs bisect_modules(probe::Prober& prober, const BisectOptions& o) {
  Outputs steps = bisect_steps(prober, o);
  Outputs out;
  out.kind = BisectKind::kModules;
  out.rep = steps.rep;
  out.doubts = steps.doubts;
  out.details = steps.details;
  out.replay_from_start = steps.replay_from_start;
  if (!steps.found) {
    out.summary = "no failing step to replay: " + steps.summary;
    out.repro = steps.repro;
    return out;
  }
  const int64_t step = steps.answer_step;
  auto extra = replay_overrides(steps.rep.source, step + 1, !o.replay_from_start);
  extra.push_back(scenario::override_text(DBH_SCENARIO_KEY(monitors.mode), "localise"));
  // Localise mode names sites more precisely: the same class at the same
  // step is the same failure.
  Signature sig = steps.rep.sig;
  sig.modules.clear();
  Search search(prober, steps.rep, sig);
  probe::ProbeResult replay;
  const probe::Verdict v = search.verdict(extra, "localise replay of step " + std::to_string(step), /*fresh=*/false, &replay);
  if (v != probe::Verdict::kFail) {
    out.doubts.push_back("the localise replay of step " + std::to_string(step) + " did not fail the same way (" +
                         to_string(v) + (v == probe::Verdict::kDifferent ? ": " + difference(replay, sig) : "") + ")");
  }
  out.confirmed = steps.confirmed && v == probe::Verdict::kFail;
  std::vector<std::string> repro_extra =
      replay_overrides(steps.rep.source, step + 1, !o.replay_from_start && prober.keep_checkpoints());
  repro_extra.push_back(scenario::override_text(DBH_SCENARIO_KEY(monitors.mode), "localise"));
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), repro_extra));
  const auto& h = replay.analysis.primary_health;
  if (h.is_null() || h.empty()) {
    out.summary = "the replay of step " + std::to_string(step) + " failed without a non-finite tensor (" +
                  to_string(replay.analysis.outcome) + ": " + replay.analysis.failure.message + ")";
    out.result = {{"step", step}, {"module", replay.analysis.failure.module}};
    out.found = !replay.analysis.failure.module.empty();
    conclude(out, steps.confidence);
    return out;
  }
  // Names from the worker's health event, as the supervisor quotes names:
  // one line, cut, no backtick (code spans, the terminal, bisect.md).
  const auto name = [&h](const char* key) { return supervisor::quoted_name(field_or(h, key, "")); };
  const std::string kind = name("kind");
  const std::string site = name("site"), module = name("module"), input_module = name("input_module");
  const std::string direction = kind == "gradient" ? "backward" : kind == "activation" ? "forward" : "inputs";
  out.found = true;
  conclude(out, steps.confidence);
  out.result = {{"step", step},
                {"direction", direction},
                {"kind", kind},
                {"module", module},
                {"tensor", site},
                {"stats", h.contains("stats") ? ojson::parse(h["stats"].dump()) : ojson(nullptr)},
                {"input_module", input_module},
                {"input_stats", h.contains("input_stats") ? ojson::parse(h["input_stats"].dump()) : ojson(nullptr)}};
  out.summary = "at step " + std::to_string(step) + " the first non-finite " + kind + " in " + direction +
                " order is `" + site + "`" + (module.empty() ? "" : " in module `" + module + "`");
  if (h.contains("stats")) out.details.push_back("its statistics: " + h["stats"].dump());
  if (h.contains("input_module")) {
    out.details.push_back("the module that ran before it, `" + input_module + "`, produced finite output: " +
                          (h.contains("input_stats") ? h["input_stats"].dump() : std::string("(no statistics)")));
  }
  return out;
}

}  // namespace dbh::harness::bisect

#include "harness/supervisor/passed_run.h"

// What a trial that ended `done passed`, on the schedule it was asked for, is
// judged for before its pass is believed: what grew across its in-process
// runs, its validations, updates that change nothing, and a loss that does
// not fall.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/text.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::supervisor {
namespace {

// The window monitors.learning_window resolves to for `s`; 0: not judged.
int64_t learning_window(const scenario::Scenario& s) {
  if (!s.monitors.silent_check("learning")) return 0;
  if (s.monitors.learning_window >= 0) return s.monitors.learning_window;
  // auto: runs long enough to judge, from scratch (a loss that starts from
  // trained weights may already sit at its floor).
  if (s.train.max_steps < 40 || !s.model.weights.empty() || !s.train.resume_from.empty()) return 0;
  return std::min<int64_t>(50, s.train.max_steps / 2);
}

// Note [Learning judged with its noise]: a loss that falls 5 % means
// nothing when it jumps 15 % from one batch to the next (fresh synthetic
// boxes, a tiny batch). The step-to-step spread σ is measured over the
// window from successive differences (var(l[i+1] − l[i]) = 2σ² for
// independent noise, and a slow trend barely moves it); the drop of the mean
// from the first half to the second must exceed both learning_min_drop and
// twice its standard error, σ·√(1/n₁ + 1/n₂), before it counts as learning.
struct LearningNoise {
  double spread = 0;        // σ, in loss units
  double required = 0;      // the relative drop that counts, ≥ learning_min_drop
  double standard_error = 0;  // of the drop, relative to the first half's mean
};

LearningNoise learning_noise(const std::vector<const StepRecord*>& steps, size_t half, size_t end, double first,
                             double min_drop) {
  LearningNoise n;
  double sq = 0;
  for (size_t i = 0; i + 1 < end; ++i) {
    const double d = steps[i + 1]->loss - steps[i]->loss;
    sq += d * d;
  }
  n.spread = end > 1 ? std::sqrt(sq / static_cast<double>(end - 1) / 2.0) : 0.0;
  n.standard_error = n.spread * std::sqrt(1.0 / static_cast<double>(half) + 1.0 / static_cast<double>(end - half)) /
                     first;
  n.required = std::max(min_drop, 2.0 * n.standard_error);
  return n;
}

// Note [Updates that change nothing]: a run whose optimizer applied a
// learning rate of 0 at every step, or whose every gradient was exactly 0,
// never changed its weights, however short it is (the loss-falling check
// below needs a window of steps). Judged from step_end for any worker that
// measures the gradient norm (dbh's own always; the adapter with the finite
// monitors on), over at least kFrozenSteps steps of a run; the class is
// not_learning, its message says which.
constexpr size_t kFrozenSteps = 3;

void judge_frozen_updates(TrialAnalysis& a, const scenario::Scenario& s) {
  if (!s.monitors.silent_check("learning")) return;
  std::map<int64_t, std::vector<const StepRecord*>> runs;
  for (const auto& st : a.steps) runs[st.run].push_back(&st);
  for (const auto& [run, steps] : runs) {
    if (steps.size() < kFrozenSteps) continue;
    bool measured = true, lr_zero = true, grad_zero = true;
    for (const StepRecord* st : steps) {
      measured = measured && st->grad_norm.has_value();
      lr_zero = lr_zero && st->lr == 0.0;
      grad_zero = grad_zero && st->grad_norm.value_or(1.0) == 0.0;
    }
    if (!measured || (!lr_zero && !grad_zero)) continue;
    Failure& f = a.failure;
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "not_learning";
    f.step = steps.front()->step;
    f.run = run;
    const std::string n = std::to_string(steps.size());
    f.message = lr_zero ? "the learning rate was 0 at every one of the " + n + " steps of run " +
                              std::to_string(run) + ": the weights never changed"
                        : "every gradient was zero at each of the " + n + " steps of run " + std::to_string(run) +
                              ": the loss does not depend on the weights, so they never changed";
    f.evidence.push_back(f.message);
    f.evidence.push_back(lr_zero ? "the lr column of metrics.csv is 0 from step " + std::to_string(steps.front()->step) +
                                       " to step " + std::to_string(steps.back()->step) +
                                       " (a schedule stuck at 0, a frozen optimizer, a parameter group without the "
                                       "model's weights)"
                                 : "the gradient norm the worker measured is 0 at every step (a detached or constant "
                                   "loss, loss weights of 0, every parameter frozen)");
    return;
  }
}

// Loss not decreasing (`not_learning`): over the first W steps of each
// in-process run, the mean loss of the second half must lie below the first
// half's by monitors.learning_min_drop and by twice the drop's standard
// error (Note [Learning judged with its noise]). Runs shorter than W are not
// judged.
void judge_learning(TrialAnalysis& a, const scenario::Scenario& s) {
  const int64_t w = learning_window(s);
  if (w <= 0) return;
  std::map<int64_t, std::vector<const StepRecord*>> runs;
  for (const auto& st : a.steps) runs[st.run].push_back(&st);
  for (const auto& [run, steps] : runs) {
    if (static_cast<int64_t>(steps.size()) < w) continue;
    const size_t half = static_cast<size_t>(w / 2), end = static_cast<size_t>(w);
    double first = 0, second = 0, grad = 0;
    bool grad_measured = true;  // a worker that does not measure the norm: nothing said of it
    for (size_t i = 0; i < half; ++i) first += steps[i]->loss / static_cast<double>(half);
    for (size_t i = half; i < end; ++i) second += steps[i]->loss / static_cast<double>(end - half);
    for (size_t i = 0; i < end; ++i) {
      grad_measured = grad_measured && steps[i]->grad_norm.has_value();
      grad += steps[i]->grad_norm.value_or(0) / static_cast<double>(end);
    }
    if (!(first > 0) || !std::isfinite(first) || !std::isfinite(second)) continue;
    const double change = second / first - 1.0;
    const LearningNoise noise = learning_noise(steps, half, end, first, s.monitors.learning_min_drop);
    if (-change >= noise.required) continue;
    const int64_t s0 = steps.front()->step, s1 = steps[end - 1]->step, sh = steps[half]->step;
    const std::string range = std::to_string(s0) + "–" + std::to_string(s1);
    const std::string pct = (change < 0 ? "−" : "+") + fixed(std::fabs(100 * change), 1) + " %";
    const bool noisy = noise.required > s.monitors.learning_min_drop;
    const std::string expected =
        "expected at least −" + fixed(100 * noise.required, 1) + " %" +
        (noisy ? ", twice the standard error of a drop with a step-to-step spread of ±" +
                     fixed(100 * noise.spread / first, 1) + " %"
               : "");
    Failure& f = a.failure;
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "not_learning";
    f.step = s1;
    f.run = run;
    f.message = "loss not decreasing over steps " + range + ": " + fixed(first, 3) + " → " + fixed(second, 3) +
                " (" + pct + ", " + expected + ")";
    f.evidence.push_back("loss " + fixed(first, 3) + " → " + fixed(second, 3) + " over steps " + range + " (" +
                         pct + ", " + expected + "): the mean of steps " + std::to_string(sh) + "–" +
                         std::to_string(s1) + " against the mean of steps " + std::to_string(s0) + "–" +
                         std::to_string(steps[half - 1]->step));
    f.evidence.push_back((grad_measured ? "gradients were not zero (mean norm " + fixed(grad, 4) + ") and t"
                                        : std::string("t")) +
                         "he scheduled learning rate went from " + fixed(steps.front()->lr, 6) + " to " +
                         fixed(steps[end - 1]->lr, 6) + ": the updates do not reduce the loss");
    f.evidence.push_back("window: " + std::string(DBH_SCENARIO_KEY(monitors.learning_window)) + " " +
                         (s.monitors.learning_window < 0 ? "auto (min(50, max_steps/2) = " + std::to_string(w) + ")"
                                                         : std::to_string(w)) +
                         " steps, margin " + DBH_SCENARIO_KEY(monitors.learning_min_drop) + " " +
                         fixed(s.monitors.learning_min_drop, 3) + ", step-to-step spread ±" +
                         fixed(noise.spread, 3) + " (" + fixed(100 * noise.spread / first, 1) +
                         " % of the first half's mean): a drop counts when it exceeds " +
                         fixed(100 * noise.required, 1) + " %");
    return;
  }
}

// Whether every value of `values` from `from` on is known.
bool all_known(const std::vector<std::optional<int64_t>>& values, size_t from) {
  return std::all_of(values.begin() + static_cast<std::ptrdiff_t>(std::min(from, values.size())), values.end(),
                     [](const std::optional<int64_t>& v) { return v.has_value(); });
}

std::string count_text(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "unknown"; }
std::string bytes_text(const std::optional<int64_t>& v) { return v ? scenario::format_bytes(*v) : "unknown"; }

// Memory growth across in-process runs of a passed trial: host RSS, and on
// CUDA the caching allocator's allocated and reserved memory.
// Note [What a run leaves behind]: besides memory, a run that leaves open
// files, threads or child processes behind grows them run after run. Judged
// as resident memory is, from the second run's end on (the first opens what
// a process opens once: thread pools, loader workers, caches), over three
// runs at least: a count that rises at every run's end is a leak.
void judge_resource_leaks(TrialAnalysis& a) {
  const std::vector<std::pair<const char*, const std::vector<std::optional<int64_t>>*>> series = {
      {"open files", &a.run_end_open_files}, {"threads", &a.run_end_threads}, {"child processes", &a.run_end_children}};
  for (const auto& [what, values] : series) {
    if (a.outcome != scenario::Outcome::kPassed || values->size() < 3) continue;
    // Note [An unknown is no zero]: judged only over counts the worker gave.
    if (!all_known(*values, 1)) continue;
    bool rises = true;
    for (size_t i = 2; i < values->size(); ++i) rises = rises && *(*values)[i] > *(*values)[i - 1];
    if (!rises) continue;
    const int64_t per_run = (*values->back() - *(*values)[1]) / static_cast<int64_t>(values->size() - 2);
    Failure& f = a.failure;
    a.outcome = scenario::Outcome::kLeaked;
    f.klass = "leak_across_runs";
    f.message = std::string(what) + " grew by " + std::to_string(per_run) + " per run over " +
                std::to_string(values->size()) + " in-process runs";
    std::string counts;
    for (size_t i = 0; i < values->size(); ++i) counts += (i ? ", " : "") + count_text((*values)[i]);
    f.evidence.push_back(std::string(what) + " at each run's end: " + counts);
  }
}

void judge_leaks(const ClassifyOptions& opts, TrialAnalysis& a) {
  Failure& f = a.failure;
  const std::vector<std::pair<const char*, const std::vector<std::optional<int64_t>>*>> series = {
      {"CUDA allocated memory", &a.run_end_cuda_allocated},
      {"CUDA reserved memory", &a.run_end_cuda_reserved},
      {"resident memory", &a.run_end_rss}};
  for (const auto& [what, values] : series) {
    // The first run's end holds what a process allocates once (allocator
    // and kernel caches, thread pools): over three runs or more, resident
    // and reserved memory are judged from the second run's end on. Two runs
    // (`repeat --in-process 2`) are judged from the first, against twice
    // the threshold: both workers measure after the heap gave back its free
    // memory (malloc_trim), and a warm-up the second run still pays stays
    // below that bar, where a leak of a model's size does not. Allocated
    // CUDA memory is live tensors only, judged from the first.
    const bool exact = values == &a.run_end_cuda_allocated;
    const bool two_runs = values->size() == 2;
    const size_t from = exact || two_runs ? 0 : 1;
    if (values->size() < from + 2 || a.outcome != scenario::Outcome::kPassed) continue;
    // Note [An unknown is no zero]: a run's end without a figure, or with
    // no count, leaves the series unjudged.
    if (!all_known(*values, from)) continue;
    const int64_t growth = *values->back() - *(*values)[from];
    const int64_t per_run = growth / static_cast<int64_t>(values->size() - 1 - from);
    if (per_run <= (two_runs && !exact ? 2 : 1) * opts.leak_threshold_bytes) continue;
    a.outcome = scenario::Outcome::kLeaked;
    f.klass = "leak_across_runs";
    f.message = std::string(what) + " grew by " + scenario::format_bytes(per_run) + " per run over " +
                std::to_string(values->size()) + " in-process runs";
    for (size_t i = 0; i < a.run_end_rss.size(); ++i) {
      std::string line = "run " + std::to_string(i) + " ended at " + bytes_text(a.run_end_rss[i]) + " RSS";
      if (i < a.run_end_cuda_allocated.size()) {
        line += ", CUDA allocated " + bytes_text(a.run_end_cuda_allocated[i]) + ", reserved " +
                bytes_text(i < a.run_end_cuda_reserved.size() ? a.run_end_cuda_reserved[i] : std::nullopt);
      }
      f.evidence.push_back(line);
    }
  }
  judge_resource_leaks(a);
}


// A run that trained without an error but whose validation says it learned
// nothing, or forgot what it learned, or whose evaluator cannot be trusted.
void judge_evaluation(TrialAnalysis& a, const scenario::Scenario& s) {
  Failure& f = a.failure;
  // Nothing to score is not a broken evaluator: a validation set without a
  // scorable word gives every metric 0 by construction, the self-check too.
  if (a.validation_words && *a.validation_words == 0) {
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "validation_unscorable";
    f.message = "the validation set holds no scorable word (every image without a legible annotated word): "
                "there is nothing to score, so its precision, recall and h-mean are 0 whatever the model learns";
    f.evidence.push_back(f.message);
    if (s.data.val.holdout > 0) {
      f.evidence.push_back(std::string(DBH_SCENARIO_KEY(data.val.holdout)) + " " +
                           std::to_string(s.data.val.holdout) + " held out images without words");
    }
    return;
  }
  if (a.evaluator_self_check && *a.evaluator_self_check < 0.999) {
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "evaluator_broken";
    f.message = "the evaluator scored the ground truth itself at h-mean " + fixed(*a.evaluator_self_check) +
                " (expected 1.000): its metrics cannot be trusted";
    f.evidence.push_back(f.message);
    return;
  }
  if (a.evals.empty()) return;
  const EvalRecord& last = a.evals.back();
  // The reference settings find boxes in the maps, the scenario's keep none:
  // the post-processing settings drop every box.
  {
    const bool any_boxes = std::any_of(a.evals.begin(), a.evals.end(), [](const EvalRecord& e) { return e.det > 0; });
    const auto ref = std::max_element(a.evals.begin(), a.evals.end(), [](const EvalRecord& x, const EvalRecord& y) {
      return x.det_reference < y.det_reference;
    });
    if (!any_boxes && ref->det_reference > 0) {
      a.outcome = scenario::Outcome::kFailed;
      f.klass = "postprocess_drops_all";
      f.step = ref->step - 1;  // the 0-based step the evaluation followed
      f.message = "post-processing kept no box at any of " + std::to_string(a.evals.size()) +
                  " evaluation(s), where the reference settings keep " + std::to_string(ref->det_reference) +
                  " on the same probability maps (after step " + std::to_string(ref->step - 1) + ")";
      f.evidence.push_back(f.message);
      f.evidence.push_back("post-processing: binarize_thresh " + fixed(s.data.val.binarize_thresh, 2) +
                           ", box_thresh " + fixed(s.data.val.box_thresh, 2) + ", unclip_ratio " +
                           fixed(s.data.val.unclip_ratio, 2));
      return;
    }
  }
  double best = 0;
  int64_t best_step = 0;
  for (const auto& e : a.evals) {
    if (e.hmean > best) best = e.hmean, best_step = e.step;
  }
  if (s.monitors.hmean_collapse_ratio > 0 && best >= 0.1 && last.hmean < s.monitors.hmean_collapse_ratio * best) {
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "hmean_collapse";
    f.step = last.step - 1;
    f.message = "validation h-mean collapsed from " + fixed(best) + " after step " + std::to_string(best_step - 1) +
                " to " + fixed(last.hmean) + " after step " + std::to_string(last.step - 1);
    f.evidence.push_back(f.message);
    return;
  }
  // Note [A worker's own validation metrics]: an external worker reports
  // the metrics its training logs after a validation, by its own names, and
  // dbh's precision, recall and h-mean where one of them is named so (`f1`
  // is an h-mean). Where an h-mean is named its evaluations are judged as
  // dbh's are (collapse, zero); where none is, "validation metrics all zero"
  // is every metric it reported being 0, whatever their names.
  const auto zero = [](const EvalRecord& e) {
    if (e.has_hmean) return e.hmean == 0;
    return !e.metrics.empty() &&
           std::all_of(e.metrics.begin(), e.metrics.end(), [](const auto& m) { return m.second == 0; });
  };
  const int64_t zeros_needed = s.monitors.hmean_zero_after;
  if (zeros_needed > 0 && static_cast<int64_t>(a.evals.size()) >= zeros_needed &&
      std::all_of(a.evals.end() - zeros_needed, a.evals.end(), zero)) {
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "hmean_zero";
    f.step = last.step - 1;
    const std::string through = " for the last " + std::to_string(zeros_needed) + " evaluations (through step " +
                                std::to_string(last.step - 1) + "): ";
    if (last.metrics.empty()) {
      f.message = "validation h-mean stayed 0.000" + through + std::to_string(last.det) + " detection(s) for " +
                  std::to_string(last.gt) + " words, probability mean " + fixed(last.prob_mean);
    } else {
      std::string shown;
      for (size_t i = 0; i < last.metrics.size() && i < 8; ++i) {
        shown += (i ? ", " : "") + last.metrics[i].first + " " + fixed(last.metrics[i].second);
      }
      if (last.metrics.size() > 8) shown += " and " + std::to_string(last.metrics.size() - 8) + " more";
      f.message = std::string(last.has_hmean ? "validation h-mean stayed 0.000" : "validation metrics stayed all 0") +
                  through + "the training's own metrics " + shown;
    }
    f.evidence.push_back(f.message);
  }
}

}  // namespace

// Note [A loss that explodes has diverged]
// A learning rate far too large need not reach NaN: with batch norm after
// every convolution the weights' scale no longer matters to the forward
// pass, so DBNet trained at 10⁴ times its rate runs on with a loss of 10¹⁴,
// finite at every step, and "passed" would be a lie an engineer would never
// tell. A finite loss above monitors.loss_explosion_factor times its run's
// first step's loss (1000 by default: three orders of magnitude, which no
// schedule or hard batch explains) fails the run as diverged, class
// `loss_exploded`, at the first step above. Judged by the supervisor from
// step_end, so every worker that reports its loss gets it, and before the
// other judgements: a run that diverged is not also "not learning". A run
// whose loss exploded and later became non-finite is the same divergence,
// seen first at the explosion: so a prefix of the run and the whole run name
// the same class and step (what `bisect steps` compares).
void judge_loss_explosion(const scenario::Scenario& s, TrialAnalysis& a) {
  const double factor = s.monitors.loss_explosion_factor;
  if (!(factor > 0)) return;
  // A non-finite finding stands unless the loss exploded at an earlier step
  // of its run: then the explosion is where the divergence shows first.
  const bool nonfinite = a.outcome == scenario::Outcome::kDiverged;
  std::map<int64_t, const StepRecord*> first;
  for (const auto& st : a.steps) {
    const auto [it, inserted] = first.emplace(st.run, &st);
    const StepRecord& f0 = *it->second;
    if (inserted || !std::isfinite(st.loss) || !std::isfinite(f0.loss) || !(f0.loss > 0)) continue;
    if (!(st.loss > factor * f0.loss)) continue;
    Failure& f = a.failure;
    if (nonfinite && (f.run.value_or(st.run) != st.run || !f.step || *f.step <= st.step)) return;
    Failure exploded;
    exploded.klass = kLossExploded;
    exploded.step = st.step;
    exploded.run = st.run;
    const std::string times = fixed(st.loss / f0.loss, 0) + "×";
    exploded.message = "the loss exploded at step " + std::to_string(st.step) + ": " + significant(st.loss) + ", " +
                       times + " its first step's " + significant(f0.loss) +
                       (nonfinite ? " (finite there; non-finite from step " + std::to_string(*f.step) + ")"
                                  : std::string(" (finite: diverged without a NaN)"));
    exploded.evidence.push_back("loss " + significant(f0.loss) + " at step " + std::to_string(f0.step) + " → " +
                                significant(st.loss) + " at step " + std::to_string(st.step) + " (run " +
                                std::to_string(st.run) + "): " + times + ", above " +
                                DBH_SCENARIO_KEY(monitors.loss_explosion_factor) + " " + significant(factor));
    exploded.evidence.push_back("the learning rate at that step: " + significant(st.lr) +
                                (st.grad_norm ? ", the gradient norm " + significant(*st.grad_norm) : std::string()));
    if (nonfinite) exploded.evidence.push_back("then, at step " + std::to_string(*f.step) + ": " + f.message);
    exploded.secondary = f.secondary;
    f = std::move(exploded);
    a.outcome = scenario::Outcome::kDiverged;
    return;
  }
}

void judge_passed_run(const ClassifyOptions& opts, const scenario::Scenario& s, TrialAnalysis& a) {
  judge_loss_explosion(s, a);
  if (a.outcome == scenario::Outcome::kPassed) judge_leaks(opts, a);
  if (a.outcome == scenario::Outcome::kPassed) judge_evaluation(a, s);
  if (a.outcome == scenario::Outcome::kPassed) judge_frozen_updates(a, s);
  if (a.outcome == scenario::Outcome::kPassed) judge_learning(a, s);
}

}  // namespace dbh::harness::supervisor

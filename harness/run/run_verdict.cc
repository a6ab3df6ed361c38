#include "harness/run/run_verdict.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

#include "harness/supervisor/judge.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::run {

DeterminismCheck compare_processes(const std::vector<TrialRecord>& trials) {
  DeterminismCheck d;
  d.checked = true;
  d.processes = static_cast<int64_t>(trials.size());
  int passed = 0;
  for (const auto& t : trials) passed += t.analysis.outcome == scenario::Outcome::kPassed ? 1 : 0;
  d.pass_rate = static_cast<double>(passed) / static_cast<double>(trials.size());
  const auto& ref = trials.front().analysis;
  for (size_t k = 1; k < trials.size(); ++k) {
    const auto& other = trials[k].analysis;
    const size_t n = std::min(ref.steps.size(), other.steps.size());
    for (size_t i = 0; i < n; ++i) {
      // Every micro-batch's loss and the gradient norm: with accumulation a
      // divergence in an early micro-batch or in the backward pass shows at
      // this step, not only through the next step's loss.
      if (ref.steps[i].loss_bits != other.steps[i].loss_bits ||
          ref.steps[i].micro_loss_bits != other.steps[i].micro_loss_bits ||
          ref.steps[i].grad_norm_bits != other.steps[i].grad_norm_bits) {
        d.identical = false;
        if (!d.first_divergent_step || ref.steps[i].step < *d.first_divergent_step) {
          d.first_divergent_step = ref.steps[i].step;
          std::ostringstream s;
          const auto& a = ref.steps[i];
          const auto& b = other.steps[i];
          s << "first divergence at step " << a.step << ": ";
          size_t micro = 0;
          while (micro < std::min(a.micro_loss_bits.size(), b.micro_loss_bits.size()) &&
                 a.micro_loss_bits[micro] == b.micro_loss_bits[micro]) {
            ++micro;
          }
          if (a.loss_bits != b.loss_bits || a.micro_loss_bits != b.micro_loss_bits) {
            s << "total loss " << std::setprecision(9) << a.loss << " (process 1) vs " << b.loss << " (process "
              << k + 1 << ")";
            if (a.micro_loss_bits.size() > 1) s << ", first in micro-batch " << micro;
          } else {
            s << "the losses agree but the gradient norm differs, " << std::setprecision(9) << a.grad_norm.value_or(0)
              << " (process 1) vs " << b.grad_norm.value_or(0) << " (process " << k + 1 << "): the backward pass diverged";
          }
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

void decide_run(RunReport& r, int64_t processes, int stopped) {
  if (r.trials.empty()) throw std::logic_error("decide_run: expected the main trial, got no trials");
  const size_t process_count = std::min(static_cast<size_t>(std::max<int64_t>(processes, 1)), r.trials.size());
  const auto& main = r.trials.front().analysis;
  r.outcome = main.outcome;
  r.failure = main.failure;
  // Note [Real differences measure the noise]: processes that compute
  // differently on purpose (monitors.numerics_variant, or a synthetic
  // monitors.numerics_jitter) measure the noise; they are not compared for
  // bit-identity.
  const auto& m = r.scenario.monitors;
  const bool varied = m.numerics && (m.numerics_jitter > 0 || m.numerics_variant != scenario::NumericsVariant::kAsIs);
  if (process_count > 1 && stopped == 0 && !varied) {
    const std::vector<TrialRecord> procs(r.trials.begin(), r.trials.begin() + static_cast<std::ptrdiff_t>(process_count));
    r.determinism = compare_processes(procs);
    if (!r.determinism.identical && r.outcome == scenario::Outcome::kPassed) {
      r.outcome = scenario::Outcome::kNondeterministic;
      r.failure.klass = "nondeterminism";
      r.failure.step = r.determinism.first_divergent_step;
      r.failure.message = r.determinism.detail;
      r.failure.evidence.push_back(r.determinism.detail);
    }
  }
  const scenario::Scenario& s = r.scenario;
  if (!s.controls.empty() && stopped == 0 && r.trials.size() >= process_count + s.controls.size()) {
    std::vector<scenario::Outcome> controls;
    for (size_t c = 0; c < s.controls.size(); ++c) controls.push_back(r.trials[process_count + c].analysis.outcome);
    const std::string data = to_string(s.data.source) + (s.data.path.empty() ? "" : " " + s.data.path);
    const supervisor::ControlsAnswer answer = supervisor::controls_answer(r.outcome, controls, s.controls, data);
    r.data_dependent = answer.data_dependent;
    r.data_dependent_reason = answer.reason;
    if (!answer.evidence.empty()) r.failure.evidence.push_back(answer.evidence);
  }
  // Expectation (Note [One judge]): the main trial's evidence with the run's
  // outcome and failure, the processes' comparison and the controls' answer.
  supervisor::Evidence evidence = supervisor::evidence_of(main);
  evidence.outcome = r.outcome;
  evidence.failure_class = r.failure.klass;
  evidence.failure_step = r.failure.step;
  evidence.failure_module = r.failure.module;
  if (r.determinism.checked) evidence.identical = r.determinism.identical;
  evidence.data_dependent = r.data_dependent;
  if (stopped != 0) evidence.interrupted_by = supervisor::signal_name(stopped);
  const supervisor::Judgement judgement = supervisor::judge(s.expect, evidence);
  r.expectation_met = judgement.met();
  r.expectation_why = judgement.why;
  if (stopped != 0) {
    // Stopped by a signal: what ran is written, but it is not a result.
    r.outcome = scenario::Outcome::kUnresolved;
    r.failure = supervisor::Failure{};
    r.failure.message = "interrupted by " + supervisor::signal_name(stopped) + " before the run finished (" +
                        std::to_string(r.trials.size()) + " trial(s) started)";
    r.failure.evidence.push_back(r.failure.message);
  }
}

}  // namespace dbh::harness::run

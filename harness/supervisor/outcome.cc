#include "harness/supervisor/outcome.h"

#include <sstream>

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "harness/common/error.h"
#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/event_digest.h"
#include "harness/supervisor/passed_run.h"
#include "harness/supervisor/worker_contract.h"

namespace dbh::harness::supervisor {
namespace fs = std::filesystem;
using internal::bounded_json;
using internal::EventDigest;
using internal::kMaxQuotedBytes;
using internal::kMaxQuotedItems;
using internal::kMaxScheduleRuns;
using internal::quoted;

bool is_failure(scenario::Outcome o) { return o != scenario::Outcome::kPassed && o != scenario::Outcome::kSkipped; }

bool is_memory_exhaustion(const std::string& klass) {
  return klass == "cuda_oom" || klass == "host_oom" || klass == "cudnn_no_engine";
}

bool is_divergence(const std::string& klass) {
  return klass == "nonfinite_activation" || klass == "nonfinite_gradient" || klass == "nonfinite_loss" ||
         klass == kLossExploded;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGBUS: return "SIGBUS";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "signal " + std::to_string(sig);
  }
}

namespace {

std::string class_for_health_kind(const std::string& kind) {
  if (kind == "input") return "nonfinite_input";
  if (kind == "label") return "nonfinite_label";
  if (kind == "activation") return "nonfinite_activation";
  if (kind == "gradient") return "nonfinite_gradient";
  return "nonfinite_loss";
}

}  // namespace


namespace {

// The threads of a stack dump (gdb's "Thread N …" or eu-stack's "TID N:"
// blocks) that run dbh code, or the first one; at most `max_lines` lines.
std::string stacks_excerpt(const std::string& text, size_t max_lines) {
  std::vector<std::string> blocks;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Thread ", 0) == 0 || line.rfind("TID ", 0) == 0) blocks.emplace_back();
    if (!blocks.empty() && !line.empty()) blocks.back() += line + "\n";
  }
  std::string out;
  for (const auto& b : blocks) {
    if (b.find("dbh::") != std::string::npos) out += b;
  }
  if (out.empty() && !blocks.empty()) out = blocks.front();
  std::istringstream lines(out);
  std::string cut;
  size_t n = 0;
  for (std::string line; std::getline(lines, line) && n < max_lines; ++n) cut += line + "\n";
  return cut;
}

}  // namespace

namespace {

// The step a process died in, from its step_begin without a step_end.
void mark_crash_step(const EventDigest& d, Failure& f) {
  f.step = d.open_step;
  f.run = d.open_run;
  if (d.open_step) {
    f.evidence.push_back("step_begin for step " + std::to_string(*d.open_step) +
                         " without step_end: the process died during that step");
  }
}

// A trial that says nothing about the training: not spawned, not runnable
// here, or ended by a failure of dbh's own. True when `a` is decided.
bool settle_without_training(const TrialResult& r, const scenario::Scenario& s, const EventDigest& d, TrialAnalysis& a) {
  Failure& f = a.failure;
  if (!r.spawn_error.empty()) {
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = r.spawn_error;
    return true;
  }
  const bool ended_by_itself = r.term_signal == 0 && !r.timed_out && !r.hung;
  // What this machine lacks is said before training: a worker that trained
  // (a step ended, a monitor found something) and then says "unavailable"
  // does not turn its failure into a skip.
  const bool trained = a.steps_completed > 0 || d.primary_health || d.silent_health;
  if (d.unavailable && ended_by_itself && !trained) {
    mark_not_run_here(a, s, quoted(proto::error_from(*d.unavailable).message));
    return true;
  }
  if (d.harness_error && ended_by_itself) {
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = "the worker reported a harness error: " + quoted(proto::error_from(*d.harness_error).message);
    f.evidence.push_back(f.message);
    return true;
  }
  if (!s.worker.external() && !a.done_seen && ended_by_itself && r.exit_code == kInternalErrorExit) {
    // Note [A bug in dbh is not a finding]: dbh's own worker ended on an
    // internal error (a bug in dbh, as when it read the CUDA allocator before
    // its first tensor): the trial says nothing about the training, so no
    // verdict, bisection or diagnosis may count it as a failure of it.
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = "dbh's worker failed inside dbh (exit " + std::to_string(r.exit_code) +
                "), not in the training: " + last_line(r.stderr_tail) + "; please report it with this trial's stderr.log";
    f.evidence.push_back(f.message);
    mark_crash_step(d, f);
    return true;
  }
  return false;
}

// The finite checks' first primary finding: a divergence.
void judge_nonfinite(const proto::Event& event, TrialAnalysis& a) {
  Failure& f = a.failure;
  a.outcome = scenario::Outcome::kDiverged;
  a.primary_health = bounded_json(event.body);
  auto h = proto::health_from(event);
  h.kind = quoted_name(h.kind);
  h.site = quoted_name(h.site);
  f.klass = class_for_health_kind(h.kind);
  f.step = h.step;
  f.run = h.run;
  f.module = quoted_name(h.module.value_or(""));
  f.message = "non-finite " + h.kind + " (" + h.site + ") at step " + std::to_string(*f.step);
  f.evidence.push_back("the " + one_line(quoted_name(h.mode.value_or("cheap"))) + " finite checks first flagged " +
                       one_line(h.kind) + " " + markdown_code(h.site) +
                       (f.module.empty() ? "" : " in module " + markdown_code(f.module)) + " at step " +
                       std::to_string(*f.step));
  if (const auto skips = h.extra.find("loss_scaler_skips"); skips != h.extra.end() && skips->is_number_integer()) {
    // Note [Loss-scaler skips]: the finding is a streak, not one step.
    const std::string n = std::to_string(skips->get<int64_t>());
    f.message = "non-finite " + h.kind + " (" + h.site + ") from step " + std::to_string(*f.step) +
                ": the fp16 loss scaler skipped " + n + " steps in a row";
    f.evidence.push_back("the loss scaler skipped " + n + " steps in a row from step " + std::to_string(*f.step) +
                         ", lowering its scale each time: the gradients stay non-finite at every scale (a few "
                         "skipped steps are its normal work)");
  }
  if (!h.nonfinite_sites.is_null()) {
    f.evidence.push_back("non-finite sites that step (consequences included): " +
                         truncate_utf8(bounded_json(h.nonfinite_sites).dump(), kMaxQuotedBytes));
  }
}

// Finite but unable to learn: the silent-failure monitors' finding.
void judge_silent_finding(const proto::Event& event, TrialAnalysis& a) {
  Failure& f = a.failure;
  a.outcome = scenario::Outcome::kFailed;
  a.primary_health = bounded_json(event.body);
  const auto h = proto::health_from(event);
  f.klass = quoted_name(h.check);
  f.step = h.step;
  f.run = h.run;
  f.module = quoted_name(h.module.value_or(""));
  f.message = quoted(h.message.value_or(""));
  for (const auto& why : h.evidence.value_or(std::vector<std::string>{})) {
    if (f.evidence.size() < kMaxQuotedItems) f.evidence.push_back(quoted(why));
  }
  if (f.evidence.empty()) f.evidence.push_back(f.message);
}

// The first error event, classified by the knowledge base; later errors are
// kept as secondary.
void judge_error(const EventDigest& d, const kb::KnowledgeBase& kb, TrialAnalysis& a) {
  Failure& f = a.failure;
  a.outcome = scenario::Outcome::kFailed;
  const auto e = proto::error_from(*d.first_error);
  f.message = quoted(e.message);
  f.step = e.step.value_or(-1) >= 0 ? e.step : std::nullopt;
  f.run = e.run.value_or(0);
  f.module = quoted_name(e.module.value_or(""));
  // Note [Memory a budget refused]: under a host budget applied as
  // RLIMIT_DATA, a library that reports an allocation the cap refused without
  // saying so (oneDNN, the dynamic loader) is read as host memory exhausted;
  // and memory exhausted while reading a sample is not the sample's defect.
  const bool under_host_budget = a.budget.is_object() && field_or(a.budget, "applied", true) &&
                                 field_or(a.budget, "method", std::string()) == "RLIMIT_DATA";
  const kb::FailureClass* const matched = kb.match_message(f.message, under_host_budget);
  const kb::FailureClass* c = matched;
  const bool exhausted = c != nullptr && is_memory_exhaustion(c->id);
  if (e.kind == proto::error_kind::kData && !exhausted && (c == nullptr || c->id != "data_invalid")) {
    c = kb.find("data_invalid");
  }
  f.klass = c != nullptr ? c->id : (e.kind == proto::error_kind::kData ? "data_invalid" : "exception");
  f.evidence.push_back("error event: \"" + f.message + "\"" +
                       (f.step ? " at step " + std::to_string(*f.step) : std::string(" before training")) +
                       (f.module.empty() ? "" : ", last module entered `" + f.module + "`"));
  if (c != nullptr && c == matched) {
    const bool own = kb.match_message(f.message) == c;
    f.evidence.push_back("message matches the knowledge-base signature of `" + c->id + "`" +
                         (own ? "" : " that holds under a host memory budget (RLIMIT_DATA)"));
  }
  f.secondary.insert(f.secondary.end(), d.other_errors.begin(), d.other_errors.end());
}

// Note [The schedule asked for]: a worker that says `done passed` is
// believed only for the training the scenario asked for. Every run of
// repeat.in_process trains the steps start … train.last_step() − 1, each
// once and in order; start is 0, or with train.resume_from the step the
// resume continues at (the checkpoint's name says it as dbh names
// checkpoints; a worker's own format says it in its `checkpoint` event).
// A pass of 0 of 4 steps, or of 7, is no answer, nor one that resumed at or
// past the schedule's end (no step trained, from any worker): "" when the
// steps are the schedule's, else why not.
std::string schedule_mismatch(const TrialAnalysis& a, const scenario::Scenario& s, const EventDigest& d) {
  if (s.train.mode == scenario::TrainMode::kOps) return "";
  int64_t start = 0;
  if (!s.train.resume_from.empty()) {
    const auto named = proto::parse_checkpoint_file_name(fs::path(s.train.resume_from).filename().string());
    if (named) {
      start = named->step;
    } else if (d.resumed_at) {
      start = *d.resumed_at;
    } else if (!d.run_steps.empty()) {
      start = d.run_steps.begin()->second.first;
    }
  }
  const int64_t last = s.train.last_step();
  const int64_t want = std::max<int64_t>(0, last - start);
  if (want == 0) {
    // Resumed at or past the schedule's end: nothing was trained, whoever
    // wrote the checkpoint.
    return "the worker reported `done passed` after resuming at step " + std::to_string(start) +
           ", at or past the schedule's last step " + std::to_string(last - 1) +
           ": a pass of no trained step is no answer";
  }
  for (int64_t run = 0; run < s.repeat.in_process; ++run) {
    const auto it = d.run_steps.find(run);
    const EventDigest::RunSteps steps = it == d.run_steps.end() ? EventDigest::RunSteps{} : it->second;
    if (steps.count == want && (want == 0 || (steps.in_order && steps.first == start))) continue;
    std::string got = std::to_string(steps.count) + " step(s)";
    if (steps.count > 0) got += " (" + std::to_string(steps.first) + " … " + std::to_string(steps.last) + ")";
    return "the worker reported `done passed` for run " + std::to_string(run) + " after " + got +
           ", but the schedule asked for " + std::to_string(want) + " (steps " + std::to_string(start) + " … " +
           std::to_string(last - 1) + "): a pass of another training is no answer";
  }
  if (d.too_many_runs) {
    return "the worker reported steps of more than " + std::to_string(kMaxScheduleRuns) +
           " runs, but the scenario asked for " + std::to_string(s.repeat.in_process) + " run(s)";
  }
  for (const auto& [run, steps] : d.run_steps) {
    if (run < 0 || run >= s.repeat.in_process) {
      return "the worker reported steps of run " + std::to_string(run) + ", but the scenario asked for " +
             std::to_string(s.repeat.in_process) + " run(s)";
    }
  }
  // Validations asked of an external worker (it validates on its own
  // cadence, Note [A worker's own validation metrics]): none reported is a
  // run whose validation was never checked, not a pass of it.
  if (s.worker.external() && s.train.eval_every > 0 && s.train.eval_every <= want && a.evals.empty()) {
    return std::string(DBH_SCENARIO_KEY(train.eval_every)) + " " + std::to_string(s.train.eval_every) +
           " asked for a validation every " + std::to_string(s.train.eval_every) + " step(s), but the worker "
           "reported none (no `eval` event): map train.eval_every to the key of your training's validation "
           "cadence in worker.keys, and report its metrics (dbh.report_validation, or your LightningModule's val… "
           "metrics)";
  }
  return "";
}

// Note [A pass names its scenario]: `done passed` is believed only from a
// worker that said `hello` with the hash of the scenario dbh passed it
// (DBH_SCENARIO_HASH, the resolved scenario's hash): a stream without a
// hello, or a hello of another scenario, is no answer. "" when it holds.
std::string identity_mismatch(const TrialAnalysis& a, const scenario::Scenario& s, const EventDigest& d,
                              const std::vector<std::string>& bad_lines) {
  if (!d.hello_seen) {
    return "the worker reported `done passed` without a `hello` event: a pass of a training that never said which "
           "scenario it ran is no answer" + proto::bad_lines_note(bad_lines);
  }
  const std::string want = scenario::scenario_hash(s);
  if (a.scenario_hash != want) {
    return "the worker's `hello` names scenario hash " + (a.scenario_hash.empty() ? std::string("(none)") : a.scenario_hash) +
           ", but dbh passed it " + want + " (DBH_SCENARIO_HASH): a pass of another scenario is no answer";
  }
  return "";
}

// How the trial ended, from the strongest evidence down: the supervisor's
// kills, the monitors' findings, error events, the `done` event, the stream
// itself; a trial that passed is then judged for leaks, evaluation and
// learning.
void judge_ending(const TrialResult& r, const scenario::Scenario& s, const kb::KnowledgeBase& kb, const ClassifyOptions& opts,
                  const EventDigest& d, TrialAnalysis& a) {
  Failure& f = a.failure;
  if (r.timed_out) {
    a.outcome = scenario::Outcome::kTimedOut;
    f.klass = "hang";
    f.message = "killed at the wall-clock deadline of " + std::to_string(s.limits.deadline_s) + " s";
    mark_crash_step(d, f);
  } else if (r.hung) {
    a.outcome = scenario::Outcome::kHung;
    f.klass = "hang";
    f.message = "no event for " + std::to_string(static_cast<int>(s.limits.silence_s)) +
                " s: killed by the silence watchdog";
    mark_crash_step(d, f);
  } else if (r.term_signal != 0) {
    a.outcome = scenario::Outcome::kCrashed;
    const bool oom_kill = r.term_signal == SIGKILL && s.hardware.memory_budget > 0;
    f.klass = oom_kill ? "host_oom" : "crash_signal";
    f.message = "worker killed by " + signal_name(r.term_signal);
    f.evidence.push_back("the process ended with " + signal_name(r.term_signal) + " and no `done` event");
    mark_crash_step(d, f);
  } else if (d.primary_health) {
    judge_nonfinite(*d.primary_health, a);
    judge_loss_explosion(s, a);
  } else if (d.silent_health) {
    judge_silent_finding(*d.silent_health, a);
  } else if (d.first_error) {
    judge_error(d, kb, a);
  } else if (!a.done_seen) {
    a.outcome = r.exit_code == 0 ? scenario::Outcome::kUnresolved : scenario::Outcome::kFailed;
    f.klass = "premature_exit";
    f.message = "worker exited with status " + std::to_string(r.exit_code) + " without a `done` event";
    mark_crash_step(d, f);
  } else if (d.done_status == "diverged") {
    a.outcome = scenario::Outcome::kDiverged;
    f.klass = "nonfinite_loss";
    f.message = "the worker stopped a diverged run without a monitor finding";
    f.evidence.push_back("done status \"diverged\" without a primary health event");
  } else if (r.exit_code != 0 || (!d.done_status.empty() && d.done_status != "passed")) {
    a.outcome = scenario::Outcome::kFailed;
    f.klass = "premature_exit";
    f.message = "worker finished with status \"" + d.done_status + "\" and exit code " +
                std::to_string(r.exit_code) + " but reported no error";
    f.evidence.push_back(f.message);
  } else if (!r.bad_lines.empty()) {
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = "the event stream had " + std::to_string(r.bad_lines.size()) +
                " undecodable line(s): " + r.bad_lines.front();
  } else if (const std::string who = identity_mismatch(a, s, d, r.bad_lines); !who.empty()) {
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = who;
    f.evidence.push_back(who);
  } else if (const std::string off = schedule_mismatch(a, s, d); !off.empty()) {
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = off;
    f.evidence.push_back(off);
  } else if (const std::string other = keys_not_applied(s, d.config); !other.empty()) {
    // Note [Keys a worker confirms]: a pass of another configuration.
    a.outcome = scenario::Outcome::kUnresolved;
    f.message = other;
    f.evidence.push_back(other);
  } else {
    a.outcome = scenario::Outcome::kPassed;
    judge_passed_run(opts, s, a);
  }
}

}  // namespace

TrialAnalysis classify(const TrialResult& r, const EventDigester& events, const scenario::Scenario& s,
                       const kb::KnowledgeBase& kb, const ClassifyOptions& opts) {
  TrialAnalysis a = events.records();
  const EventDigest& d = events.digest();
  a.samples_read.assign(d.samples_read.begin(), d.samples_read.end());
  a.term_signal = r.term_signal;
  a.exit_code = r.exit_code;
  a.seconds = r.seconds;
  a.forked = r.forked;
  a.cold_reason = r.cold_reason;
  if (!r.stacks_tool.empty()) {
    a.stacks_tool = r.stacks_tool;
    a.stacks_excerpt = stacks_excerpt(r.stacks, 40);
  }
  for (size_t i = 0; i < s.faults.size(); ++i) {
    a.faults.push_back(FaultRecord{s.faults[i].name, static_cast<int64_t>(i), false, {}, "", std::nullopt, ""});
  }
  // Fault records only fill the fault list; attribution never reads them
  // (ClassifyOptions::withhold_fault_records tests exactly that).
  for (const auto& fired : d.firings) {
    if (opts.withhold_fault_records) break;
    if (fired.index < 0 || fired.index >= static_cast<int64_t>(a.faults.size())) continue;
    FaultRecord& f = a.faults[static_cast<size_t>(fired.index)];
    f.fired = true;
    f.steps.push_back(fired.step);
    if (!fired.module.empty()) f.module = fired.module;
    if (fired.real) {
      f.real = fired.real;
      f.hardware_error = fired.hardware_error;
    }
  }
  // Note [A worker's logs are bounded]: a log that was cut says so.
  for (const auto& [name, cut] : {std::pair<const char*, int64_t>{"stdout", r.stdout_cut_bytes},
                                  std::pair<const char*, int64_t>{"stderr", r.stderr_cut_bytes}}) {
    if (cut > 0) {
      a.warnings.push_back("the worker wrote " + scenario::format_bytes(cut) + " more to " + name + " than " + name +
                           ".log keeps (its first " + scenario::format_bytes(static_cast<int64_t>(kLogHeadBytes)) +
                           " and its last " + scenario::format_bytes(static_cast<int64_t>(kLogTailBytes)) +
                           "; a line in the log marks the cut)");
    }
  }
  // Note [dbh's files in a trial]: a worker's file in the way of dbh's.
  for (const auto& name : r.displaced_files) {
    a.warnings.push_back("the worker wrote a file named " + name + " into its trial folder, where dbh keeps its own " +
                         name + ": the worker's is kept as worker-" + name);
  }
  if (!r.folder_replaced.empty()) {
    a.warnings.push_back("the worker left " + r.folder_replaced + " in place of its trial folder: dbh removed it "
                         "without following it and wrote its logs and journal into a fresh folder");
  }
  if (settle_without_training(r, s, d, a)) return a;
  judge_ending(r, s, kb, opts, d, a);
  // Note [A budget that was not applied]: a run asked to fit a memory budget
  // that its worker could not apply (a budget below what the CUDA context
  // alone takes, say) trained without it; its pass says nothing about the
  // budget, so it is no answer, never "fits". A failure stays what it is.
  if (a.outcome == scenario::Outcome::kPassed && s.hardware.memory_budget > 0 && a.budget.is_object() &&
      !field_or(a.budget, "applied", true)) {
    a.outcome = scenario::Outcome::kUnresolved;
    a.failure.message = "the memory budget of " + scenario::format_bytes(s.hardware.memory_budget) +
                        " was not applied, so the run did not test it: " +
                        field_or(a.budget, "detail", std::string("the worker gave no reason"));
    a.failure.evidence.push_back(a.failure.message);
  }
  return a;
}


std::string injected_faults(const TrialAnalysis& a) {
  std::string out;
  for (const auto& f : a.faults) {
    if (!f.fired) continue;
    if (!out.empty()) out += "; ";
    out += "the fault " + f.name;
    // A fault on the dataset or the model acts before the first step (-1).
    if (!f.steps.empty()) {
      out += f.steps.front() < 0 ? std::string(" before training") : " at step " + std::to_string(f.steps.front());
    }
    if (!f.module.empty()) out += " in " + f.module;
    if (f.real) {
      out += *f.real ? " (real: raised by the GPU" + (f.hardware_error.empty() ? "" : ", " + f.hardware_error) + ")"
                     : " (emulated: dbh raised the error's text; no GPU kernel or allocator failed)";
    }
  }
  return out;
}

void mark_not_run_here(TrialAnalysis& a, const scenario::Scenario& s, const std::string& why) {
  // Not tried: this machine lacks what the scenario needs. Neither a pass
  // nor a failure of the training (git bisect's "cannot test").
  a.outcome = scenario::Outcome::kSkipped;
  Failure& f = a.failure;
  f.message = why;
  // What a user can do about it here, with the override that does it.
  if (s.hardware.device != "cpu") {
    f.message += "; to run it on this machine's CPU instead, add " +
                 scenario::override_text(DBH_SCENARIO_KEY(hardware.device), "cpu") +
                 (s.train.precision != model::Precision::kFp32 && !s.worker.external()
                      ? " " + scenario::override_text(DBH_SCENARIO_KEY(train.precision), "fp32") + " (AMP runs on CUDA only)"
                      : std::string());
  }
  f.evidence.push_back(f.message);
}

std::vector<int64_t> scaler_skipped_steps(const TrialAnalysis& a) {
  std::vector<int64_t> out;
  for (const auto& st : a.steps) {
    if (st.run == 0 && st.skipped) out.push_back(st.step);
  }
  return out;
}

std::string scaler_skips_text(const TrialAnalysis& a) {
  const auto steps = scaler_skipped_steps(a);
  if (steps.empty()) return "";
  std::string list;
  for (size_t i = 0; i < steps.size() && i < 8; ++i) list += (i > 0 ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > 8) list += ", …";
  return "skipped " + std::to_string(steps.size()) + " of " +
         std::to_string(a.steps_completed) + " optimizer steps (step" + (steps.size() > 1 ? "s " : " ") + list +
         ") because their gradients overflowed, lowering its scale each time; a few such steps are its normal "
         "work, " + std::to_string(proto::kScalerSkipLimit) + " in a row a divergence";
}

std::string peak_memory_kind(const TrialAnalysis& a) {
  return a.cuda_memory_seen ? "the larger of the CUDA allocator peak and host RSS" : "host RSS";
}

bool emulated_gpu_fault(const TrialAnalysis& a) {
  return std::any_of(a.faults.begin(), a.faults.end(),
                     [](const FaultRecord& f) { return f.fired && f.real && !*f.real; });
}

}  // namespace dbh::harness::supervisor

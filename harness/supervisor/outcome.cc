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
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/schema.h"

namespace dbh::harness {
namespace fs = std::filesystem;

bool is_failure(Outcome o) { return o != Outcome::kPassed && o != Outcome::kSkipped; }

bool is_memory_exhaustion(const std::string& klass) {
  return klass == "cuda_oom" || klass == "host_oom" || klass == "cudnn_no_engine";
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

// Note [A worker's stream is bounded]: every string the analysis quotes
// from the worker (messages, modules, warnings, evidence) is cut, and lists
// of them are bounded, so no report, terminal line or annotation carries a
// worker's megabytes.
constexpr size_t kMaxQuotedBytes = 2000;
constexpr size_t kMaxQuotedNameBytes = 200;
constexpr size_t kMaxQuotedItems = 100;
std::string quoted(const std::string& s, size_t max = kMaxQuotedBytes) { return truncate_utf8(s, max); }
// A name the worker chose (a module, a site, a kind): one line, cut.
std::string quoted_name(const std::string& s) { return one_line(truncate_utf8(s, kMaxQuotedNameBytes)); }

// A worker's JSON as kept for the reports (a health event's body): every
// string cut to kMaxQuotedNameBytes, at most kMaxQuotedItems entries per
// object or list, at most four levels deep.
nlohmann::json bounded_json(const nlohmann::json& j, int depth = 0) {
  if (j.is_string()) return truncate_utf8(j.get<std::string>(), kMaxQuotedNameBytes);
  if (depth >= 4 && (j.is_object() || j.is_array())) return nullptr;
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end() && out.size() < kMaxQuotedItems; ++it) {
      out[truncate_utf8(it.key(), kMaxQuotedNameBytes)] = bounded_json(*it, depth + 1);
    }
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < j.size() && i < kMaxQuotedItems; ++i) out.push_back(bounded_json(j[i], depth + 1));
    return out;
  }
  return j;
}

std::string class_for_health_kind(const std::string& kind) {
  if (kind == "input") return "nonfinite_input";
  if (kind == "label") return "nonfinite_label";
  if (kind == "activation") return "nonfinite_activation";
  if (kind == "gradient") return "nonfinite_gradient";
  return "nonfinite_loss";
}

// The checks of the silent-failure monitors, each also its failure class.
bool is_silent_check(const std::string& check) {
  return check == "input_denormalised" || check == "labels_degenerate" || check == "predictions_collapsed";
}

std::string decimals(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The window monitors.learning_window resolves to for `s`; 0: not judged.
int64_t learning_window(const Scenario& s) {
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

void judge_frozen_updates(TrialAnalysis& a, const Scenario& s) {
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
    a.outcome = Outcome::kFailed;
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
void judge_learning(TrialAnalysis& a, const Scenario& s) {
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
    const std::string pct = (change < 0 ? "−" : "+") + decimals(std::fabs(100 * change), 1) + " %";
    const bool noisy = noise.required > s.monitors.learning_min_drop;
    const std::string expected =
        "expected at least −" + decimals(100 * noise.required, 1) + " %" +
        (noisy ? ", twice the standard error of a drop with a step-to-step spread of ±" +
                     decimals(100 * noise.spread / first, 1) + " %"
               : "");
    Failure& f = a.failure;
    a.outcome = Outcome::kFailed;
    f.klass = "not_learning";
    f.step = s1;
    f.run = run;
    f.message = "loss not decreasing over steps " + range + ": " + decimals(first, 3) + " → " + decimals(second, 3) +
                " (" + pct + ", " + expected + ")";
    f.evidence.push_back("loss " + decimals(first, 3) + " → " + decimals(second, 3) + " over steps " + range + " (" +
                         pct + ", " + expected + "): the mean of steps " + std::to_string(sh) + "–" +
                         std::to_string(s1) + " against the mean of steps " + std::to_string(s0) + "–" +
                         std::to_string(steps[half - 1]->step));
    f.evidence.push_back((grad_measured ? "gradients were not zero (mean norm " + decimals(grad, 4) + ") and t"
                                        : std::string("t")) +
                         "he scheduled learning rate went from " + decimals(steps.front()->lr, 6) + " to " +
                         decimals(steps[end - 1]->lr, 6) + ": the updates do not reduce the loss");
    f.evidence.push_back("window: " + std::string(DBH_SCENARIO_KEY(monitors.learning_window)) + " " +
                         (s.monitors.learning_window < 0 ? "auto (min(50, max_steps/2) = " + std::to_string(w) + ")"
                                                         : std::to_string(w)) +
                         " steps, margin " + DBH_SCENARIO_KEY(monitors.learning_min_drop) + " " +
                         decimals(s.monitors.learning_min_drop, 3) + ", step-to-step spread ±" +
                         decimals(noise.spread, 3) + " (" + decimals(100 * noise.spread / first, 1) +
                         " % of the first half's mean): a drop counts when it exceeds " +
                         decimals(100 * noise.required, 1) + " %");
    return;
  }
}
}  // namespace

namespace {
void judge_evaluation(TrialAnalysis& a, const Scenario& s);
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

// The events a verdict reads, found while the trial's records are filled.
struct EventDigest {
  const Event* first_error = nullptr;    // the first error that is not a divergence
  const Event* harness_error = nullptr;  // the worker's own failure
  const Event* unavailable = nullptr;    // the first error of kind unavailable
  std::vector<const Event*> errors;      // every error but harness errors
  const Event* primary_health = nullptr;  // the first primary finite finding
  const Event* silent_health = nullptr;   // the first primary silent-failure finding
  std::string done_status;
  std::optional<int64_t> open_step, open_run;  // a step_begin without its step_end
  std::set<int64_t> samples_read;               // `sample_read` indices, each once
  std::optional<int64_t> resumed_at;            // the step a `checkpoint` event (resumed) says
};

// Bound on the metrics of one evaluation an external worker reports.
constexpr size_t kMaxOwnMetrics = 64;

EvalRecord eval_record(const proto::Eval& v) {
  EvalRecord ev;
  ev.run = v.run;
  ev.step = v.step;
  ev.precision = v.precision.value_or(0);
  ev.recall = v.recall.value_or(0);
  ev.hmean = v.hmean.value_or(0);
  ev.has_hmean = v.hmean.has_value();
  if (v.metrics.is_object()) {
    for (auto it = v.metrics.begin(); it != v.metrics.end() && ev.metrics.size() < kMaxOwnMetrics; ++it) {
      if (it.value().is_number()) ev.metrics.emplace_back(quoted_name(it.key()), it.value().get<double>());
    }
  }
  ev.gt = v.gt;
  ev.det = v.det;
  ev.matched = v.matched;
  ev.images = v.images;
  ev.prob_mean = v.prob_mean;
  ev.text_fraction = v.text_fraction;
  ev.seconds = v.seconds;
  ev.det_reference = v.det_reference.value_or(-1);
  return ev;
}

// A step's record; its memory raises the trial's peaks in `a`.
StepRecord step_record(const proto::StepEnd& end, TrialAnalysis& a) {
  StepRecord st;
  st.run = end.run;
  st.step = end.step;
  st.loss = end.loss;
  st.bce = end.bce;
  st.l1 = end.l1;
  st.dice = end.dice;
  st.lr = end.lr;
  st.grad_norm = end.grad_norm;
  st.seconds = end.seconds;
  st.loss_bits = end.loss_bits;
  st.grad_norm_bits = end.grad_norm_bits;
  st.micro_loss_bits = end.micro_loss_bits;
  st.skipped = end.skipped;
  st.loss_scale = end.loss_scale;
  if (end.memory.is_object()) {
    const auto& m = end.memory;
    st.rss_bytes = m.value("rss_bytes", int64_t{0});
    if (m.contains("cuda_peak_allocated_bytes")) {
      st.peak_bytes = m.value("cuda_peak_allocated_bytes", int64_t{0});
      a.cuda_memory_seen = true;
    }
    a.peak_memory_bytes = std::max(a.peak_memory_bytes, m.contains("cuda_peak_allocated_bytes")
                                                            ? st.peak_bytes
                                                            : m.value("peak_rss_bytes", int64_t{0}));
  }
  if (end.phases.is_object()) {
    st.phases = end.phases;
    if (st.peak_bytes == 0) {
      for (const auto& [phase, m] : st.phases.items()) {
        st.peak_bytes = std::max(st.peak_bytes, m.value("rss_bytes", int64_t{0}));
      }
      st.peak_bytes = std::max(st.peak_bytes, st.rss_bytes);
    }
  }
  // getrusage's high-water mark and /proc's current RSS are read at
  // different moments; the peak is at least every sample taken.
  a.peak_memory_bytes = std::max({a.peak_memory_bytes, st.peak_bytes, st.rss_bytes});
  a.max_step_peak_bytes = std::max(a.max_step_peak_bytes, st.peak_bytes);
  return st;
}

// Fault records only fill the fault list; attribution never reads them
// (ClassifyOptions::withhold_fault_records tests exactly that).
void record_fault(const proto::FaultFired& fired, TrialAnalysis& a) {
  if (fired.index < 0 || fired.index >= static_cast<int64_t>(a.faults.size())) return;
  auto& f = a.faults[static_cast<size_t>(fired.index)];
  f.fired = true;
  f.steps.push_back(fired.step);
  if (!fired.module.empty()) f.module = quoted_name(fired.module);
  const auto& d = fired.detail;
  if (d.is_object() && d.contains("real") && d["real"].is_boolean()) {
    f.real = d["real"].get<bool>();
    f.hardware_error = d.value("cuda_error", "");
  }
}

void record_error(const Event& e, TrialAnalysis& a, EventDigest& d) {
  const auto err = proto::error_from(e);
  if (err.kind == proto::error_kind::kHarness) {
    if (d.harness_error == nullptr) d.harness_error = &e;
    return;
  }
  if (err.kind == proto::error_kind::kUnavailable && d.unavailable == nullptr) d.unavailable = &e;
  d.errors.push_back(&e);
  if (d.first_error == nullptr && err.kind != proto::error_kind::kDiverged) {
    d.first_error = &e;
    if (!err.memory.is_null()) {
      a.memory_at_failure = {{"memory", err.memory},
                             {"phases", err.phases.is_null() ? nlohmann::json::object() : err.phases}};
    }
  }
}

// An external worker's `hello` environment as kept: at most 16 string
// values, names and values cut (the worker chose them, and any size).
nlohmann::json bounded_environment(const nlohmann::json& env) {
  nlohmann::json out = nlohmann::json::object();
  if (!env.is_object()) return out;
  for (auto it = env.begin(); it != env.end() && out.size() < 16; ++it) {
    if (it->is_string()) out[truncate_utf8(it.key(), 40)] = truncate_utf8(it->get<std::string>(), 200);
  }
  return out;
}

// Note [Samples as the loader reads them]: a `sample_read` joins the set of
// indices read (bounded); its name is kept cut; the first that raised is the
// failed sample.
void record_sample_read(const proto::SampleRead& r, TrialAnalysis& a, EventDigest& d) {
  if (r.index < 0 || (a.dataset_size && r.index >= *a.dataset_size)) return;
  if (d.samples_read.size() < kMaxSamplesRead) d.samples_read.insert(r.index);
  if (r.name && a.sample_names.size() < kMaxSamplesRead) {
    a.sample_names.emplace(r.index, truncate_utf8(*r.name, kMaxSampleNameBytes));
  }
  if (r.error && !a.failed_sample) {
    a.failed_sample = r.index;
    a.failed_sample_error = truncate_utf8(*r.error, kMaxSampleNameBytes * 2);
  }
}

void record_run_end(const proto::RunEnd& end, TrialAnalysis& a) {
  a.run_checksums.push_back(end.checksum);
  if (end.resources.is_object()) {
    const auto count = [&](const char* key) {
      const auto it = end.resources.find(key);
      return it != end.resources.end() && it->is_number_integer() ? it->get<int64_t>() : int64_t{-1};
    };
    a.run_end_open_files.push_back(count("open_files"));
    a.run_end_threads.push_back(count("threads"));
    a.run_end_children.push_back(count("children"));
  }
  if (!end.memory.is_object()) return;
  const auto& m = end.memory;
  a.run_end_rss.push_back(m.value("rss_bytes", int64_t{0}));
  if (m.contains("cuda_allocated_bytes")) {
    a.run_end_cuda_allocated.push_back(m.value("cuda_allocated_bytes", int64_t{0}));
    a.run_end_cuda_reserved.push_back(m.value("cuda_reserved_bytes", int64_t{0}));
  }
}

// Reads the trial's events in order: fills `a`'s records (steps, evaluations,
// runs, faults, memory, warnings) and returns what the verdict reads.
EventDigest read_events(const std::vector<Event>& events, const ClassifyOptions& opts, TrialAnalysis& a) {
  EventDigest d;
  for (const auto& e : events) {
    if (e.type == event::kHello) {
      auto hello = proto::hello_from(e);
      a.scenario_hash = hello.scenario_hash;
      a.worker = truncate_utf8(hello.worker.value_or(""), kMaxSampleNameBytes);
      a.worker_environment = bounded_environment(hello.environment);
    } else if (e.type == event::kWarning) {
      if (a.warnings.size() < kMaxQuotedItems) a.warnings.push_back(quoted(proto::warning_from(e).message));
    } else if (e.type == event::kEval) {
      a.evals.push_back(eval_record(proto::eval_from(e)));
    } else if (e.type == event::kEvalCheck) {
      const proto::EvalCheck check = proto::eval_check_from(e);
      a.evaluator_self_check = check.hmean;
      a.validation_words = check.words;
    } else if (e.type == event::kEvalOverlays) {
      const auto files = proto::overlays_from(e).files;
      a.eval_overlays.insert(a.eval_overlays.end(), files.begin(), files.end());
    } else if (e.type == event::kStepBegin) {
      const auto b = proto::step_begin_from(e);
      d.open_step = b.step;
      d.open_run = b.run;
    } else if (e.type == event::kStepEnd) {
      a.steps.push_back(step_record(proto::step_end_from(e), a));
      ++a.steps_completed;
      d.open_step.reset();
    } else if (e.type == event::kFaultFired) {
      if (!opts.withhold_fault_records) record_fault(proto::fault_fired_from(e), a);
    } else if (e.type == event::kCheckpoint) {
      const auto c = proto::checkpoint_from(e);
      if (c.resumed && !d.resumed_at) d.resumed_at = c.step;
    } else if (e.type == event::kMemorySnapshot) {
      a.memory_snapshot = proto::memory_snapshot_from(e).file;
    } else if (e.type == event::kOverlays) {
      a.overlays = proto::overlays_from(e).files;
    } else if (e.type == event::kMemoryBudget) {
      a.budget = e.body;
    } else if (e.type == event::kBatch) {
      auto b = proto::batch_from(e);
      a.batches.emplace_back(b.step, std::move(b.samples));
    } else if (e.type == event::kDataset) {
      const int64_t size = proto::dataset_info_from(e).size;
      if (size >= 0) a.dataset_size = size;
    } else if (e.type == event::kSampleRead) {
      record_sample_read(proto::sample_read_from(e), a, d);
    } else if (e.type == event::kHealth) {
      const auto h = proto::health_from(e);
      if (h.primary.value_or(false) && h.check == "finite" && d.primary_health == nullptr) {
        d.primary_health = &e;
      }
      if (h.primary.value_or(false) && is_silent_check(h.check) && d.silent_health == nullptr) {
        d.silent_health = &e;
      }
    } else if (e.type == event::kError) {
      record_error(e, a, d);
    } else if (e.type == event::kRunBegin) {
      const auto b = proto::run_begin_from(e);
      if (b.memory.is_object()) a.run_begin_rss.push_back(b.memory.value("rss_bytes", int64_t{0}));
    } else if (e.type == event::kRunEnd) {
      record_run_end(proto::run_end_from(e), a);
    } else if (e.type == event::kDone) {
      const auto done = proto::done_from(e);
      a.done_seen = true;
      d.done_status = done.status;
      if (done.memory.is_object()) {
        a.peak_memory_bytes = std::max(a.peak_memory_bytes, done.memory.value("peak_rss_bytes", int64_t{0}));
      }
    }
  }
  a.samples_read.assign(d.samples_read.begin(), d.samples_read.end());
  return d;
}

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
bool settle_without_training(const TrialResult& r, const Scenario& s, const EventDigest& d, TrialAnalysis& a) {
  Failure& f = a.failure;
  if (!r.spawn_error.empty()) {
    a.outcome = Outcome::kUnresolved;
    f.message = r.spawn_error;
    return true;
  }
  const bool ended_by_itself = r.term_signal == 0 && !r.timed_out && !r.hung;
  if (d.unavailable != nullptr && ended_by_itself) {
    mark_not_run_here(a, s, quoted(proto::error_from(*d.unavailable).message));
    return true;
  }
  if (d.harness_error != nullptr && ended_by_itself) {
    a.outcome = Outcome::kUnresolved;
    f.message = "the worker reported a harness error: " + quoted(proto::error_from(*d.harness_error).message);
    f.evidence.push_back(f.message);
    return true;
  }
  if (!s.worker.external() && !a.done_seen && ended_by_itself && r.exit_code == kInternalErrorExit) {
    // Note [A bug in dbh is not a finding]: dbh's own worker ended on an
    // internal error (a bug in dbh, as when it read the CUDA allocator before
    // its first tensor): the trial says nothing about the training, so no
    // verdict, bisection or diagnosis may count it as a failure of it.
    a.outcome = Outcome::kUnresolved;
    f.message = "dbh's worker failed inside dbh (exit " + std::to_string(r.exit_code) +
                "), not in the training: " + last_line(r.stderr_tail) + "; please report it with this trial's stderr.log";
    f.evidence.push_back(f.message);
    mark_crash_step(d, f);
    return true;
  }
  return false;
}

// The finite checks' first primary finding: a divergence.
void judge_nonfinite(const Event& event, TrialAnalysis& a) {
  Failure& f = a.failure;
  a.outcome = Outcome::kDiverged;
  a.primary_health = bounded_json(event.body);
  auto h = proto::health_from(event);
  h.kind = quoted_name(h.kind);
  h.site = quoted_name(h.site);
  f.klass = class_for_health_kind(h.kind);
  f.step = h.step;
  f.run = h.run;
  f.module = quoted_name(h.module.value_or(""));
  f.message = "non-finite " + h.kind + " (" + h.site + ") at step " + std::to_string(*f.step);
  f.evidence.push_back("the " + h.mode.value_or("cheap") + " finite checks first flagged " + h.kind + " `" + h.site +
                       "`" + (f.module.empty() ? "" : " in module `" + f.module + "`") + " at step " +
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
void judge_silent_finding(const Event& event, TrialAnalysis& a) {
  Failure& f = a.failure;
  a.outcome = Outcome::kFailed;
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
void judge_error(const EventDigest& d, const KnowledgeBase& kb, TrialAnalysis& a) {
  Failure& f = a.failure;
  a.outcome = Outcome::kFailed;
  const auto e = proto::error_from(*d.first_error);
  f.message = quoted(e.message);
  f.step = e.step.value_or(-1) >= 0 ? e.step : std::nullopt;
  f.run = e.run.value_or(0);
  f.module = quoted_name(e.module.value_or(""));
  // Note [Memory a budget refused]: under a host budget applied as
  // RLIMIT_DATA, a library that reports an allocation the cap refused without
  // saying so (oneDNN, the dynamic loader) is read as host memory exhausted;
  // and memory exhausted while reading a sample is not the sample's defect.
  const bool under_host_budget = a.budget.is_object() && a.budget.value("applied", true) &&
                                 a.budget.value("method", std::string()) == "RLIMIT_DATA";
  const FailureClass* const matched = kb.match_message(f.message, under_host_budget);
  const FailureClass* c = matched;
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
  for (const Event* other : d.errors) {
    if (other != d.first_error && f.secondary.size() < kMaxQuotedItems) {
      const auto o = proto::error_from(*other);
      f.secondary.push_back(quoted(o.phase.value_or("train"), kMaxQuotedNameBytes) + ": " + quoted(o.message));
    }
  }
}

// Memory growth across in-process runs of a passed trial: host RSS, and on
// CUDA the caching allocator's allocated and reserved memory.
// Note [What a run leaves behind]: besides memory, a run that leaves open
// files, threads or child processes behind grows them run after run. Judged
// as resident memory is, from the second run's end on (the first opens what
// a process opens once: thread pools, loader workers, caches), over three
// runs at least: a count that rises at every run's end is a leak.
void judge_resource_leaks(TrialAnalysis& a) {
  const std::vector<std::pair<const char*, const std::vector<int64_t>*>> series = {
      {"open files", &a.run_end_open_files}, {"threads", &a.run_end_threads}, {"child processes", &a.run_end_children}};
  for (const auto& [what, values] : series) {
    if (a.outcome != Outcome::kPassed || values->size() < 3) continue;
    bool rises = true;
    for (size_t i = 2; i < values->size(); ++i) rises = rises && (*values)[i - 1] >= 0 && (*values)[i] > (*values)[i - 1];
    if (!rises) continue;
    const int64_t per_run = (values->back() - (*values)[1]) / static_cast<int64_t>(values->size() - 2);
    Failure& f = a.failure;
    a.outcome = Outcome::kLeaked;
    f.klass = "leak_across_runs";
    f.message = std::string(what) + " grew by " + std::to_string(per_run) + " per run over " +
                std::to_string(values->size()) + " in-process runs";
    std::string counts;
    for (size_t i = 0; i < values->size(); ++i) counts += (i ? ", " : "") + std::to_string((*values)[i]);
    f.evidence.push_back(std::string(what) + " at each run's end: " + counts);
  }
}

void judge_leaks(const ClassifyOptions& opts, TrialAnalysis& a) {
  Failure& f = a.failure;
  const std::vector<std::pair<const char*, const std::vector<int64_t>*>> series = {
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
    if (values->size() < from + 2 || a.outcome != Outcome::kPassed) continue;
    const int64_t growth = values->back() - (*values)[from];
    const int64_t per_run = growth / static_cast<int64_t>(values->size() - 1 - from);
    if (per_run <= (two_runs && !exact ? 2 : 1) * opts.leak_threshold_bytes) continue;
    a.outcome = Outcome::kLeaked;
    f.klass = "leak_across_runs";
    f.message = std::string(what) + " grew by " + format_bytes(per_run) + " per run over " +
                std::to_string(values->size()) + " in-process runs";
    for (size_t i = 0; i < a.run_end_rss.size(); ++i) {
      std::string line = "run " + std::to_string(i) + " ended at " + format_bytes(a.run_end_rss[i]) + " RSS";
      if (i < a.run_end_cuda_allocated.size()) {
        line += ", CUDA allocated " + format_bytes(a.run_end_cuda_allocated[i]) + ", reserved " +
                format_bytes(a.run_end_cuda_reserved[i]);
      }
      f.evidence.push_back(line);
    }
  }
  judge_resource_leaks(a);
}

// Note [The schedule asked for]: a worker that says `done passed` is
// believed only for the training the scenario asked for. Every run of
// repeat.in_process trains the steps start … train.last_step() − 1, each
// once and in order; start is 0, or with train.resume_from the step the
// resume continues at (the checkpoint's name says it as dbh names
// checkpoints; a worker's own format says it in its `checkpoint` event).
// A pass of 0 of 4 steps, or of 7, is no answer: "" when the steps are the
// schedule's, else why not.
std::string schedule_mismatch(const TrialAnalysis& a, const Scenario& s, const EventDigest& d) {
  if (s.train.mode == TrainMode::kOps) return "";
  int64_t start = 0;
  if (!s.train.resume_from.empty()) {
    const auto named = proto::parse_checkpoint_file_name(fs::path(s.train.resume_from).filename().string());
    if (named) {
      start = named->step;
    } else if (d.resumed_at) {
      start = *d.resumed_at;
    } else if (!a.steps.empty()) {
      start = a.steps.front().step;
    }
  }
  const int64_t last = s.train.last_step();
  const int64_t want = std::max<int64_t>(0, last - start);
  std::map<int64_t, std::vector<int64_t>> by_run;
  for (const auto& st : a.steps) by_run[st.run].push_back(st.step);
  for (int64_t run = 0; run < s.repeat.in_process; ++run) {
    const auto& steps = by_run[run];
    bool in_order = static_cast<int64_t>(steps.size()) == want;
    for (size_t i = 0; in_order && i < steps.size(); ++i) in_order = steps[i] == start + static_cast<int64_t>(i);
    if (in_order) continue;
    std::string got = std::to_string(steps.size()) + " step(s)";
    if (!steps.empty()) got += " (" + std::to_string(steps.front()) + " … " + std::to_string(steps.back()) + ")";
    return "the worker reported `done passed` for run " + std::to_string(run) + " after " + got +
           ", but the schedule asked for " + std::to_string(want) + " (steps " + std::to_string(start) + " … " +
           std::to_string(last - 1) + "): a pass of another training is no answer";
  }
  for (const auto& [run, steps] : by_run) {
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

// How the trial ended, from the strongest evidence down: the supervisor's
// kills, the monitors' findings, error events, the `done` event, the stream
// itself; a trial that passed is then judged for leaks, evaluation and
// learning.
void judge_ending(const TrialResult& r, const Scenario& s, const KnowledgeBase& kb, const ClassifyOptions& opts,
                  const EventDigest& d, TrialAnalysis& a) {
  Failure& f = a.failure;
  if (r.timed_out) {
    a.outcome = Outcome::kTimedOut;
    f.klass = "hang";
    f.message = "killed at the wall-clock deadline of " + std::to_string(s.limits.deadline_s) + " s";
    mark_crash_step(d, f);
  } else if (r.hung) {
    a.outcome = Outcome::kHung;
    f.klass = "hang";
    f.message = "no event for " + std::to_string(static_cast<int>(s.limits.silence_s)) +
                " s: killed by the silence watchdog";
    mark_crash_step(d, f);
  } else if (r.term_signal != 0) {
    a.outcome = Outcome::kCrashed;
    const bool oom_kill = r.term_signal == SIGKILL && s.hardware.memory_budget > 0;
    f.klass = oom_kill ? "host_oom" : "crash_signal";
    f.message = "worker killed by " + signal_name(r.term_signal);
    f.evidence.push_back("the process ended with " + signal_name(r.term_signal) + " and no `done` event");
    mark_crash_step(d, f);
  } else if (d.primary_health != nullptr) {
    judge_nonfinite(*d.primary_health, a);
  } else if (d.silent_health != nullptr) {
    judge_silent_finding(*d.silent_health, a);
  } else if (d.first_error != nullptr) {
    judge_error(d, kb, a);
  } else if (!a.done_seen) {
    a.outcome = r.exit_code == 0 ? Outcome::kUnresolved : Outcome::kFailed;
    f.klass = "premature_exit";
    f.message = "worker exited with status " + std::to_string(r.exit_code) + " without a `done` event";
    mark_crash_step(d, f);
  } else if (d.done_status == "diverged") {
    a.outcome = Outcome::kDiverged;
    f.klass = "nonfinite_loss";
    f.message = "the worker stopped a diverged run without a monitor finding";
    f.evidence.push_back("done status \"diverged\" without a primary health event");
  } else if (r.exit_code != 0 || (!d.done_status.empty() && d.done_status != "passed")) {
    a.outcome = Outcome::kFailed;
    f.klass = "premature_exit";
    f.message = "worker finished with status \"" + d.done_status + "\" and exit code " +
                std::to_string(r.exit_code) + " but reported no error";
    f.evidence.push_back(f.message);
  } else if (!r.bad_lines.empty()) {
    a.outcome = Outcome::kUnresolved;
    f.message = "the event stream had " + std::to_string(r.bad_lines.size()) +
                " undecodable line(s): " + r.bad_lines.front();
  } else if (const std::string off = schedule_mismatch(a, s, d); !off.empty()) {
    a.outcome = Outcome::kUnresolved;
    f.message = off;
    f.evidence.push_back(off);
  } else {
    a.outcome = Outcome::kPassed;
    judge_leaks(opts, a);
    if (a.outcome == Outcome::kPassed) judge_evaluation(a, s);
    if (a.outcome == Outcome::kPassed) judge_frozen_updates(a, s);
    if (a.outcome == Outcome::kPassed) judge_learning(a, s);
  }
}

}  // namespace

TrialAnalysis classify(const TrialResult& r, const Scenario& s, const KnowledgeBase& kb,
                       const ClassifyOptions& opts) {
  TrialAnalysis a;
  a.term_signal = r.term_signal;
  a.exit_code = r.exit_code;
  a.seconds = r.seconds;
  if (!r.stacks_tool.empty()) {
    a.stacks_tool = r.stacks_tool;
    a.stacks_excerpt = stacks_excerpt(r.stacks, 40);
  }
  for (size_t i = 0; i < s.faults.size(); ++i) {
    a.faults.push_back(FaultRecord{s.faults[i].name, static_cast<int64_t>(i), false, {}, "", std::nullopt, ""});
  }
  const EventDigest d = read_events(r.events, opts, a);
  // Note [A worker's logs are bounded]: a log that was cut says so.
  for (const auto& [name, cut] : {std::pair<const char*, int64_t>{"stdout", r.stdout_cut_bytes},
                                  std::pair<const char*, int64_t>{"stderr", r.stderr_cut_bytes}}) {
    if (cut > 0) {
      a.warnings.push_back("the worker wrote " + format_bytes(cut) + " more to " + name + " than " + name +
                           ".log keeps (its first " + format_bytes(static_cast<int64_t>(kLogHeadBytes)) +
                           " and its last " + format_bytes(static_cast<int64_t>(kLogTailBytes)) +
                           "; a line in the log marks the cut)");
    }
  }
  if (settle_without_training(r, s, d, a)) return a;
  judge_ending(r, s, kb, opts, d, a);
  // Note [A budget that was not applied]: a run asked to fit a memory budget
  // that its worker could not apply (a budget below what the CUDA context
  // alone takes, say) trained without it; its pass says nothing about the
  // budget, so it is no answer, never "fits". A failure stays what it is.
  if (a.outcome == Outcome::kPassed && s.hardware.memory_budget > 0 && a.budget.is_object() &&
      !a.budget.value("applied", true)) {
    a.outcome = Outcome::kUnresolved;
    a.failure.message = "the memory budget of " + format_bytes(s.hardware.memory_budget) +
                        " was not applied, so the run did not test it: " +
                        a.budget.value("detail", std::string("the worker gave no reason"));
    a.failure.evidence.push_back(a.failure.message);
  }
  return a;
}

namespace {

// A run that trained without an error but whose validation says it learned
// nothing, or forgot what it learned, or whose evaluator cannot be trusted.
void judge_evaluation(TrialAnalysis& a, const Scenario& s) {
  Failure& f = a.failure;
  // Nothing to score is not a broken evaluator: a validation set without a
  // scorable word gives every metric 0 by construction, the self-check too.
  if (a.validation_words && *a.validation_words == 0) {
    a.outcome = Outcome::kFailed;
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
    a.outcome = Outcome::kFailed;
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
      a.outcome = Outcome::kFailed;
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
    a.outcome = Outcome::kFailed;
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
    a.outcome = Outcome::kFailed;
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

void mark_not_run_here(TrialAnalysis& a, const Scenario& s, const std::string& why) {
  // Not tried: this machine lacks what the scenario needs. Neither a pass
  // nor a failure of the training (git bisect's "cannot test").
  a.outcome = Outcome::kSkipped;
  Failure& f = a.failure;
  f.message = why;
  // What a user can do about it here, with the override that does it.
  if (s.hardware.device != "cpu") {
    f.message += "; to run it on this machine's CPU instead, add " +
                 override_text(DBH_SCENARIO_KEY(hardware.device), "cpu") +
                 (s.train.precision != model::Precision::kFp32 && !s.worker.external()
                      ? " " + override_text(DBH_SCENARIO_KEY(train.precision), "fp32") + " (AMP runs on CUDA only)"
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

}  // namespace dbh::harness

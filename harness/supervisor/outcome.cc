#include "harness/supervisor/outcome.h"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace dbh::harness {

std::string to_string(Outcome o) {
  switch (o) {
    case Outcome::kPassed: return "passed";
    case Outcome::kFailed: return "failed";
    case Outcome::kCrashed: return "crashed";
    case Outcome::kTimedOut: return "timed_out";
    case Outcome::kHung: return "hung";
    case Outcome::kDiverged: return "diverged";
    case Outcome::kNondeterministic: return "nondeterministic";
    case Outcome::kLeaked: return "leaked";
    case Outcome::kSkipped: return "skipped";
    case Outcome::kUnresolved: return "unresolved";
  }
  return "unresolved";
}

std::optional<Outcome> outcome_from_string(const std::string& s) {
  for (Outcome o : {Outcome::kPassed, Outcome::kFailed, Outcome::kCrashed, Outcome::kTimedOut,
                    Outcome::kHung, Outcome::kDiverged, Outcome::kNondeterministic,
                    Outcome::kLeaked, Outcome::kSkipped, Outcome::kUnresolved}) {
    if (to_string(o) == s) return o;
  }
  return std::nullopt;
}

bool is_failure(Outcome o) { return o != Outcome::kPassed && o != Outcome::kSkipped; }

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

TrialAnalysis classify(const TrialResult& r, const Scenario& s, const KnowledgeBase& kb,
                       const ClassifyOptions& opts) {
  TrialAnalysis a;
  a.term_signal = r.term_signal;
  a.exit_code = r.exit_code;
  a.seconds = r.seconds;
  for (size_t i = 0; i < s.faults.size(); ++i) {
    a.faults.push_back(FaultRecord{s.faults[i].name, static_cast<int64_t>(i), false, {}, ""});
  }
  const Event* first_error = nullptr;
  const Event* harness_error = nullptr;
  std::string done_status;
  std::vector<const Event*> errors;
  const Event* primary_health = nullptr;
  std::optional<int64_t> open_step, open_run;
  for (const auto& e : r.events) {
    if (e.type == "hello") {
      a.scenario_hash = e.get<std::string>("scenario_hash", "");
    } else if (e.type == "step_begin") {
      open_step = e.get<int64_t>("step", 0);
      open_run = e.get<int64_t>("run", 0);
    } else if (e.type == "step_end") {
      StepRecord st;
      st.run = e.get<int64_t>("run", 0);
      st.step = e.get<int64_t>("step", 0);
      st.loss = e.get<double>("loss", 0);
      st.bce = e.get<double>("bce", 0);
      st.l1 = e.get<double>("l1", 0);
      st.dice = e.get<double>("dice", 0);
      st.lr = e.get<double>("lr", 0);
      st.grad_norm = e.get<double>("grad_norm", 0);
      st.seconds = e.get<double>("seconds", 0);
      st.loss_bits = e.get<uint32_t>("loss_bits", 0);
      st.grad_norm_bits = e.get<uint32_t>("grad_norm_bits", 0);
      if (const auto it = e.body.find("micro_loss_bits"); it != e.body.end() && it->is_array()) {
        for (const auto& b : *it) {
          if (b.is_number_unsigned() && b.get<uint64_t>() <= UINT32_MAX) st.micro_loss_bits.push_back(b.get<uint32_t>());
        }
      }
      if (e.body.contains("memory")) {
        const auto& m = e.body["memory"];
        st.rss_bytes = m.value("rss_bytes", int64_t{0});
        if (m.contains("cuda_peak_allocated_bytes")) {
          st.peak_bytes = m.value("cuda_peak_allocated_bytes", int64_t{0});
        }
        a.peak_memory_bytes = std::max(a.peak_memory_bytes, m.contains("cuda_peak_allocated_bytes")
                                                                ? st.peak_bytes
                                                                : m.value("peak_rss_bytes", int64_t{0}));
      }
      if (e.body.contains("phases") && e.body["phases"].is_object()) {
        st.phases = e.body["phases"];
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
      a.steps.push_back(st);
      ++a.steps_completed;
      open_step.reset();
    } else if (e.type == "fault_fired") {
      // Fault records only fill the fault list; attribution below never reads
      // them. Withholding them (a test of exactly that) leaves it unchanged.
      if (opts.withhold_fault_records) continue;
      const auto idx = e.get<int64_t>("index", -1);
      if (idx >= 0 && idx < static_cast<int64_t>(a.faults.size())) {
        auto& f = a.faults[static_cast<size_t>(idx)];
        f.fired = true;
        f.steps.push_back(e.get<int64_t>("step", -1));
        f.module = e.get<std::string>("module", f.module);
      }
    } else if (e.type == "overlays") {
      a.overlays = e.get<std::vector<std::string>>("files", {});
    } else if (e.type == "memory_budget") {
      a.budget = e.body;
    } else if (e.type == "batch") {
      a.batches.emplace_back(e.get<int64_t>("step", 0), e.get<std::vector<std::string>>("samples", {}));
    } else if (e.type == "health") {
      if (e.get<bool>("primary", false) && e.get<std::string>("check", "") == "finite" &&
          primary_health == nullptr) {
        primary_health = &e;
      }
    } else if (e.type == "error") {
      if (e.get<std::string>("kind", "") == "harness") {
        if (harness_error == nullptr) harness_error = &e;
        continue;
      }
      errors.push_back(&e);
      if (first_error == nullptr && e.get<std::string>("kind", "") != "diverged") {
        first_error = &e;
        if (e.body.contains("memory")) {
          a.memory_at_failure = {{"memory", e.body["memory"]},
                                 {"phases", e.body.value("phases", nlohmann::json::object())}};
        }
      }
    } else if (e.type == "run_begin") {
      if (e.body.contains("memory")) a.run_begin_rss.push_back(e.body["memory"].value("rss_bytes", int64_t{0}));
    } else if (e.type == "run_end") {
      a.run_checksums.push_back(e.get<std::string>("checksum", ""));
      if (e.body.contains("memory")) a.run_end_rss.push_back(e.body["memory"].value("rss_bytes", int64_t{0}));
    } else if (e.type == "done") {
      a.done_seen = true;
      done_status = e.get<std::string>("status", "");
      if (e.body.contains("memory")) {
        a.peak_memory_bytes = std::max(a.peak_memory_bytes, e.body["memory"].value("peak_rss_bytes", int64_t{0}));
      }
    }
  }
  Failure& f = a.failure;
  auto crash_step = [&]() {
    f.step = open_step;
    f.run = open_run;
    if (open_step) {
      f.evidence.push_back("step_begin for step " + std::to_string(*open_step) +
                           " without step_end: the process died during that step");
    }
  };
  if (!r.spawn_error.empty()) {
    a.outcome = Outcome::kUnresolved;
    f.message = r.spawn_error;
    return a;
  }
  if (harness_error != nullptr && r.term_signal == 0 && !r.timed_out && !r.hung) {
    a.outcome = Outcome::kUnresolved;
    f.message = "the worker reported a harness error: " + harness_error->get<std::string>("message", "");
    f.evidence.push_back(f.message);
    return a;
  }
  if (r.timed_out) {
    a.outcome = Outcome::kTimedOut;
    f.klass = "hang";
    f.message = "killed at the wall-clock deadline of " + std::to_string(s.limits.deadline_s) + " s";
    crash_step();
  } else if (r.hung) {
    a.outcome = Outcome::kHung;
    f.klass = "hang";
    f.message = "no event for " + std::to_string(static_cast<int>(s.limits.silence_s)) +
                " s: killed by the silence watchdog";
    crash_step();
  } else if (r.term_signal != 0) {
    a.outcome = Outcome::kCrashed;
    const bool oom_kill = r.term_signal == SIGKILL && s.hardware.memory_budget > 0;
    f.klass = oom_kill ? "host_oom" : "crash_signal";
    f.message = "worker killed by " + signal_name(r.term_signal);
    f.evidence.push_back("the process ended with " + signal_name(r.term_signal) + " and no `done` event");
    crash_step();
  } else if (primary_health != nullptr) {
    a.outcome = Outcome::kDiverged;
    const auto& h = *primary_health;
    a.primary_health = h.body;
    f.klass = class_for_health_kind(h.get<std::string>("kind", ""));
    f.step = h.get<int64_t>("step", 0);
    f.run = h.get<int64_t>("run", 0);
    f.module = h.get<std::string>("module", "");
    const std::string site = h.get<std::string>("site", "");
    f.message = "non-finite " + h.get<std::string>("kind", "") + " (" + site + ") at step " +
                std::to_string(*f.step);
    f.evidence.push_back("the " + h.get<std::string>("mode", "cheap") + " finite checks first flagged " +
                         h.get<std::string>("kind", "") + " `" + site + "`" +
                         (f.module.empty() ? "" : " in module `" + f.module + "`") + " at step " +
                         std::to_string(*f.step));
    if (h.body.contains("nonfinite_sites")) {
      f.evidence.push_back("non-finite sites that step (consequences included): " +
                           h.body["nonfinite_sites"].dump());
    }
  } else if (first_error != nullptr) {
    a.outcome = Outcome::kFailed;
    const auto& e = *first_error;
    f.message = e.get<std::string>("message", "");
    f.step = e.get<int64_t>("step", -1) >= 0 ? std::optional<int64_t>(e.get<int64_t>("step", 0))
                                             : std::nullopt;
    f.run = e.get<int64_t>("run", 0);
    f.module = e.get<std::string>("module", "");
    const FailureClass* c = kb.match_message(f.message);
    if (e.get<std::string>("kind", "") == "data" && (c == nullptr || c->id != "data_invalid")) {
      c = kb.find("data_invalid");
    }
    f.klass = c != nullptr ? c->id : (e.get<std::string>("kind", "") == "data" ? "data_invalid" : "exception");
    f.evidence.push_back("error event: \"" + f.message + "\"" +
                         (f.step ? " at step " + std::to_string(*f.step) : std::string(" before training")) +
                         (f.module.empty() ? "" : ", last module entered `" + f.module + "`"));
    if (c != nullptr && !c->signatures.empty()) {
      f.evidence.push_back("message matches the knowledge-base signature of `" + c->id + "`");
    }
    for (const Event* other : errors) {
      if (other != first_error) {
        f.secondary.push_back(other->get<std::string>("phase", "train") + ": " +
                              other->get<std::string>("message", ""));
      }
    }
  } else if (!a.done_seen) {
    a.outcome = r.exit_code == 0 ? Outcome::kUnresolved : Outcome::kFailed;
    f.klass = "premature_exit";
    f.message = "worker exited with status " + std::to_string(r.exit_code) + " without a `done` event";
    crash_step();
  } else if (done_status == "diverged") {
    a.outcome = Outcome::kDiverged;
    f.klass = "nonfinite_loss";
    f.message = "the worker stopped a diverged run without a monitor finding";
    f.evidence.push_back("done status \"diverged\" without a primary health event");
  } else if (r.exit_code != 0 || (!done_status.empty() && done_status != "passed")) {
    a.outcome = Outcome::kFailed;
    f.klass = "premature_exit";
    f.message = "worker finished with status \"" + done_status + "\" and exit code " +
                std::to_string(r.exit_code) + " but reported no error";
    f.evidence.push_back(f.message);
  } else if (!r.bad_lines.empty()) {
    a.outcome = Outcome::kUnresolved;
    f.message = "the event stream had " + std::to_string(r.bad_lines.size()) +
                " undecodable line(s): " + r.bad_lines.front();
  } else {
    a.outcome = Outcome::kPassed;
    // Memory growth across in-process runs.
    if (a.run_end_rss.size() >= 2) {
      const int64_t growth = a.run_end_rss.back() - a.run_end_rss.front();
      const int64_t per_run = growth / static_cast<int64_t>(a.run_end_rss.size() - 1);
      if (per_run > opts.leak_threshold_bytes) {
        a.outcome = Outcome::kLeaked;
        f.klass = "leak_across_runs";
        f.message = "resident memory grew by " + format_bytes(per_run) + " per run over " +
                    std::to_string(a.run_end_rss.size()) + " in-process runs";
        for (size_t i = 0; i < a.run_end_rss.size(); ++i) {
          f.evidence.push_back("run " + std::to_string(i) + " ended at " + format_bytes(a.run_end_rss[i]) + " RSS");
        }
      }
    }
  }
  return a;
}

bool expectation_met(const Expectation& e, const TrialAnalysis& a, std::vector<std::string>* why) {
  bool ok = true;
  auto miss = [&](const std::string& m) {
    ok = false;
    if (why) why->push_back(m);
  };
  if (e.outcome != to_string(a.outcome)) {
    miss("outcome: expected " + e.outcome + ", got " + to_string(a.outcome));
  }
  if (e.failure_class && *e.failure_class != a.failure.klass) {
    miss("failure_class: expected " + *e.failure_class + ", got " +
         (a.failure.klass.empty() ? "none" : a.failure.klass));
  }
  if (e.step && (!a.failure.step || *a.failure.step != *e.step)) {
    miss("step: expected " + std::to_string(*e.step) + ", got " +
         (a.failure.step ? std::to_string(*a.failure.step) : "none"));
  }
  if (e.module) {
    const std::string& m = a.failure.module;
    const bool match = m == *e.module || m.rfind(*e.module + ".", 0) == 0;
    if (!match) miss("module: expected " + *e.module + ", got " + (m.empty() ? "none" : m));
  }
  if (e.max_peak_memory && a.peak_memory_bytes > *e.max_peak_memory) {
    miss("max_peak_memory: expected at most " + format_bytes(*e.max_peak_memory) + ", got " +
         format_bytes(a.peak_memory_bytes));
  }
  return ok;
}

}  // namespace dbh::harness

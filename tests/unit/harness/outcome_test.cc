// Outcome classification from hand-built trial results: what the process did
// (exit status, signal, watchdog) and what its event stream said.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "harness/kb/knowledge_base.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/trial.h"
#include "tests/support/recorded_trial.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

constexpr int64_t kMiB = 1024 * 1024;

proto::Event Ev(const std::string& type, json fields = json::object()) {
  // Through the codec, so the events look exactly like a worker's.
  return proto::decode_event(proto::encode_event(type, std::move(fields), 0.5), "test");
}

// A builder for a worker's event stream and its exit, from the worker's own
// typed events (harness/proto/event_types.h).
class Stream {
 public:
  Stream() {
    proto::Hello hello;
    hello.pid = 1234;
    hello.scenario_hash = testing::kTheScenarioHash;
    add(hello);
  }
  /// A raw event: a field or an event the typed ones do not write.
  Stream& add(const std::string& type, json fields = json::object()) {
    r_.events.push_back(Ev(type, std::move(fields)));
    return *this;
  }
  template <typename E, typename = decltype(E::kType)>
  Stream& add(const E& e) {
    return add(E::kType, to_json(e));
  }
  Stream& run_begin(int64_t run = 0, int64_t rss = 100 * kMiB) {
    return add(proto::RunBegin{run, {{"rss_bytes", rss}, {"peak_rss_bytes", rss}}});
  }
  Stream& step(int64_t s, int64_t run = 0) {
    add(proto::StepBegin{run, s});
    proto::StepEnd end;
    end.run = run;
    end.step = s;
    end.loss = 1.0 / static_cast<double>(s + 1);
    end.loss_bits = 1065353216u + static_cast<uint32_t>(s);
    end.lr = 0.01;
    end.grad_norm = 2.0;
    end.memory = {{"rss_bytes", 200 * kMiB}, {"peak_rss_bytes", 300 * kMiB + s}};
    return add(end);
  }
  Stream& begin(int64_t s, int64_t run = 0) { return add(proto::StepBegin{run, s}); }
  Stream& run_end(int64_t run = 0, int64_t rss = 200 * kMiB) {
    return add(proto::RunEnd{run, 2, "c" + std::to_string(run), {{"rss_bytes", rss}}, {}});
  }
  // A run's end whose memory says `memory` as the worker wrote it.
  Stream& run_end_saying(int64_t run, nlohmann::json memory) {
    return add(proto::RunEnd{run, 2, "c" + std::to_string(run), std::move(memory), {}});
  }
  Stream& fault(const std::string& name, int64_t index, int64_t s, const std::string& module = "") {
    proto::FaultFired f;
    f.fault = name;
    f.index = index;
    f.step = s;
    f.module = module;
    return add(f);
  }
  Stream& health(const std::string& kind, int64_t s, const std::string& module, bool primary = true) {
    proto::Health h;
    h.step = s;
    h.check = "finite";
    h.site = module.empty() ? kind : module;
    h.kind = kind;
    h.module = module;
    h.primary = primary;
    h.mode = "cheap";
    return add(h);
  }
  Stream& error(const std::string& message, int64_t s, const std::string& module,
                const std::string& kind = "exception", const std::string& phase = "train") {
    proto::WorkerError e;
    e.kind = kind;
    e.run = 0;
    e.step = s;
    e.phase = phase;
    e.message = message;
    e.module = module;
    return add(e);
  }
  Stream& done(const std::string& status = "passed") {
    return add(proto::Done{status, {{"peak_rss_bytes", 400 * kMiB}}});
  }
  Stream& exit(int code) {
    r_.result.exit_code = code;
    return *this;
  }
  Stream& signal(int sig) {
    r_.result.term_signal = sig;
    r_.result.exit_code = -1;
    return *this;
  }
  testing::RecordedTrial& result() { return r_; }

 private:
  testing::RecordedTrial r_;
};

scenario::Scenario WithFaults(std::vector<std::string> names) {
  scenario::Scenario s;
  for (auto& n : names) {
    scenario::FaultConfig f;
    f.name = std::move(n);
    s.faults.push_back(f);
  }
  return s;
}

const kb::KnowledgeBase& Kb() {
  const kb::KnowledgeBase& kb = kb::KnowledgeBase::shipped();
  EXPECT_FALSE(kb.classes().empty()) << "reports/kb/failures.yaml was not found (DBH_HOME?)";
  return kb;
}

// `s` with the schedule the stream `r` trains (Note [The schedule asked
// for]): train.max_steps the steps of its run 0, repeat.in_process its runs.
// The tests of other judgements build short streams; the schedule's own
// tests below classify with the scenario as given.
scenario::Scenario WithStreamSchedule(scenario::Scenario s, const testing::RecordedTrial& r) {
  std::map<int64_t, int64_t> steps;
  for (const auto& e : r.events) {
    if (e.type == proto::event::kStepEnd) ++steps[e.get<int64_t>("run", 0)];
  }
  if (!steps.empty()) {
    s.train.max_steps = std::max<int64_t>(1, steps.begin()->second);
    s.repeat.in_process = static_cast<int64_t>(steps.size());
  }
  return s;
}

supervisor::TrialAnalysis Classify(const testing::RecordedTrial& r, const scenario::Scenario& s = scenario::Scenario(),
                       const supervisor::ClassifyOptions& o = {}) {
  return testing::classify(r, WithStreamSchedule(s, r), Kb(), o);
}

// Every event of `r` except the `fault_fired` ones.
testing::RecordedTrial WithoutFaultRecords(testing::RecordedTrial r) {
  std::vector<proto::Event> kept;
  for (auto& e : r.events) {
    if (e.type != proto::event::kFaultFired) kept.push_back(std::move(e));
  }
  r.events = std::move(kept);
  return r;
}

// Classifies `r` as given, without its fault_fired events, and with the
// withhold option; all three must attribute the failure identically.
void ExpectAttributionIgnoresFaultRecords(const testing::RecordedTrial& r, const scenario::Scenario& s) {
  const supervisor::TrialAnalysis with = Classify(r, s);
  for (const supervisor::TrialAnalysis& without :
       {Classify(WithoutFaultRecords(r), s), Classify(r, s, supervisor::ClassifyOptions{true, 32 * kMiB})}) {
    EXPECT_EQ(to_string(without.outcome), to_string(with.outcome));
    EXPECT_EQ(without.failure.klass, with.failure.klass);
    EXPECT_EQ(without.failure.step, with.failure.step);
    EXPECT_EQ(without.failure.module, with.failure.module);
    EXPECT_EQ(without.failure.message, with.failure.message);
    EXPECT_EQ(without.failure.evidence, with.failure.evidence);
    EXPECT_EQ(without.steps_completed, with.steps_completed);
    for (const auto& f : without.faults) EXPECT_FALSE(f.fired) << f.name;
  }
}

// --- outcomes ------------------------------------------------------------------

// Note [An injected failure says so]: what fired, where, and whether a GPU
// fault was real or only its text; nothing for faults that never fired.
TEST(InjectedFaults, NameWhatFiredAndWhetherAGpuRaisedIt) {
  supervisor::TrialAnalysis a;
  EXPECT_EQ(supervisor::injected_faults(a), "");
  EXPECT_FALSE(supervisor::emulated_gpu_fault(a));
  supervisor::FaultRecord nan;
  nan.name = "nan_gradient";
  nan.fired = true;
  nan.steps = {2};
  nan.module = "head";
  supervisor::FaultRecord unfired;
  unfired.name = "corrupt_sample";
  a.faults = {nan, unfired};
  EXPECT_EQ(supervisor::injected_faults(a), "the fault nan_gradient at step 2 in head");
  EXPECT_FALSE(supervisor::emulated_gpu_fault(a));
  supervisor::FaultRecord oom;
  oom.name = "cuda_oom";
  oom.fired = true;
  oom.steps = {1};
  oom.real = false;
  a.faults.push_back(oom);
  EXPECT_EQ(supervisor::injected_faults(a), "the fault nan_gradient at step 2 in head; the fault cuda_oom at step 1 (emulated: "
                                "dbh raised the error's text; no GPU kernel or allocator failed)");
  EXPECT_TRUE(supervisor::emulated_gpu_fault(a));
  a.faults.back().real = true;
  a.faults.back().hardware_error = "cudaErrorMemoryAllocation";
  EXPECT_NE(supervisor::injected_faults(a).find("(real: raised by the GPU, cudaErrorMemoryAllocation)"), std::string::npos);
  EXPECT_FALSE(supervisor::emulated_gpu_fault(a));
  // A fault on the dataset acts before the first step (its step is -1).
  supervisor::FaultRecord corrupt;
  corrupt.name = "corrupt_sample";
  corrupt.fired = true;
  corrupt.steps = {-1};
  a.faults = {corrupt};
  EXPECT_EQ(supervisor::injected_faults(a), "the fault corrupt_sample before training");
}

// A run that never reached a GPU (a skipped one) is never labelled with the
// CUDA allocator.
TEST(PeakMemoryKind, CudaOnlyWhenTheWorkerReportedCudaMemory) {
  supervisor::TrialAnalysis a;
  EXPECT_EQ(supervisor::peak_memory_kind(a), "host RSS");
  a.cuda_memory_seen = true;
  EXPECT_EQ(supervisor::peak_memory_kind(a), "the larger of the CUDA allocator peak and host RSS");
}

TEST(Classify, CleanRunPasses) {
  Stream st;
  st.run_begin().step(0).step(1).run_end().done().exit(0);
  const auto a = Classify(st.result(), WithFaults({"slow_data"}));
  EXPECT_EQ(a.outcome, scenario::Outcome::kPassed);
  EXPECT_FALSE(supervisor::is_failure(a.outcome));
  EXPECT_EQ(a.failure.klass, "");
  EXPECT_EQ(a.steps_completed, 2);
  ASSERT_EQ(a.steps.size(), 2u);
  EXPECT_EQ(a.steps[1].step, 1);
  EXPECT_DOUBLE_EQ(a.steps[1].loss, 0.5);
  EXPECT_EQ(a.steps[1].loss_bits, 1065353217u);
  EXPECT_EQ(a.steps[1].rss_bytes, 200 * kMiB);
  EXPECT_EQ(a.peak_memory_bytes, 400 * kMiB);  // the done event's peak
  EXPECT_TRUE(a.done_seen);
  EXPECT_FALSE(a.scenario_hash.empty());  // the hello's: the scenario classified (else no pass)
  EXPECT_EQ(a.run_checksums, std::vector<std::string>{"c0"});
  ASSERT_EQ(a.faults.size(), 1u);  // scheduled, never fired
  EXPECT_EQ(a.faults[0].name, "slow_data");
  EXPECT_FALSE(a.faults[0].fired);
}

// Note [Samples as the loader reads them]: the indices an external worker's
// loader read, each once and sorted, bounded by the dataset's size; the first
// read that raised; names cut.
TEST(Classify, TheSamplesTheLoaderReadAreKeptOnceWithTheFirstThatRaised) {
  Stream st;
  st.add(proto::DatasetInfo{10});
  for (const int64_t i : {7, 3, 7, -1, 12, 0}) st.add(proto::SampleRead{i, std::nullopt, std::nullopt});
  st.add(proto::SampleRead{5, std::string(5000, 'n'), std::string("OSError: image file is truncated")});
  st.add(proto::SampleRead{9, std::nullopt, std::string("OSError: another")});
  st.run_begin().step(0).done("error").exit(1);
  const auto a = Classify(st.result());
  EXPECT_EQ(a.dataset_size, 10);
  EXPECT_EQ(a.samples_read, (std::vector<int64_t>{0, 3, 5, 7, 9}));  // -1 and 12 are not indices of it
  EXPECT_EQ(a.failed_sample, 5);
  EXPECT_EQ(a.failed_sample_error, "OSError: image file is truncated");
  ASSERT_EQ(a.sample_names.count(5), 1u);
  EXPECT_LE(a.sample_names.at(5).size(), supervisor::kMaxSampleNameBytes + 4);  // cut, with its "…"
}

// A value the worker did not measure stays unset (never 0), and a step_end
// without DBNet's loss parts is still a trainer's step, not an ops step.
TEST(Classify, AStepEndWithoutLossPartsOrGradientNormLeavesThemUnset) {
  Stream st;
  st.run_begin();
  st.add(proto::StepBegin{0, 0});
  st.add(proto::event::kStepEnd, {{"run", 0}, {"step", 0}, {"loss", 0.5}, {"loss_bits", 1056964608u}, {"lr", 0.01},
                           {"seconds", 0.1}});
  st.run_end().done().exit(0);
  const auto a = Classify(st.result());
  ASSERT_EQ(a.steps.size(), 1u);
  EXPECT_FALSE(a.steps[0].bce.has_value());
  EXPECT_FALSE(a.steps[0].grad_norm.has_value());
  EXPECT_FALSE(a.steps[0].grad_norm_bits.has_value());
  EXPECT_DOUBLE_EQ(a.steps[0].lr, 0.01);
  EXPECT_FALSE(proto::step_end_from(Ev(proto::event::kStepEnd, {{"loss_bits", 1}})).ops);
}

// Note [What a run leaves behind]: open files (threads, children) that rise
// at every run's end from the second on are a leak, named as such; a count
// that settles is not.
TEST(Classify, OpenFilesRisingAtEveryRunsEndAreALeak) {
  const auto trial = [](std::vector<int64_t> files) {
    Stream st;
    for (size_t run = 0; run < files.size(); ++run) {
      const auto r = static_cast<int64_t>(run);
      st.run_begin(r).step(0, r);
      proto::RunEnd end{r, 1, "c", {{"rss_bytes", 200 * kMiB}}, {}};
      end.resources = {{"open_files", files[run]}, {"threads", 4}, {"children", 0}};
      st.add(end);
    }
    st.done().exit(0);
    return Classify(st.result());
  };
  const auto leaked = trial({10, 13, 15, 17});
  EXPECT_EQ(leaked.outcome, scenario::Outcome::kLeaked);
  EXPECT_EQ(leaked.failure.klass, "leak_across_runs");
  EXPECT_EQ(leaked.failure.message, "open files grew by 2 per run over 4 in-process runs");
  EXPECT_EQ(trial({10, 13, 13, 13}).outcome, scenario::Outcome::kPassed);  // the first run's own, then steady
  EXPECT_EQ(trial({10, 13}).outcome, scenario::Outcome::kPassed);          // two runs are not judged
}

// Note [The schedule asked for]: `done passed` is believed only for the
// steps the scenario asked for.
// Note [A pass names its scenario].
TEST(Classify, APassIsBelievedOnlyFromAHelloOfTheScenarioDbhPassed) {
  scenario::Scenario four;
  four.train.max_steps = 4;
  const auto passing = [] {
    Stream st;
    st.run_begin().step(0).step(1).step(2).step(3).run_end().done().exit(0);
    return st.result();
  };
  EXPECT_EQ(testing::classify(passing(), four, Kb()).outcome, scenario::Outcome::kPassed);
  testing::RecordedTrial no_hello = passing();
  ASSERT_EQ(no_hello.events.front().type, proto::event::kHello);
  no_hello.events.erase(no_hello.events.begin());
  const auto a = testing::classify(no_hello, four, Kb());
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(a.failure.message.find("without a `hello` event"), std::string::npos) << a.failure.message;
  testing::RecordedTrial other = passing();
  other.events.front().body["scenario_hash"] = "deadbeef";
  const auto b = testing::classify(other, four, Kb());
  EXPECT_EQ(b.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(b.failure.message.find("names scenario hash deadbeef, but dbh passed it " + scenario::scenario_hash(four)),
            std::string::npos)
      << b.failure.message;
}

// Note [A loss that explodes has diverged]: losses 1, 2, 3000 in one run:
// a pass is diverged at step 2 (3000× the first step's loss); the key turns
// it off; a run whose loss then turns non-finite at step 3 is the same
// divergence, named where it showed first, the non-finite finding kept as
// evidence; a non-finite value before any explosion stands.
TEST(Classify, AFiniteLossThatExplodesHasDivergedWhereItShowsFirst) {
  const auto trial = [](std::vector<double> losses, int64_t nonfinite_at) {
    Stream st;
    st.run_begin();
    for (size_t i = 0; i < losses.size(); ++i) {
      const auto step = static_cast<int64_t>(i);
      st.begin(step);
      proto::StepEnd end;
      end.step = step;
      end.loss = losses[i];
      end.lr = 0.5;
      end.memory = {{"rss_bytes", 200 * kMiB}, {"peak_rss_bytes", 300 * kMiB}};
      st.add(end);
    }
    if (nonfinite_at >= 0) {
      st.begin(nonfinite_at).health("gradient", nonfinite_at, "decoder.fusion").done("diverged").exit(1);
    } else {
      st.run_end().done().exit(0);
    }
    return st;
  };
  auto exploded = trial({1.0, 2.0, 3000.0}, -1);
  const auto a = Classify(exploded.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kDiverged);
  EXPECT_EQ(a.failure.klass, supervisor::kLossExploded);
  EXPECT_EQ(a.failure.step, 2);
  EXPECT_EQ(a.failure.message,
            "the loss exploded at step 2: 3000, 3000× its first step's 1 (finite: diverged without a NaN)");
  scenario::Scenario off;
  off.monitors.loss_explosion_factor = 0;
  EXPECT_EQ(Classify(exploded.result(), off).outcome, scenario::Outcome::kPassed);
  EXPECT_EQ(Classify(trial({1.0, 2.0, 999.0}, -1).result()).outcome, scenario::Outcome::kPassed);

  auto then_nan = trial({1.0, 2.0, 3000.0}, 3);
  const auto b = Classify(then_nan.result());
  EXPECT_EQ(b.outcome, scenario::Outcome::kDiverged);
  EXPECT_EQ(b.failure.klass, supervisor::kLossExploded);
  EXPECT_EQ(b.failure.step, 2);
  EXPECT_NE(b.failure.message.find("(finite there; non-finite from step 3)"), std::string::npos) << b.failure.message;
  EXPECT_NE(b.failure.evidence.back().find("then, at step 3: non-finite gradient"), std::string::npos)
      << b.failure.evidence.back();
  const auto c = Classify(trial({1.0, 2.0, 3.0}, 3).result());
  EXPECT_EQ(c.failure.klass, "nonfinite_gradient");
  EXPECT_EQ(c.failure.step, 3);
}

// What this machine lacks is said before training, never after a finding.
TEST(Classify, AnUnavailableErrorAfterADivergenceIsNoSkip) {
  Stream st;
  st.run_begin().step(0).begin(1).health("loss", 1, "");
  st.add("error", {{"kind", "unavailable"}, {"message", "cuda not here"}});
  st.done("diverged").exit(1);
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kDiverged);
  Stream before;
  before.add("error", {{"kind", "unavailable"}, {"message", "cuda not here"}}).done("unavailable").exit(0);
  EXPECT_EQ(Classify(before.result()).outcome, scenario::Outcome::kSkipped);
}

// Note [Reading JSON that may lie]: fields of another type are left out or
// read as absent, never an exception.
TEST(Classify, MistypedMemoryFieldsAreNoCrash) {
  Stream st;
  st.add("memory_budget", {{"method", 7}, {"applied", "no"}, {"budget_bytes", "x"}, {"detail", json::array({1})},
                           {"used_before", 1e300}});
  st.run_begin().step(0);
  st.add("step_begin", {{"run", 0}, {"step", 1}});
  st.add("step_end", {{"run", 0}, {"step", 1}, {"loss", 0.5}, {"memory", {{"rss_bytes", "x"}, {"peak_rss_bytes", 1e300}}},
                      {"phases", {{"data", json::array({1})}, {"forward", {{"rss_bytes", "y"}}}}}});
  st.add("error", {{"kind", "exception"}, {"run", 0}, {"step", 2}, {"message", "boom"},
                   {"memory", {{"rss_bytes", "x"}, {"peak_rss_bytes", 5}}}, {"phases", json::array({1, 2})}});
  st.done("error").exit(1);
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kFailed);
  EXPECT_EQ(a.budget, json::object()) << a.budget.dump();
  EXPECT_EQ(a.memory_at_failure["memory"], json({{"peak_rss_bytes", 5}}));
  EXPECT_EQ(a.memory_at_failure["phases"], json::object());
}

TEST(Classify, APassOfAnotherScheduleIsNoAnswer) {
  scenario::Scenario four;
  four.train.max_steps = 4;
  const auto trial = [&](int64_t steps) {
    Stream st;
    st.run_begin();
    for (int64_t i = 0; i < steps; ++i) st.step(i);
    st.run_end().done().exit(0);
    return testing::classify(st.result(), four, Kb());
  };
  EXPECT_EQ(trial(4).outcome, scenario::Outcome::kPassed);
  const auto none = trial(0);
  EXPECT_EQ(none.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(none.failure.message.find("after 0 step(s), but the schedule asked for 4 (steps 0 … 3)"),
            std::string::npos)
      << none.failure.message;
  EXPECT_EQ(trial(7).outcome, scenario::Outcome::kUnresolved);
  // stop_after is the schedule's end; a resume starts where its checkpoint says.
  four.train.stop_after = 2;
  EXPECT_EQ(trial(2).outcome, scenario::Outcome::kPassed);
  four.train.stop_after = 0;
  four.train.resume_from = "/x/checkpoint-r0-s2.pt";
  Stream resumed;
  resumed.run_begin().step(2).step(3).run_end().done().exit(0);
  EXPECT_EQ(testing::classify(resumed.result(), four, Kb()).outcome, scenario::Outcome::kPassed);
  Stream from_zero;
  from_zero.run_begin().step(0).step(1).run_end().done().exit(0);
  EXPECT_EQ(testing::classify(from_zero.result(), four, Kb()).outcome, scenario::Outcome::kUnresolved);
  // A worker's own checkpoint that says it resumed past the last step: no
  // step trained, no pass.
  four.train.resume_from = "/x/their-own-format.ckpt";
  Stream past;
  past.run_begin().add(proto::Checkpoint{0, 9, "/x/their-own-format.ckpt", true}).run_end().done().exit(0);
  const auto p = testing::classify(past.result(), four, Kb());
  EXPECT_EQ(p.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(p.failure.message.find("after resuming at step 9, at or past the schedule's last step 3"),
            std::string::npos)
      << p.failure.message;
}

// Validations asked of an external worker and none reported: the validation
// was never checked, so the pass is no answer; one reported, a pass.
TEST(Classify, ValidationsAskedOfAnExternalWorkerMustArrive) {
  scenario::Scenario s;
  s.train.max_steps = 4;
  s.train.eval_every = 2;
  s.worker.command = {"python", "train.py"};
  Stream none;
  none.run_begin().step(0).step(1).step(2).step(3).run_end().done().exit(0);
  const auto a = testing::classify(none.result(), s, Kb());
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(a.failure.message.find("train.eval_every 2 asked for a validation every 2 step(s), but the worker "
                                   "reported none"),
            std::string::npos)
      << a.failure.message;
  proto::Eval eval;
  eval.step = 2;
  eval.metrics = {{"val/iou", 0.4}};
  Stream one;
  one.run_begin().step(0).step(1).add(eval).step(2).step(3).run_end().done().exit(0);
  const auto b = testing::classify(one.result(), s, Kb());
  EXPECT_EQ(b.outcome, scenario::Outcome::kPassed) << b.failure.message;
  ASSERT_EQ(b.evals.size(), 1u);
  EXPECT_FALSE(b.evals[0].has_hmean);
  EXPECT_EQ(b.evals[0].metrics, (std::vector<std::pair<std::string, double>>{{"val/iou", 0.4}}));
}

// Note [A worker's own validation metrics]: with no h-mean named, every
// metric at zero is the symptom; an h-mean named is judged by itself.
TEST(Classify, AWorkersOwnValidationMetricsAllZeroAreNamed) {
  scenario::Scenario s;
  s.train.max_steps = 4;
  s.train.eval_every = 2;
  s.monitors.hmean_zero_after = 2;
  s.worker.command = {"python", "train.py"};
  const auto run = [&](double iou, double loss) {
    Stream st;
    st.run_begin();
    for (int64_t i = 0; i < 4; ++i) {
      st.step(i);
      if (i % 2 == 1) {
        proto::Eval eval;
        eval.step = i + 1;
        eval.metrics = {{"val/iou", iou}, {"val/dice", iou}};
        if (loss >= 0) eval.metrics["val/loss"] = loss;
        st.add(eval);
      }
    }
    st.run_end().done().exit(0);
    return testing::classify(st.result(), s, Kb());
  };
  const auto zero = run(0, -1);
  EXPECT_EQ(zero.failure.klass, "hmean_zero");
  EXPECT_EQ(zero.failure.message,
            "validation metrics stayed all 0 for the last 2 evaluations (through step 3): the training's own metrics "
            "val/dice 0.000, val/iou 0.000");
  EXPECT_EQ(run(0, 1.5).outcome, scenario::Outcome::kPassed) << "a metric that is not 0 (its loss) is not all zero";
  EXPECT_EQ(run(0.3, -1).outcome, scenario::Outcome::kPassed);
}

TEST(Classify, SignalWithOpenStepIsACrashAtThatStep) {
  for (int sig : {SIGSEGV, SIGABRT, SIGKILL, SIGBUS}) {
    Stream st;
    st.run_begin().step(0).begin(1).fault("crash", 0, 1).signal(sig);
    const auto a = Classify(st.result(), WithFaults({"crash"}));
    SCOPED_TRACE(supervisor::signal_name(sig));
    EXPECT_EQ(a.outcome, scenario::Outcome::kCrashed);
    EXPECT_TRUE(supervisor::is_failure(a.outcome));
    EXPECT_EQ(a.failure.klass, "crash_signal");
    EXPECT_EQ(a.failure.step, 1);
    EXPECT_EQ(a.failure.run, 0);
    EXPECT_EQ(a.term_signal, sig);
    EXPECT_NE(a.failure.message.find(supervisor::signal_name(sig)), std::string::npos) << a.failure.message;
    EXPECT_EQ(a.steps_completed, 1);
    EXPECT_TRUE(a.faults.at(0).fired);
    EXPECT_EQ(a.faults.at(0).steps, std::vector<int64_t>{1});
  }
}

TEST(Classify, SignalBetweenStepsHasNoStep) {
  Stream st;
  st.run_begin().step(0).step(1).signal(SIGSEGV);
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kCrashed);
  EXPECT_FALSE(a.failure.step.has_value());
}

TEST(Classify, SigkillUnderAMemoryBudgetIsHostOom) {
  Stream st;
  st.run_begin().begin(0).signal(SIGKILL);
  scenario::Scenario s;
  s.hardware.memory_budget = 512 * kMiB;
  const auto a = Classify(st.result(), s);
  EXPECT_EQ(a.outcome, scenario::Outcome::kCrashed);
  EXPECT_EQ(a.failure.klass, "host_oom");
  EXPECT_EQ(a.failure.step, 0);
}

TEST(Classify, APassUnderABudgetThatWasNotAppliedIsNoAnswer) {
  scenario::Scenario s;
  s.hardware.memory_budget = 384 * kMiB;
  auto with_budget = [](bool applied) {
    Stream st;
    st.add("memory_budget", {{"applied", applied}, {"method", applied ? "cuda ballast + allocator limit" : ""},
                             {"budget_bytes", 384 * kMiB},
                             {"detail", applied ? "" : "the budget is smaller than what the context already uses"}});
    st.run_begin().step(0).step(1).run_end().done().exit(0);
    return st;
  };
  auto not_applied = with_budget(false);
  const auto a = Classify(not_applied.result(), s);
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(a.failure.message.find("was not applied"), std::string::npos) << a.failure.message;
  EXPECT_NE(a.failure.message.find("context already uses"), std::string::npos) << a.failure.message;
  auto applied = with_budget(true);
  EXPECT_EQ(Classify(applied.result(), s).outcome, scenario::Outcome::kPassed);
}

TEST(Classify, SilenceWatchdogKillIsHungAtTheOpenStep) {
  Stream st;
  st.run_begin().step(0).begin(1).fault("hang", 0, 1).signal(SIGTERM);
  st.result().result.hung = true;
  st.result().result.killed_by_supervisor = true;
  scenario::Scenario s = WithFaults({"hang"});
  s.limits.silence_s = 2;
  const auto a = Classify(st.result(), s);
  EXPECT_EQ(a.outcome, scenario::Outcome::kHung);
  EXPECT_EQ(a.failure.klass, "hang");
  EXPECT_EQ(a.failure.step, 1);
  EXPECT_NE(a.failure.message.find("silence watchdog"), std::string::npos) << a.failure.message;
}

TEST(Classify, DeadlineKillIsTimedOut) {
  Stream st;
  st.run_begin().begin(0).signal(SIGKILL);
  st.result().result.timed_out = true;
  scenario::Scenario s;
  s.limits.deadline_s = 3;
  s.hardware.memory_budget = kMiB;  // a deadline kill is not an OOM kill
  const auto a = Classify(st.result(), s);
  EXPECT_EQ(a.outcome, scenario::Outcome::kTimedOut);
  EXPECT_EQ(a.failure.klass, "hang");
  EXPECT_EQ(a.failure.step, 0);
  EXPECT_NE(a.failure.message.find("deadline"), std::string::npos) << a.failure.message;
}

TEST(Classify, SpawnErrorIsUnresolved) {
  testing::RecordedTrial r;
  r.result.spawn_error = "cannot start /nope: No such file or directory";
  const auto a = Classify(r);
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_EQ(a.failure.message, r.result.spawn_error);
}

struct HealthCase {
  std::string kind, klass, module;
  int64_t step;
};

TEST(Classify, PrimaryHealthFindingIsDivergedWithItsClassStepAndModule) {
  for (const auto& c : std::vector<HealthCase>{{"input", "nonfinite_input", "", 0},
                                               {"label", "nonfinite_label", "", 2},
                                               {"activation", "nonfinite_activation", "decoder.fusion", 1},
                                               {"gradient", "nonfinite_gradient", "head.thresh.up2", 0},
                                               {"loss", "nonfinite_loss", "", 3}}) {
    SCOPED_TRACE(c.kind);
    Stream st;
    st.run_begin();
    for (int64_t i = 0; i < c.step; ++i) st.step(i);
    st.begin(c.step)
        .health("activation", c.step, "encoder.stem", /*primary=*/false)  // a consequence
        .health(c.kind, c.step, c.module)
        .health("loss", c.step, "", /*primary=*/true)  // only the first primary counts
        .error("non-finite " + c.kind, c.step, "head.binarize", "diverged")
        .done("diverged")
        .exit(1);
    const auto a = Classify(st.result());
    EXPECT_EQ(a.outcome, scenario::Outcome::kDiverged);
    EXPECT_EQ(a.failure.klass, c.klass);
    EXPECT_EQ(a.failure.step, c.step);
    EXPECT_EQ(a.failure.module, c.module);
    EXPECT_EQ(a.steps_completed, c.step);
    EXPECT_FALSE(a.failure.evidence.empty());
  }
}

TEST(Classify, NonPrimaryOrNonFiniteHealthAloneIsNotADivergence) {
  Stream st;
  st.run_begin().step(0);
  proto::Health consequence;
  consequence.check = "finite";
  consequence.kind = "activation";
  consequence.primary = false;
  st.add(consequence);
  proto::Health spike;
  spike.check = "loss_spike";
  spike.kind = "loss";
  spike.primary = true;
  st.add(spike);
  st.run_end().done().exit(0);
  EXPECT_EQ(Classify(st.result()).outcome, scenario::Outcome::kPassed);
}

struct MessageCase {
  std::string message, klass;
};

TEST(Classify, ErrorMessageIsClassifiedByTheKnowledgeBase) {
  for (const auto& c : std::vector<MessageCase>{
           {"cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "cudnn_execution_failed"},
           {"FIND was unable to find an engine to execute this computation", "cudnn_no_engine"},
           {"GET was unable to find an engine to execute this computation", "cudnn_no_engine"},
           {"CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"},
           {"CUDA error: an illegal memory access was encountered", "illegal_memory_access"},
           {"CUDA error: an illegal instruction was encountered", "illegal_instruction"},
           {"DefaultCPUAllocator: not enough memory: you tried to allocate 1 bytes", "host_oom"},
           {"std::bad_alloc", "host_oom"},
           {"MemoryError: ", "host_oom"},
           {"MemoryError: Unable to allocate 3.00 MiB for an array with shape (512, 512, 3)", "host_oom"},
           {"OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"},
           {"RuntimeError: could not create a primitive", "exception"},  // only under a host budget
           {"something nobody has seen before", "exception"}}) {
    SCOPED_TRACE(c.message);
    Stream st;
    st.run_begin().step(0).step(1).begin(2).error(c.message, 2, "decoder.fusion").done("error").exit(1);
    const auto a = Classify(st.result());
    EXPECT_EQ(a.outcome, scenario::Outcome::kFailed);
    EXPECT_EQ(a.failure.klass, c.klass);
    EXPECT_EQ(a.failure.step, 2);
    EXPECT_EQ(a.failure.module, "decoder.fusion");
    EXPECT_EQ(a.failure.message, c.message);
  }
}

// Note [Memory a budget refused]
TEST(Classify, UnderAHostBudgetAnUnexplainedLibraryFailureIsHostMemoryExhausted) {
  scenario::Scenario s;
  s.hardware.memory_budget = 512 * kMiB;
  auto under = [](const std::string& method, bool applied, const std::string& message) {
    Stream st;
    st.add("memory_budget", {{"applied", applied}, {"method", method}, {"budget_bytes", 512 * kMiB}});
    st.run_begin().step(0).begin(1).error(message, 1, "").done("error").exit(1);
    return st;
  };
  for (const std::string message : {"RuntimeError: could not create a primitive",
                                    "ImportError: libfoo.so: failed to map segment from shared object"}) {
    SCOPED_TRACE(message);
    auto capped = under("RLIMIT_DATA", true, message);
    const auto a = Classify(capped.result(), s);
    EXPECT_EQ(a.failure.klass, "host_oom");
    ASSERT_EQ(a.failure.evidence.size(), 2u);
    EXPECT_NE(a.failure.evidence[1].find("under a host memory budget"), std::string::npos) << a.failure.evidence[1];
    // A budget applied on the GPU caps no host allocation, and one not
    // applied caps nothing: the message stays unexplained.
    auto gpu = under("cuda ballast + allocator limit", true, message);
    EXPECT_EQ(Classify(gpu.result(), s).failure.klass, "exception");
    auto not_applied = under("RLIMIT_DATA", false, message);
    EXPECT_EQ(Classify(not_applied.result(), s).failure.klass, "exception");
  }
}

TEST(Classify, MemoryExhaustedWhileReadingASampleIsNotTheSamplesDefect) {
  Stream st;
  st.run_begin().begin(0).error("MemoryError: Unable to allocate 3.00 MiB for an array", 0, "", "data");
  st.done("error").exit(1);
  EXPECT_EQ(Classify(st.result()).failure.klass, "host_oom");
  Stream cuda;
  cuda.run_begin().begin(0).error("CUDA out of memory. Tried to allocate 2.00 GiB", 0, "", "data");
  cuda.done("error").exit(1);
  EXPECT_EQ(Classify(cuda.result()).failure.klass, "cuda_oom");
}

TEST(Classify, DataErrorIsDataInvalidWhateverItsMessage) {
  Stream st;
  st.run_begin().begin(0).error("sample 3: something odd", 0, "", "data").done("error").exit(1);
  EXPECT_EQ(Classify(st.result()).failure.klass, "data_invalid");
  Stream st2;
  st2.run_begin().begin(0).error("img_3.jpg: cannot decode the image", 0, "", "data").done("error").exit(1);
  EXPECT_EQ(Classify(st2.result()).failure.klass, "data_invalid");
  // A data error before training has no step.
  Stream st3;
  st3.error("img_1.jpg: expected a decodable image", -1, "", "data").done("error").exit(1);
  const auto a = Classify(st3.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kFailed);
  EXPECT_EQ(a.failure.klass, "data_invalid");
  EXPECT_FALSE(a.failure.step.has_value());
}

TEST(Classify, TeardownErrorsAreKeptAsSecondary) {
  Stream st;
  st.run_begin().step(0).step(1).begin(2).fault("cuda_error", 0, 2, "decoder.fusion")
      .error("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", 2, "decoder.fusion")
      .error("CUDA error: an illegal instruction was encountered", 2, "decoder.fusion", "exception",
             "teardown")
      .done("error")
      .exit(1);
  const auto a = Classify(st.result(), WithFaults({"cuda_error"}));
  EXPECT_EQ(a.outcome, scenario::Outcome::kFailed);
  EXPECT_EQ(a.failure.klass, "cudnn_execution_failed");  // the first error, not the teardown one
  EXPECT_EQ(a.failure.step, 2);
  EXPECT_EQ(a.failure.module, "decoder.fusion");
  ASSERT_EQ(a.failure.secondary.size(), 1u);
  EXPECT_EQ(a.failure.secondary[0], "teardown: CUDA error: an illegal instruction was encountered");
  EXPECT_TRUE(a.faults.at(0).fired);
  EXPECT_EQ(a.faults.at(0).module, "decoder.fusion");
}

TEST(Classify, ExitWithoutDoneIsAPrematureExit) {
  Stream st;
  st.run_begin().step(0).begin(1).exit(1);
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kFailed);
  EXPECT_EQ(a.failure.klass, "premature_exit");
  EXPECT_EQ(a.failure.step, 1);
  EXPECT_FALSE(a.done_seen);
  EXPECT_NE(a.failure.message.find("status 1"), std::string::npos) << a.failure.message;
}

TEST(Classify, AnInternalErrorOfDbhsOwnWorkerIsUnresolvedNeverAFailureOfTheTraining) {
  Stream st;
  st.run_begin().begin(0).exit(kInternalErrorExit);
  st.result().result.stderr_tail = "dbh: internal error: Invalid device argument \n";
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_EQ(a.failure.klass, "");
  EXPECT_NE(a.failure.message.find("inside dbh"), std::string::npos) << a.failure.message;
  EXPECT_NE(a.failure.message.find("Invalid device argument"), std::string::npos) << a.failure.message;
  // The user's own worker: its exit status 3 is its own, a premature exit.
  scenario::Scenario external;
  external.worker.command = {"python", "train.py"};
  const auto b = Classify(st.result(), external);
  EXPECT_EQ(b.outcome, scenario::Outcome::kFailed);
  EXPECT_EQ(b.failure.klass, "premature_exit");
}

TEST(Classify, ExitZeroWithoutDoneIsUnresolved) {
  Stream st;
  st.run_begin().step(0).step(1).run_end().exit(0);
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_EQ(a.failure.klass, "premature_exit");
  EXPECT_TRUE(supervisor::is_failure(a.outcome));
}

TEST(Classify, UndecodableLinesMakeAnOtherwiseCleanRunUnresolved) {
  Stream st;
  st.run_begin().step(0).run_end().done().exit(0);
  st.result().result.bad_lines = {"events.jsonl:3: expected one JSON object per line, got invalid JSON"};
  const auto a = Classify(st.result());
  EXPECT_EQ(a.outcome, scenario::Outcome::kUnresolved);
  EXPECT_NE(a.failure.message.find("events.jsonl:3"), std::string::npos);
}

TEST(Classify, MemoryGrowthAcrossInProcessRunsIsALeak) {
  Stream st;
  for (int64_t run = 0; run < 3; ++run) {
    st.run_begin(run, (200 + 96 * run) * kMiB).step(0, run).step(1, run);
    st.fault("leak", 0, 0).run_end(run, (300 + 96 * run) * kMiB);
  }
  st.done().exit(0);
  const auto a = Classify(st.result(), WithFaults({"leak"}));
  EXPECT_EQ(a.outcome, scenario::Outcome::kLeaked);
  EXPECT_TRUE(supervisor::is_failure(a.outcome));
  EXPECT_EQ(a.failure.klass, "leak_across_runs");
  EXPECT_NE(a.failure.message.find("96.0 MiB per run"), std::string::npos) << a.failure.message;
  EXPECT_EQ(a.failure.evidence.size(), 3u);
  EXPECT_EQ(a.run_end_rss.size(), 3u);
  EXPECT_EQ(a.run_begin_rss.size(), 3u);
  EXPECT_EQ(a.steps_completed, 6);
  ExpectAttributionIgnoresFaultRecords(st.result(), WithFaults({"leak"}));
}

// Note [An unknown is no zero]: a run's end whose memory is absent, a
// string, negative or past any machine is unknown, and no leak is judged
// from it (it was "leaked 300 MiB" from a missing figure read as 0 B).
TEST(Classify, AnUnknownRunEndFigureJudgesNoLeak) {
  for (const nlohmann::json& unknown : {nlohmann::json::object(), nlohmann::json{{"rss_bytes", "300 MiB"}},
                                        nlohmann::json{{"rss_bytes", -1}}, nlohmann::json{{"rss_bytes", 1e300}},
                                        nlohmann::json{{"rss_bytes", nullptr}}}) {
    for (size_t unknown_at = 0; unknown_at < 3; ++unknown_at) {
      Stream st;
      for (int64_t run = 0; run < 3; ++run) {
        st.run_begin(run).step(0, run);
        if (static_cast<size_t>(run) == unknown_at) st.run_end_saying(run, unknown);
        else st.run_end(run, 300 * kMiB);
      }
      st.done().exit(0);
      const auto a = Classify(st.result());
      // The first run's end is not judged over three runs; an unknown
      // later one leaves the series unjudged rather than read as 0 B.
      EXPECT_EQ(a.outcome, scenario::Outcome::kPassed) << unknown.dump() << " at run " << unknown_at << ": "
                                                       << a.failure.message;
      ASSERT_EQ(a.run_end_rss.size(), 3u);
      EXPECT_FALSE(a.run_end_rss[unknown_at].has_value()) << unknown.dump();
    }
  }
  // The same figures, all known and growing, are a leak.
  Stream st;
  for (int64_t run = 0; run < 3; ++run) st.run_begin(run).step(0, run).run_end(run, (300 + 96 * run) * kMiB);
  st.done().exit(0);
  EXPECT_EQ(Classify(st.result()).outcome, scenario::Outcome::kLeaked);
}

TEST(Classify, GrowthBelowTheThresholdIsNotALeak) {
  Stream st;
  for (int64_t run = 0; run < 3; ++run) st.run_begin(run).step(0, run).run_end(run, (300 + 8 * run) * kMiB);
  st.done().exit(0);
  EXPECT_EQ(Classify(st.result()).outcome, scenario::Outcome::kPassed);
  supervisor::ClassifyOptions strict;
  strict.leak_threshold_bytes = 4 * kMiB;
  EXPECT_EQ(Classify(st.result(), scenario::Scenario(), strict).outcome, scenario::Outcome::kLeaked);
  // The first run's end holds one-time caches: two runs whose second ends
  // 42 MiB higher (warm-up, seen on CPU) stay under two runs' doubled bar;
  // 96 MiB more is a leak that two runs tell (`repeat --in-process 2`).
  Stream two;
  for (int64_t run = 0; run < 2; ++run) two.run_begin(run).step(0, run).run_end(run, (300 + 42 * run) * kMiB);
  two.done().exit(0);
  EXPECT_EQ(Classify(two.result()).outcome, scenario::Outcome::kPassed);
  Stream two_leaking;
  for (int64_t run = 0; run < 2; ++run) {
    two_leaking.run_begin(run).step(0, run).run_end(run, (300 + 96 * run) * kMiB);
  }
  two_leaking.done().exit(0);
  const auto leaked = Classify(two_leaking.result());
  EXPECT_EQ(leaked.outcome, scenario::Outcome::kLeaked);
  EXPECT_EQ(leaked.failure.message, "resident memory grew by 96.0 MiB per run over 2 in-process runs");
  Stream warm;
  for (int64_t run = 0; run < 3; ++run) {
    warm.run_begin(run).step(0, run).run_end(run, (run == 0 ? 300 : 342 + 2 * run) * kMiB);
  }
  warm.done().exit(0);
  EXPECT_EQ(Classify(warm.result()).outcome, scenario::Outcome::kPassed);
  // One run cannot leak across runs.
  Stream one;
  one.run_begin().step(0).run_end(0, 4096 * kMiB).done().exit(0);
  EXPECT_EQ(Classify(one.result()).outcome, scenario::Outcome::kPassed);
}

TEST(Classify, FaultRecordsWithBadIndicesAreIgnored) {
  Stream st;
  st.run_begin().step(0).fault("crash", 7, 0).fault("crash", -1, 0).run_end().done().exit(0);
  const auto a = Classify(st.result(), WithFaults({"crash"}));
  EXPECT_EQ(a.outcome, scenario::Outcome::kPassed);
  EXPECT_FALSE(a.faults.at(0).fired);
}

// BUG (harness/supervisor/outcome.cc, classify): the `done` status and the
// exit code are ignored once `done` is seen, so a worker that reports a
// divergence without a primary health event (e.g. the health line was lost)
// and says `done: diverged` with exit 1 is classified as passed.
TEST(Classify, WorkerThatSaysItFailedIsNeverPassed) {
  Stream st;
  st.run_begin().step(0).begin(1)
      .error("non-finite loss in total at step 1", 1, "", "diverged")
      .done("diverged")
      .exit(1);
  const auto a = Classify(st.result());
  EXPECT_NE(a.outcome, scenario::Outcome::kPassed);
  EXPECT_TRUE(supervisor::is_failure(a.outcome));
}

// BUG (harness/supervisor/outcome.cc, classify): the worker reports its own
// failures (a resolved scenario it cannot read) as an error of kind
// "harness" and exits 3; style.md says harness bugs become kUnresolved with
// the exception text, but classify calls it a training failure (kFailed,
// class "exception").
TEST(Classify, HarnessErrorInTheWorkerIsUnresolved) {
  Stream st;
  proto::WorkerError harness_error;
  harness_error.kind = "harness";
  harness_error.message = "scenario.resolved.json:3:1: expected valid YAML";
  st.add(harness_error);
  st.exit(3);
  const auto a = Classify(st.result());
  EXPECT_EQ(to_string(a.outcome), "unresolved");
  EXPECT_NE(a.failure.message.find("expected valid YAML"), std::string::npos);
}

// --- attribution never reads the fault schedule or the fault records ---------

TEST(Classify, AttributionWithoutFaultRecordsIsIdentical) {
  {
    SCOPED_TRACE("diverged");
    Stream st;
    st.run_begin().step(0).begin(1).fault("nan_activation", 0, 1, "decoder.fusion")
        .health("activation", 1, "decoder.fusion")
        .error("non-finite activation in decoder.fusion at step 1", 1, "head.binarize", "diverged")
        .done("diverged")
        .exit(1);
    ExpectAttributionIgnoresFaultRecords(st.result(), WithFaults({"nan_activation"}));
  }
  {
    SCOPED_TRACE("failed");
    Stream st;
    st.run_begin().step(0).step(1).begin(2).fault("cuda_error", 0, 2, "decoder.fusion")
        .error("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", 2, "decoder.fusion")
        .done("error")
        .exit(1);
    ExpectAttributionIgnoresFaultRecords(st.result(), WithFaults({"cuda_error"}));
  }
  {
    SCOPED_TRACE("crashed");
    Stream st;
    st.run_begin().step(0).begin(1).fault("crash", 0, 1).signal(SIGABRT);
    ExpectAttributionIgnoresFaultRecords(st.result(), WithFaults({"crash"}));
  }
  {
    SCOPED_TRACE("hung");
    Stream st;
    st.run_begin().begin(0).fault("hang", 0, 0).signal(SIGTERM);
    st.result().result.hung = true;
    ExpectAttributionIgnoresFaultRecords(st.result(), WithFaults({"hang"}));
  }
  {
    SCOPED_TRACE("gradient in the head");
    Stream st;
    st.run_begin().begin(0).fault("unstable_binarization", 0, 0, "head.binarize")
        .health("gradient", 0, "head.thresh.up2")
        .done("diverged")
        .exit(1);
    ExpectAttributionIgnoresFaultRecords(st.result(), WithFaults({"unstable_binarization"}));
  }
}

TEST(Classify, AttributionComesFromMonitorsNotFromWhereTheFaultSaysItFired) {
  // A fault record that names another module and step changes nothing.
  Stream st;
  st.run_begin().step(0).begin(1).fault("nan_activation", 0, 0, "encoder.stem")
      .health("activation", 1, "decoder.fusion")
      .done("diverged")
      .exit(1);
  const auto a = Classify(st.result(), WithFaults({"nan_activation"}));
  EXPECT_EQ(a.failure.module, "decoder.fusion");
  EXPECT_EQ(a.failure.step, 1);
}

// --- names ---------------------------------------------------------------------------

// Note [Loss-scaler skips]: the report names run 0's skipped steps.
TEST(ScalerSkips, TheReportNamesRunZerosSkippedStepsOnly) {
  supervisor::TrialAnalysis a;
  EXPECT_TRUE(supervisor::scaler_skipped_steps(a).empty());
  EXPECT_EQ(supervisor::scaler_skips_text(a), "");
  for (int64_t step = 0; step < 12; ++step) {
    supervisor::StepRecord st;
    st.step = step;
    st.skipped = step < 2 || (step >= 3 && step < 11);
    a.steps.push_back(st);
  }
  supervisor::StepRecord other_run;
  other_run.run = 1;
  other_run.step = 2;
  other_run.skipped = true;
  a.steps.push_back(other_run);
  a.steps_completed = 12;
  EXPECT_EQ(supervisor::scaler_skipped_steps(a), (std::vector<int64_t>{0, 1, 3, 4, 5, 6, 7, 8, 9, 10}));
  const std::string text = supervisor::scaler_skips_text(a);
  EXPECT_EQ(text.rfind("skipped 10 of 12 optimizer steps (steps 0, 1, 3, 4, 5, 6, 7, 8, …)", 0), 0u) << text;
  EXPECT_NE(text.find("8 in a row a divergence"), std::string::npos) << text;
}

TEST(OutcomeNames, RoundTripAndFailureSet) {
  for (scenario::Outcome o : {scenario::Outcome::kPassed, scenario::Outcome::kFailed, scenario::Outcome::kCrashed, scenario::Outcome::kTimedOut,
                    scenario::Outcome::kHung, scenario::Outcome::kDiverged, scenario::Outcome::kNondeterministic, scenario::Outcome::kLeaked,
                    scenario::Outcome::kSkipped, scenario::Outcome::kUnresolved}) {
    EXPECT_EQ(scenario::outcome_from_string(to_string(o)), o);
    EXPECT_EQ(supervisor::is_failure(o), o != scenario::Outcome::kPassed && o != scenario::Outcome::kSkipped) << to_string(o);
  }
  EXPECT_FALSE(scenario::outcome_from_string("exploded").has_value());
  EXPECT_EQ(supervisor::signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(supervisor::signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(supervisor::signal_name(64), "signal 64");
}

TEST(KnowledgeBase, ShippedClassesCoverEveryClassTheClassifierNames) {
  const auto& kb = Kb();
  for (const char* id : {"nonfinite_input", "nonfinite_label", "nonfinite_activation", "nonfinite_gradient",
                         "nonfinite_loss", "data_invalid", "cuda_oom", "host_oom", "cudnn_no_engine",
                         "cudnn_execution_failed", "illegal_instruction", "illegal_memory_access",
                         "crash_signal", "hang", "nondeterminism", "leak_across_runs", "premature_exit"}) {
    const kb::FailureClass* c = kb.find(id);
    ASSERT_NE(c, nullptr) << id;
    EXPECT_FALSE(c->title.empty()) << id;
  }
  EXPECT_EQ(kb.match_message("no signature here"), nullptr);
}

// A resolution's `verify:` overrides (and the keys their `{key*N}`,
// `{key/N}` values are computed from) name scenario keys of the table, or
// `faults[name=NAME].param` with NAME a catalogued fault and param one of its
// parameters: a key renamed in the schema fails here, not when
// --verify-resolutions first tries the resolution on a failing run.
TEST(KnowledgeBase, ResolutionOverridesNameScenarioKeysOrFaultParameters) {
  size_t overrides = 0;
  for (const kb::FailureClass& c : Kb().classes()) {
    for (const kb::FailureClass::Check& check : c.checks) {
      for (const std::string& kv : check.overrides) {
        ++overrides;
        SCOPED_TRACE(c.id + ": " + kv);
        // The selector's name holds a '=' of its own: the key ends at the
        // first '=' after it.
        const std::string selector = "faults[name=";
        const bool selects = kv.rfind(selector, 0) == 0;
        const size_t close = selects ? kv.find("].") : 0;
        ASSERT_NE(close, std::string::npos);
        const size_t eq = kv.find('=', selects ? close : 0);
        ASSERT_NE(eq, std::string::npos);
        const std::string key = kv.substr(0, eq);
        if (selects) {
          const scenario::FaultSpec* fault = scenario::find_fault(key.substr(selector.size(), close - selector.size()));
          ASSERT_NE(fault, nullptr);
          const std::string param = key.substr(close + 2);
          EXPECT_TRUE(std::any_of(fault->params.begin(), fault->params.end(),
                                  [&](const scenario::ParamSpec& p) { return p.name == param; }));
        } else {
          EXPECT_NE(scenario::find_scenario_key(key), nullptr);
        }
        const std::string value = kv.substr(eq + 1);
        if (value.size() >= 2 && value.front() == '{' && value.back() == '}') {
          const std::string from = value.substr(1, value.find_first_of("*/") - 1);
          const scenario::KeySpec* k = scenario::find_scenario_key(from);
          ASSERT_NE(k, nullptr) << from;
          EXPECT_TRUE(k->type == scenario::KeyType::kInt || k->type == scenario::KeyType::kNumber)
              << from << ": a template computes from a numeric key";
        }
      }
    }
  }
  EXPECT_GT(overrides, 0u) << "reports/kb/failures.yaml has no verify: entries";
}

}  // namespace
}  // namespace dbh::harness

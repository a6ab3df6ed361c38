#include "harness/diagnose/hypotheses.h"

#include <algorithm>
#include <map>

#include "harness/common/text.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::diagnose {

std::string to_string(HypothesisId id) {
  switch (id) {
    case HypothesisId::kData: return "data";
    case HypothesisId::kLoader: return "loader";
    case HypothesisId::kModel: return "model";
    case HypothesisId::kDevice: return "device";
    case HypothesisId::kCudnn: return "cudnn";
    case HypothesisId::kAmp: return "amp";
    case HypothesisId::kMemory: return "memory";
    case HypothesisId::kResources: return "resources";
    case HypothesisId::kKernel: return "kernel";
    case HypothesisId::kOptimizer: return "optimizer";
    case HypothesisId::kLabels: return "labels";
    case HypothesisId::kOverrides: return "overrides";
  }
  return "model";
}

std::string to_string(Strength s) { return s == Strength::kShows ? "shows" : "suggests"; }

int Hypothesis::weight_for() const {
  int w = 0;
  for (const auto& e : support) w += static_cast<int>(e.strength);
  return w;
}

int Hypothesis::weight_against() const {
  int w = 0;
  for (const auto& e : refute) w += static_cast<int>(e.strength);
  return w;
}

std::optional<HypothesisId> hypothesis_of_key(const std::string& key) {
  // One row per setting a hypothesis is about; a row ending in '.' or '_' is a prefix.
  static const std::pair<const char*, HypothesisId> kRows[] = {
      {"train.lr", HypothesisId::kOptimizer},          {"train.optimizer", HypothesisId::kOptimizer},
      {"train.momentum", HypothesisId::kOptimizer},    {"train.weight_decay", HypothesisId::kOptimizer},
      {"train.grad_clip", HypothesisId::kOptimizer},   {"train.warmup_steps", HypothesisId::kOptimizer},
      {"train.precision", HypothesisId::kAmp},         {"data.batch_size", HypothesisId::kMemory},
      {"train.accumulation", HypothesisId::kMemory},   {"hardware.memory_budget", HypothesisId::kMemory},
      {"data.num_workers", HypothesisId::kLoader},     {"hardware.cudnn_", HypothesisId::kCudnn},
      {"data.path", HypothesisId::kData},              {"data.subset", HypothesisId::kData},
      {"data.source", HypothesisId::kData},            {"labels.", HypothesisId::kLabels},
  };
  for (const auto& [row, id] : kRows) {
    const std::string r = row;
    const bool prefix = r.back() == '.' || r.back() == '_';
    if (prefix ? key.rfind(r, 0) == 0 : key == r) return id;
  }
  return std::nullopt;
}

std::optional<HypothesisId> hypothesis_of_override(const std::string& override_text) {
  const size_t eq = override_text.find('=');
  const std::string key = override_text.substr(0, eq);
  if (const auto id = hypothesis_of_key(key)) return id;
  // A Lightning key passed to the user's training as written
  // (`trainer.gradient_clip_val=1e-12`) is a setting of what its dbh key is.
  const auto alias =
      eq == std::string::npos ? std::nullopt : scenario::translate_alias(key, override_text.substr(eq + 1));
  if (alias && alias->kind == scenario::AliasTranslation::Kind::kMapped) return hypothesis_of_key(alias->key);
  return std::nullopt;
}

const std::vector<RungId>& rungs_about(HypothesisId id) {
  // One row per rung: the hypotheses its result can weigh for or against.
  using H = HypothesisId;
  static const std::vector<std::pair<RungId, std::vector<H>>> kRows = {
      {RungId::kOps, {H::kDevice}},
      {RungId::kModelStep, {H::kModel}},
      {RungId::kSynthetic, {H::kData, H::kModel, H::kKernel}},
      {RungId::kRealNoWorkers, {H::kData, H::kLoader}},
      {RungId::kRealWorkers, {H::kLoader}},
      {RungId::kOneRunPerProcess, {H::kResources}},
      {RungId::kCudnnDeterministic, {H::kCudnn, H::kKernel}},
      {RungId::kCudnnBenchmarkOff, {H::kCudnn, H::kKernel}},
      {RungId::kCudnnDisabled, {H::kCudnn, H::kKernel}},
      {RungId::kFp32, {H::kAmp, H::kKernel}},
      {RungId::kBf16, {H::kAmp, H::kKernel}},
      {RungId::kSmallerBatch, {H::kMemory, H::kKernel}},
      {RungId::kMoreMemory, {H::kMemory, H::kKernel}},
      {RungId::kBlockingLaunches, {H::kDevice, H::kKernel}},
      {RungId::kLowerLearningRate, {H::kOptimizer, H::kModel, H::kKernel}},
      {RungId::kLearnsSynthetic, {H::kOptimizer, H::kLabels}},
      {RungId::kLearnsReal, {H::kLabels}},
      {RungId::kWithoutOverrides, {H::kOverrides}},
      {RungId::kFixedBatch, {H::kData, H::kModel, H::kOptimizer}},
  };
  static const std::map<H, std::vector<RungId>> kAbout = [] {
    std::map<H, std::vector<RungId>> about;
    for (const auto& [rung, hyps] : kRows) {
      for (const H h : hyps) about[h].push_back(rung);
    }
    return about;
  }();
  static const std::vector<RungId> kNone;
  const auto it = kAbout.find(id);
  return it != kAbout.end() ? it->second : kNone;
}

const RungEvidence* Ladder::find(RungId id) const {
  for (const auto& r : rungs) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

bool grows_across_runs(const kb::FailureClass& c) {
  return std::find(c.events.begin(), c.events.end(), "leaked") != c.events.end();
}

FailureKind failure_kind(const std::string& klass, bool silent_class, bool resource_class) {
  if (klass.empty()) return FailureKind::kNone;
  if (klass == "cuda_launch_failure" || klass == "illegal_instruction" || klass == "illegal_memory_access" ||
      klass == "cudnn_execution_failed") {
    return FailureKind::kKernel;
  }
  if (silent_class) return FailureKind::kSilent;
  if (resource_class) return FailureKind::kResources;
  return FailureKind::kCrashOrError;
}

namespace {

std::vector<Hypothesis> declared_hypotheses() {
  return {
      {HypothesisId::kData, "The real data: an invalid or unusual sample breaks training", {}, {}, "`{dbh} bisect data {scenario}`"},
      {HypothesisId::kLoader, "Data loading with worker threads", {}, {},
       "train with " + scenario::override_text(DBH_SCENARIO_KEY(data.num_workers), "0")},
      {HypothesisId::kModel, "The model, loss or trainer numerics, independent of the data", {}, {},
       "`{dbh} bisect steps {scenario}`, then `{dbh} bisect modules {scenario}`"},
      {HypothesisId::kDevice, "The device, driver or CUDA/cuDNN libraries", {}, {},
       "check `{dbh} env`; update driver/cuDNN"},
      {HypothesisId::kCudnn, "A cuDNN algorithm choice", {}, {},
       "set " + scenario::override_text(DBH_SCENARIO_KEY(hardware.cudnn_deterministic), "true") + " or benchmark off"},
      {HypothesisId::kAmp, "Mixed-precision numerics", {}, {}, "keep the head and losses in fp32, or train fp32"},
      {HypothesisId::kMemory, "Memory exhaustion (batch too large for the budget)", {}, {},
       "`{dbh} qualify {scenario} --profile NAME` (`{dbh} list profiles`), or a smaller batch with accumulation"},
      {HypothesisId::kResources,
       "Resources that grow from one run to the next in one process (memory, handles, threads, files)", {}, {},
       "release models, optimizers and cached tensors between runs (and close files and loader workers), or run "
       "each training in a fresh process (" +
           scenario::override_text(DBH_SCENARIO_KEY(repeat.in_process), "1") +
           "); `{dbh} repeat {scenario}` measures the growth per run"},
      {HypothesisId::kKernel, "A CUDA kernel that faults (a sticky error that no setting avoids)", {}, {},
       "re-run with " + scenario::override_text(DBH_SCENARIO_KEY(hardware.launch_blocking), "true") +
           " under compute-sanitizer; `{dbh} bisect modules {scenario}`"},
      {HypothesisId::kOptimizer,
       "The optimizer or its learning rate: updates so large the run diverges, or too small to learn anything", {},
       {},
       "check the learning rate the optimizer applies (the lr column of metrics.csv) and that it holds the "
       "model's parameters; train with a lower learning rate or gradient clipping when the run diverges; `{dbh} "
       "bisect config {scenario} --good KEY=VALUE… --bad KEY=VALUE…` against a configuration that trains"},
      {HypothesisId::kLabels,
       "The labels or the input as the model sees them (off the words, another image's, black or saturated images)",
       {}, {},
       "look at the overlays of the failing batch and at `{dbh} data show DATASET --index N` for its samples; "
       "`{dbh} bisect config {scenario} --good KEY=VALUE… --bad KEY=VALUE…` against a configuration that learns"},
      {HypothesisId::kOverrides, "A setting the command changes (its overrides of the scenario)", {}, {},
       "drop or correct the override the config bisection names (below), or train with the scenario as it is"},
  };
}

// The hypothesis a variant rung speaks to.
HypothesisId variant_hypothesis(RungId id) {
  switch (id) {
    case RungId::kCudnnDeterministic:
    case RungId::kCudnnBenchmarkOff:
    case RungId::kCudnnDisabled: return HypothesisId::kCudnn;
    case RungId::kFp32:
    case RungId::kBf16: return HypothesisId::kAmp;
    case RungId::kSmallerBatch:
    case RungId::kMoreMemory: return HypothesisId::kMemory;
    case RungId::kLowerLearningRate: return HypothesisId::kOptimizer;
    default: return HypothesisId::kDevice;
  }
}

bool is_variant(RungId id) {
  switch (id) {
    case RungId::kCudnnDeterministic:
    case RungId::kCudnnBenchmarkOff:
    case RungId::kCudnnDisabled:
    case RungId::kFp32:
    case RungId::kBf16:
    case RungId::kSmallerBatch:
    case RungId::kMoreMemory:
    case RungId::kBlockingLaunches:
    case RungId::kLowerLearningRate: return true;
    default: return false;
  }
}

}  // namespace

namespace {

// What each rung and the failure's class say for and against each
// hypothesis, weighed in a fixed order (the order of the evidence lines).
class Weighing {
 public:
  explicit Weighing(const Ladder& l)
      : l_(l),
        hyps_(declared_hypotheses()),
        fails_(l.kind != FailureKind::kNone),
        silent_(l.kind == FailureKind::kSilent),
        kernel_(l.kind == FailureKind::kKernel),
        resources_(l.kind == FailureKind::kResources) {}

  // The device rung, and the model without the real data.
  void device_and_synthetic() {
    const bool fails = fails_, silent = silent_, kernel = kernel_, resources = resources_;
    const auto& ops = rung(RungId::kOps);
    const auto& synth = rung(RungId::kSynthetic);
    if (ops.failed()) H(HypothesisId::kDevice).support.push_back(ops.cite());
    if (ops.passed()) H(HypothesisId::kDevice).refute.push_back(ops.cite());
    if (synth.passed() && fails) {
      H(HypothesisId::kData).support.push_back(synth.cite() + " while the scenario fails");
      H(HypothesisId::kModel).refute.push_back(synth.cite());
    }
    if (synth.failed()) {
      // A silent failure on synthetic data is a learning question (the
      // learning rungs), growth across runs is a resource question (the
      // one-run rung): neither is evidence about the numerics. A sticky CUDA
      // error whatever the data points at the kernel.
      if (kernel) {
        H(HypothesisId::kKernel).support.push_back(synth.cite());
      } else if (!silent && !resources) {
        H(HypothesisId::kModel).support.push_back(synth.cite());
      }
      H(HypothesisId::kData).refute.push_back(synth.cite() + " (fails without real data)");
    }
  }

  // Note [The learning rung]: a run that stays finite but learns nothing.
  void silent_failure() {
    const bool silent = silent_;
    const auto& learns_synth = rung(RungId::kLearnsSynthetic);
    const auto& learns_real = rung(RungId::kLearnsReal);
    if (silent) {
      H(HypothesisId::kModel).refute.push_back("the run stays finite: the failure class is `" + l_.klass + "`");
      if (l_.klass == "labels_degenerate" || l_.klass == "input_denormalised") {
        H(HypothesisId::kLabels).support.push_back("the failure class is `" + l_.klass + "`");
      }
      // Flat on synthetic boxes too: the optimizer. Failing there by another
      // silent check (labels, input, predictions): the label or input
      // pipeline, whatever the dataset.
      const bool flat_synth = learns_synth.failed() && learns_synth.klass == "not_learning";
      if (flat_synth) {
        H(HypothesisId::kOptimizer).support.push_back(learns_synth.cite());
        H(HypothesisId::kLabels)
            .refute.push_back(learns_synth.cite() + " (nothing is learnt without the real labels either)");
      } else if (learns_synth.failed()) {
        H(HypothesisId::kLabels)
            .support.push_back(learns_synth.cite() + " (the pipeline fails the same way without the real data)");
        H(HypothesisId::kOptimizer).refute.push_back(learns_synth.cite() + " (not a flat loss)");
      }
      if (learns_synth.passed()) {
        H(HypothesisId::kOptimizer).refute.push_back(learns_synth.cite());
        if (learns_real.failed() || !l_.real_data) {
          H(HypothesisId::kLabels).support.push_back(learns_synth.cite() + " while the scenario fails");
        }
      }
      if (learns_real.failed() && learns_synth.passed()) H(HypothesisId::kLabels).support.push_back(learns_real.cite());
      if (learns_real.passed() && learns_synth.passed()) {
        H(HypothesisId::kLabels).refute.push_back(learns_real.cite() + " (the loss falls: what fails comes later)");
      }
    }
  }

  // A sticky CUDA error, and the variants that fail with it.
  void kernel_error() {
    const bool kernel = kernel_;
    if (kernel) {
      H(HypothesisId::kKernel).support.push_back("the failure class is `" + l_.klass + "`, a sticky CUDA error");
      for (const auto& v : l_.rungs) {
        if (is_variant(v.id) && v.failed() && v.klass == l_.klass) {
          H(HypothesisId::kKernel).support.push_back(v.cite() + " (the same error)");
        }
      }
    }
  }

  // What the runs of one process leave behind.
  void resources_across_runs() {
    const bool fails = fails_, resources = resources_;
    const auto& one_run = rung(RungId::kOneRunPerProcess);
    // Note [Resources across runs]: "works on the first run, fails on the
    // second". Each run passing in a fresh process while the runs of one
    // process fail puts the cause in what the runs leave behind, not in any
    // one run's values.
    if (resources) {
      H(HypothesisId::kResources)
          .support.push_back("the failure class is `" + l_.klass + "`: something grows from one run to the next");
      H(HypothesisId::kModel).refute.push_back("the failure is growth across runs, not a value of one run (`" +
                                               l_.klass + "`)");
    }
    if (fails && one_run.passed()) {
      H(HypothesisId::kResources).support.push_back(one_run.cite() + " while the runs together fail");
    }
    if (one_run.failed()) {
      H(HypothesisId::kResources).refute.push_back(one_run.cite() + " (a run fails in a fresh process too)");
    }
  }

  // The model step, a lower learning rate, the real data with and without workers.
  void model_data_loader() {
    const bool silent = silent_, resources = resources_;
    const auto& model_step = rung(RungId::kModelStep);
    const auto& synth = rung(RungId::kSynthetic);
    const auto& real0 = rung(RungId::kRealNoWorkers);
    const auto& realw = rung(RungId::kRealWorkers);
    const RungEvidence* lower_lr = trained_rate();
    if (model_step.failed() && !resources) H(HypothesisId::kModel).support.push_back(model_step.cite());
    // The same model, loss and data training through at a lower learning
    // rate: what failed without the real data failed by its updates.
    if (lower_lr != nullptr && (synth.failed() || model_step.failed())) {
      H(HypothesisId::kModel).refute.push_back(lower_lr->cite() + " (the same model and loss train at a lower "
                                               "learning rate)");
    }
    // Failing on the real data says something about the data only beside the
    // synthetic rung (a worker without synthetic data has none).
    if (real0.failed() && !silent && !resources && synth.ran) H(HypothesisId::kData).support.push_back(real0.cite());
    if (real0.passed() && realw.failed()) {
      H(HypothesisId::kLoader).support.push_back(real0.cite() + "; " + realw.cite());
    }
    if (real0.failed()) H(HypothesisId::kLoader).refute.push_back(real0.cite() + " (fails without workers)");
  }

  // Each variant that ran, and what the failure's class says by itself.
  void variants_and_classes() {
    const bool fails = fails_;
    for (const auto& v : l_.rungs) {
      if (!is_variant(v.id) || !v.ran || v.id == RungId::kLowerLearningRate) continue;
      weigh_change(H(variant_hypothesis(v.id)), v, "");
    }
    learning_rate_search();
    command_overrides();
    fixed_batch();
    if (fails && l_.memory_exhaustion) {
      H(HypothesisId::kMemory).support.push_back("the failure class is `" + l_.klass + "`");
    }
    if (fails && l_.data_invalid) H(HypothesisId::kData).support.push_back(std::string("the failure class is `data_invalid`"));
  }

  // The ranking and the one conclusion (ties and no evidence are `unsure`).
  LadderConclusion conclude() {
    const bool fails = fails_, silent = silent_, resources = resources_;
    const auto& synth = rung(RungId::kSynthetic);
    std::stable_sort(hyps_.begin(), hyps_.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score() > b.score(); });

    LadderConclusion j;
    j.data_dependent = fails && synth.passed() && l_.real_data && !silent && !resources;
    const int top = hyps_.front().score();
    for (const auto& h : hyps_) {
      if (top > 0 && h.score() == top) j.tied.push_back(h.id);
    }
    if (j.tied.size() < 2) j.tied.clear();
    // Unsure: the rungs that could have decided, and why they did not run.
    if (fails && !j.data_dependent && (top <= 0 || !j.tied.empty())) {
      std::vector<HypothesisId> open = j.tied;
      if (open.empty()) {
        for (const auto& h : hyps_) open.push_back(h.id);
      }
      std::vector<RungId> listed;
      for (const auto h : open) {
        for (const auto r : rungs_about(h)) {
          const RungEvidence* e = l_.find(r);
          const bool undecided = e != nullptr && (e->blocked || (e->ran && !e->passed() && !e->failed()));
          if (!undecided || std::find(listed.begin(), listed.end(), r) != listed.end()) {
            continue;
          }
          listed.push_back(r);
          j.could_decide.push_back(e->cite());
        }
      }
    }
    j.conclusion = j.data_dependent            ? "data-dependent"
                   : !fails                    ? "passes"
                   : top > 0 && j.tied.empty() ? to_string(hyps_.front().id)
                                               : "unsure";
    j.find_samples = j.data_dependent || (fails && !silent && !resources && top > 0 && j.tied.empty() &&
                                          hyps_.front().id == HypothesisId::kData);
    j.ranked = std::move(hyps_);
    return j;
  }

 private:
  // Note [Evidence by direction]: what one change `v` did to the failure,
  // for or against `h`. `larger` says why an unchanged failure is no proof
  // ("" when the change is large enough to matter).
  void weigh_change(Hypothesis& h, const RungEvidence& v, const std::string& larger) {
    if (v.passed()) {
      h.support.push_back(v.cite());
      return;
    }
    if (!v.failed() || v.klass != l_.klass) return;  // another failure, or none it could tell: neither way
    if (v.step && l_.failure_step && *v.step > *l_.failure_step) {
      h.support.push_back({v.cite() + " (the failure moves later: step " + std::to_string(*l_.failure_step) +
                               " → " + std::to_string(*v.step) + ")",
                           Strength::kSuggests});
      return;
    }
    if (larger.empty()) {
      h.refute.push_back(v.cite() + " (the same failure, unchanged)");
    } else {
      h.refute.push_back({v.cite() + " (unchanged, but " + larger + ")", Strength::kSuggests});
    }
  }

  // Note [The run without the command's overrides]: the scenario without
  // them training while it fails with them puts the cause in a setting the
  // command changes; the config bisection's confirmed answer names which,
  // and weighs for the hypothesis that setting belongs to (a learning rate:
  // the optimizer) or, for a setting no hypothesis is about, for the
  // overrides themselves.
  void command_overrides() {
    const auto& without = rung(RungId::kWithoutOverrides);
    auto& h = H(HypothesisId::kOverrides);
    if (fails_ && without.passed()) h.support.push_back(without.cite() + " while the scenario with them fails");
    if (without.failed()) h.refute.push_back(without.cite() + " (fails without them too)");
    if (l_.override_cause.empty()) return;
    std::optional<HypothesisId> about;
    bool one = true;
    std::string text;
    for (const auto& o : l_.override_cause) {
      const auto id = hypothesis_of_override(o);
      one = one && id && (!about || *about == *id);
      about = id;
      text += (text.empty() ? "" : " + ") + std::string("`") + o + "`";
    }
    text = "the config bisection's confirmed answer: " + text;
    if (one && about) {
      // The overrides' evidence is this hypothesis's: the setting is one of its own.
      auto& to = H(*about);
      to.support.insert(to.support.end(), h.support.begin(), h.support.end());
      h.support.clear();
      to.support.push_back(text + " (a setting of this hypothesis)");
    } else {
      h.support.push_back(text);
    }
  }

  // Note [The first batch, repeated]: a crash or error that one batch,
  // repeated, does not reproduce comes with the data stream; one it does
  // reproduce (as early) needs no data stream, and the model or its
  // optimizer cannot fit one batch. Unless the failure is the batch's own
  // content (a sample that cannot be read, a non-finite input or label):
  // then the first batch holds what fails, and that is the data.
  void fixed_batch() {
    const auto& one = rung(RungId::kFixedBatch);
    if (l_.kind != FailureKind::kCrashOrError) return;
    if (one.passed()) {
      H(HypothesisId::kData).support.push_back(one.cite() + " while the scenario fails: what breaks it comes with "
                                               "the data stream");
      H(HypothesisId::kModel).refute.push_back({one.cite() + " (the model fits one batch)", Strength::kSuggests});
      H(HypothesisId::kOptimizer).refute.push_back({one.cite() + " (the updates stay finite on one batch)",
                                                    Strength::kSuggests});
      return;
    }
    if (!one.failed() || one.klass != l_.klass || (one.step && l_.failure_step && *one.step > *l_.failure_step)) return;
    if (l_.data_invalid || l_.klass == "nonfinite_input" || l_.klass == "nonfinite_label") {
      H(HypothesisId::kData).support.push_back(
          {one.cite() + " (the first batch itself holds what fails: `" + l_.klass + "` is the batch's own content)",
           Strength::kSuggests});
      return;
    }
    H(HypothesisId::kData).refute.push_back(one.cite() + " (fails on one batch, without the data stream)");
    H(HypothesisId::kModel).support.push_back({one.cite() + " (the model cannot fit one batch)", Strength::kSuggests});
    H(HypothesisId::kOptimizer).support.push_back({one.cite() + " (nor its optimizer)", Strength::kSuggests});
  }

  // Note [The learning rate, searched]: the rates the search tried, as one
  // line: the largest that trains shows the optimizer; a failure that moves
  // later as the rate falls suggests it; the same failure down to the
  // configuration's own rate (or six decades) shows against it.
  void learning_rate_search() {
    std::vector<const RungEvidence*> tries;
    for (const auto& r : l_.rungs) {
      if (r.id == RungId::kLowerLearningRate && r.ran) tries.push_back(&r);
    }
    if (tries.empty()) return;
    auto& h = H(HypothesisId::kOptimizer);
    if (const RungEvidence* best = trained_rate()) {
      h.support.push_back(best->cite() + " (the largest rate tried that trains)");
      return;
    }
    const RungEvidence* latest = nullptr;
    for (const auto* t : tries) {
      if (t->failed() && t->klass == l_.klass && t->step && l_.failure_step && *t->step > *l_.failure_step &&
          (latest == nullptr || *t->step > *latest->step)) {
        latest = t;
      }
    }
    if (latest != nullptr) {
      weigh_change(h, *latest, "");
      return;
    }
    const RungEvidence& lowest = *tries.back();
    const std::string floor = l_.lr_floor_is_configured ? "the configuration's own rate" : "six decades below";
    weigh_change(h, lowest, l_.lr_reached_floor ? "" : "the search stopped above " + floor);
  }

  // The lower learning rate with the largest rate that trained, or nullptr.
  const RungEvidence* trained_rate() const {
    const RungEvidence* best = nullptr;
    for (const auto& r : l_.rungs) {
      if (r.id == RungId::kLowerLearningRate && r.passed() && (best == nullptr || r.rate > best->rate)) best = &r;
    }
    return best;
  }

  Hypothesis& H(HypothesisId id) {
    return *std::find_if(hyps_.begin(), hyps_.end(), [&](const Hypothesis& h) { return h.id == id; });
  }
  const RungEvidence& rung(RungId id) const {
    const RungEvidence* r = l_.find(id);
    return r != nullptr ? *r : none_;
  }

  const Ladder& l_;
  std::vector<Hypothesis> hyps_;
  const RungEvidence none_{};
  const bool fails_, silent_, kernel_, resources_;
};

}  // namespace

LadderConclusion conclude_ladder(const Ladder& ladder) {
  Weighing w(ladder);
  w.device_and_synthetic();
  w.silent_failure();
  w.kernel_error();
  w.resources_across_runs();
  w.model_data_loader();
  w.variants_and_classes();
  return w.conclude();
}

std::string rung_departure(RungId id, const supervisor::TrialAnalysis& a) {
  const std::string steps = std::to_string(a.steps_completed) + " step(s)";
  if (const int64_t trained = a.steps_completed - a.ops_steps; id == RungId::kOps && trained > 0) {
    return "its trial trained " + std::to_string(trained) + " step(s), but the ops rung trains none (train.mode=ops "
           "not applied)";
  }
  if (id == RungId::kModelStep && a.steps_completed > 1) {
    return "its trial trained " + steps + ", but the rung trains one (train.stop_after=1 not applied)";
  }
  const bool synthetic = id == RungId::kModelStep || id == RungId::kSynthetic || id == RungId::kLearnsSynthetic;
  // (A synthetic dataset served through the adapter reports its reads too:
  // a read is no departure, a read that raised is.)
  if (synthetic && (a.failed_sample || a.failure.klass == "data_invalid")) {
    return "its trial failed reading a sample, but the rung trains on generated data, which has none to fail "
           "(data.source not applied)";
  }
  return "";
}

std::string start_departure(RungId id, const supervisor::TrialAnalysis& trial,
                            const supervisor::TrialAnalysis& scenario_run) {
  if (id == RungId::kOps || id == RungId::kAsGiven) return "";
  const bool failed = supervisor::is_failure(trial.outcome) && trial.outcome != scenario::Outcome::kUnresolved;
  if (!failed || trial.failure.step.has_value() || trial.steps_completed > trial.ops_steps) return "";
  const int64_t trained = scenario_run.steps_completed - scenario_run.ops_steps;
  if (trained <= 0 || trial.failure.klass == scenario_run.failure.klass) return "";
  std::string said = one_line(trial.failure.message);
  if (said.size() > 160) said = truncate_utf8(said, 157) + "...";
  return "its trial ended before its first step (`" + trial.failure.klass + "`" + (said.empty() ? "" : ": " + said) +
         "), but the scenario's own run trained " + std::to_string(trained) +
         " step(s): it never started what the rung asks, so it says nothing of the scenario's failure";
}

}  // namespace dbh::harness::diagnose

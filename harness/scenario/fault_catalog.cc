#include "harness/scenario/fault_catalog.h"

#include "harness/scenario/fault_choices.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "harness/common/text.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "model/data/dataset_copy.h"
#include "model/observed_modules.h"

namespace dbh::harness::scenario {

namespace {

// Placement rules (Note [Fault registry]): where each fault cannot act.

void check_corrupt_sample(const FaultPlacement& p) {
  const auto& f = p.fault;
  const auto& s = p.scenario;
  // An override (a control run, a command line) may switch the source to
  // synthetic data, leaving the fault nothing to break; a scenario file that
  // places it on synthetic data is a mistake.
  if (s.data.source != DataSource::kReal && !p.source_overridden) {
    const std::string source = DBH_SCENARIO_KEY(data.source);
    p.fail("corrupt_sample on " + source + " real (it breaks a file of the dataset)",
           source + " " + to_string(s.data.source), "");
  }
  // The fault copies the dataset into the run folder: a dataset that cannot
  // be copied without leaving its folder is bad input, refused before
  // anything is written.
  if (s.data.source == DataSource::kReal && p.reads_inputs) {
    if (const auto problems = model::dataset_copy_problems(s.data.path); !problems.empty()) {
      p.fail("a dataset folder corrupt_sample can copy without leaving it (" +
                 std::string(DBH_SCENARIO_KEY(data.path)) + ")",
             problems.front(), "name");
    }
  }
  if (const auto samples = p.samples(); samples && f.get_int("sample") >= *samples) {
    p.fail_param("sample", "a dataset index below " + std::to_string(*samples), std::to_string(f.get_int("sample")));
  }
  if (f.get_int("sample") < 0) p.fail_param("sample", "a non-negative index", f.get("sample"));
}

// nan_input, inf_input, nan_label: a sample of the batch, some pixels.
void check_batch_pixels(const FaultPlacement& p) {
  const auto& f = p.fault;
  if (f.get_int("sample") < 0 || f.get_int("sample") >= p.scenario.data.batch_size) {
    p.fail_param("sample",
                 "a sample of the batch, below " + std::string(DBH_SCENARIO_KEY(data.batch_size)) + " (" +
                     std::to_string(p.scenario.data.batch_size) + ")",
                 f.get("sample"));
  }
  if (f.get_int("count") < 1) p.fail_param("count", "at least 1 pixel", f.get("count"));
}

void check_nan_gradient(const FaultPlacement& p) {
  const std::string& m = p.fault.get("module");
  if (m.empty() && p.fault.get("parameter").empty()) p.fail("nan_gradient with a module or a parameter", "neither", "");
  // A user's training has its own modules: the worker's `hello` lists them
  // and the supervisor checks the name against that list before training.
  if (p.scenario.worker.external()) return;
  const auto& owners = model::observed_modules_with_parameters(p.scenario.model.decoder);
  const bool has_params = std::any_of(owners.begin(), owners.end(), [&](const std::string& n) {
    return n == m || n.rfind(m + ".", 0) == 0 || m.rfind(n + ".", 0) == 0;
  });
  if (!m.empty() && !has_params) {
    p.fail_param("module", "a module with parameters (nan_gradient replaces their gradients)",
                 quoted_excerpt(m) + ", which has none");
  }
  const std::string& param = p.fault.get("parameter");
  if (!param.empty() && !model::is_parameter_name(p.scenario.model.decoder, param)) {
    p.fail_param("parameter", "a full parameter name of the model such as decoder.fusion.0.weight",
                 quoted_excerpt(param));
  }
}

void check_perturbation(const FaultPlacement& p) {
  const double r = p.fault.get_double("relative");
  if (!(std::abs(r) > 0 && std::abs(r) < 1)) {
    p.fail_param("relative", "a relative change in (-1, 1) other than 0", p.fault.get("relative"));
  }
}

void check_broken_postprocess(const FaultPlacement& p) {
  if (p.scenario.train.eval_every == 0) {
    const std::string eval_every = DBH_SCENARIO_KEY(train.eval_every);
    p.fail("broken_postprocess with validation during training (" + eval_every + " > 0)", eval_every + " 0", "");
  }
  for (const char* key : {"box_thresh", "binarize_thresh"}) {
    if (!p.fault.get(key).empty() && (p.fault.get_double(key) < 0 || p.fault.get_double(key) > 1)) {
      p.fail_param(key, "a threshold in [0, 1]", p.fault.get(key));
    }
  }
}

void check_nondeterminism(const FaultPlacement& p) {
  const int64_t micro = p.fault.get_int("micro_batch");
  if (micro < 0 || micro >= p.scenario.train.accumulation) {
    p.fail_param("micro_batch",
                 "a micro-batch below " + std::string(DBH_SCENARIO_KEY(train.accumulation)) + " (" +
                     std::to_string(p.scenario.train.accumulation) + ")",
                 p.fault.get("micro_batch"));
  }
}

// lr_spike, loss_scale_overflow: a factor of 1 changes nothing.
void check_factor_not_one(const FaultPlacement& p) {
  if (p.fault.get_double("factor") == 1.0) p.fail_param("factor", "a factor other than 1", p.fault.get("factor"));
}

// The label faults move, swap or mask text labels: random labels
// (synthetic_random) belong to no text, so there is nothing to break
// (tolerated when an override switched the source, as for corrupt_sample).
void check_labels_of_text(const FaultPlacement& p) {
  if (p.scenario.data.source == DataSource::kSyntheticRandom && !p.source_overridden) {
    p.fail(p.fault.name + " on labels of text (" + DBH_SCENARIO_KEY(data.source) +
               " real, synthetic_render or synthetic_boxes)",
           std::string(DBH_SCENARIO_KEY(data.source)) + " synthetic_random, whose labels are noise", "");
  }
}

void check_label_shift(const FaultPlacement& p) {
  check_labels_of_text(p);
  const auto& f = p.fault;
  if (f.get_int("dx") == 0 && f.get_int("dy") == 0) p.fail("a shift other than dx 0, dy 0", "dx 0, dy 0", "dx");
  for (const char* key : {"dx", "dy"}) {
    if (std::abs(f.get_int(key)) > p.scenario.data.size) {
      p.fail_param(key,
                   "a shift of at most " + std::string(DBH_SCENARIO_KEY(data.size)) + " (" +
                       std::to_string(p.scenario.data.size) + ") pixels",
                   f.get(key));
    }
  }
}

void check_label_scale(const FaultPlacement& p) {
  check_labels_of_text(p);
  const double factor = p.fault.get_double("factor");
  if (!(factor > 0) || factor == 1.0 || factor > 1000) {
    p.fail_param("factor", "a factor > 0 and <= 1000, other than 1", p.fault.get("factor"));
  }
}

void check_label_swap(const FaultPlacement& p) {
  check_labels_of_text(p);
  if (p.scenario.data.batch_size < 2) {
    p.fail("label_swap with " + std::string(DBH_SCENARIO_KEY(data.batch_size)) +
               " >= 2 (it swaps the labels of samples 0 and 1)",
           std::string(DBH_SCENARIO_KEY(data.batch_size)) + " " + std::to_string(p.scenario.data.batch_size), "name");
  }
}

// With one run per process the leak has nothing to grow into; such a
// scenario still asks a question when it runs several processes: whether a
// fresh process per run avoids the leak (the knowledge base's resolution for
// leak_across_runs, tried by --verify-resolutions).
void check_leak(const FaultPlacement& p) {
  const auto& r = p.scenario.repeat;
  if (r.in_process < 2 && r.processes < 2) {
    const std::string in_process = DBH_SCENARIO_KEY(repeat.in_process);
    const std::string processes = DBH_SCENARIO_KEY(repeat.processes);
    p.fail("leak with " + in_process + " >= 2 (it retains memory across in-process runs), or " + processes +
               " >= 2 (to show that a fresh process per run does not leak)",
           in_process + " " + std::to_string(r.in_process) + " and " + processes + " " + std::to_string(r.processes),
           "");
  }
}

// `text` as a parameter of type T, read by `parse`; nullopt when it is not one.
template <typename T>
std::optional<FaultParam> parsed_param(const std::string& text, bool (*parse)(const std::string&, T*)) {
  T v{};
  if (!parse(text, &v)) return std::nullopt;
  return FaultParam{text, v};
}

}  // namespace

std::optional<FaultParam> decode_fault_param(const ParamSpec& spec, const std::string& text) {
  switch (spec.type) {
    case ParamType::kInt:
      return parsed_param<int64_t>(text, parse_int);
    case ParamType::kDouble:
      return parsed_param<double>(text, parse_double);
    case ParamType::kBool:
      return parsed_param<bool>(text, parse_bool);
    case ParamType::kBytes: {
      const std::optional<int64_t> bytes = parse_bytes(text);
      if (!bytes) return std::nullopt;
      return FaultParam{text, *bytes};
    }
    case ParamType::kString:
    case ParamType::kModule:
    case ParamType::kModulePrefix:
      break;
  }
  return FaultParam{text, text};
}

std::string to_string(ParamType t) {
  switch (t) {
    case ParamType::kInt: return "int";
    case ParamType::kDouble: return "number";
    case ParamType::kString: return "string";
    case ParamType::kBool: return "bool";
    case ParamType::kBytes: return "bytes";
    case ParamType::kModule: return "module";
    case ParamType::kModulePrefix: return "module or prefix";
  }
  return "?";
}

const std::vector<ParamSpec>& schedule_params() {
  static const std::vector<ParamSpec> kParams = {
      {"at_step", ParamType::kInt, false, "0", {}, "first step (0-based) at which the fault fires"},
      {"until_step", ParamType::kInt, false, "", {},
       "last step it fires at (default: at_step only; every later step for the faults marked "
       "\"from at_step on\")"},
      {"run", ParamType::kInt, false, "-1", {}, "in-process repeat it applies to (-1: every run)"},
  };
  return kParams;
}

const std::vector<std::string>& choice_names(BinarizationDtype) {
  static const std::vector<std::string> n = {"float16", "float32"};
  return n;
}
const std::vector<std::string>& choice_names(MemorySide) {
  static const std::vector<std::string> n = {"device", "host"};
  return n;
}
const std::vector<std::string>& choice_names(CudaErrorKind) {
  static const std::vector<std::string> n = {"cudnn_execution_failed", "illegal_instruction", "illegal_memory_access",
                                             "cudnn_no_engine", "cuda_oom"};
  return n;
}
const std::vector<std::string>& choice_names(CrashSignal) {
  static const std::vector<std::string> n = {"SIGSEGV", "SIGABRT", "SIGKILL", "SIGBUS"};
  return n;
}
const std::vector<std::string>& choice_names(SampleCorruption) {
  static const std::vector<std::string> n = {"truncate_image", "zero_byte_image", "nan_coordinate",
                                             "duplicate_vertices"};
  return n;
}
const std::vector<std::string>& choice_names(Normalisation) {
  static const std::vector<std::string> n = {"black", "saturated", "unnormalised"};
  return n;
}
const std::vector<std::string>& choice_names(LabelMap) {
  static const std::vector<std::string> n = {"gt_shrink", "gt_shrink_mask", "gt_thresh", "gt_thresh_mask"};
  return n;
}

size_t internal::choice_index(const FaultConfig& f, const std::string& key, const std::vector<std::string>& names) {
  const FaultSpec* spec = find_fault(f.name);
  const ParamSpec* param = nullptr;
  if (spec != nullptr) {
    for (const auto& q : spec->params) {
      if (q.name == key) param = &q;
    }
  }
  if (param == nullptr || param->allowed != names) {
    throw std::logic_error("fault " + f.name + ": parameter " + key + " is not a choice its catalog entry declares");
  }
  const std::string& text = f.get(key);
  const auto it = std::find(names.begin(), names.end(), text);
  if (it == names.end()) {
    throw std::logic_error("fault " + f.name + ": parameter " + key + " (\"" + text + "\") is none of its choices");
  }
  return static_cast<size_t>(it - names.begin());
}

const std::vector<FaultSpec>& fault_catalog() {
  static const std::vector<FaultSpec> kCatalog = {
      {"nan_input", "NaN pixels in the input batch",
       {{"sample", ParamType::kInt, false, "0", {}, "sample of the batch"},
        {"count", ParamType::kInt, false, "16", {}, "pixels set"}},
       false, false, check_batch_pixels},
      {"inf_input", "+Inf pixels in the input batch",
       {{"sample", ParamType::kInt, false, "0", {}, "sample of the batch"},
        {"count", ParamType::kInt, false, "16", {}, "pixels set"}},
       false, false, check_batch_pixels},
      {"nan_label", "NaN in a label map of the batch",
       {{"sample", ParamType::kInt, false, "0", {}, "sample of the batch"},
        {"map", ParamType::kString, false, "gt_thresh", choice_names(LabelMap{}), "which map"},
        {"count", ParamType::kInt, false, "16", {}, "pixels set"}},
       false, false, check_batch_pixels},
      {"nan_activation", "replace a named module's forward output with NaN",
       {{"module", ParamType::kModule, true, "", {}, "module name, e.g. decoder.fusion"}}},
      {"perturb_activation",
       "multiply a named module's forward output by 1 + `relative` from at_step to until_step, as a kernel, "
       "instruction set or library that computes differently does: the run stays finite; a numerics reference "
       "(dbh qualify --reference) finds the step and the module",
       {{"module", ParamType::kModule, true, "", {}, "module name, e.g. decoder.fusion"},
        {"relative", ParamType::kDouble, false, "0.01", {}, "relative change of every value (0.01: 1 %)"}},
       false, false, check_perturbation},
      {"nan_gradient", "NaN gradients for a parameter or all parameters of a module",
       {{"module", ParamType::kModulePrefix, false, "", {}, "module name or prefix (e.g. head)"},
        {"parameter", ParamType::kString, false, "", {}, "full parameter name"}},
       false, false, check_nan_gradient},
      {"unstable_binarization",
       "switch the head to the exp form 1/(1+exp(-k(P-T))), evaluated in the given dtype",
       {{"dtype", ParamType::kString, false, "float16", choice_names(BinarizationDtype{}), ""}}},
      {"loss_scale_overflow", "multiply the loss by a factor that overflows it, as an fp16 "
                              "loss scale does",
       {{"factor", ParamType::kDouble, false, "1e39", {}, ""}},
       false, false, check_factor_not_one},
      {"lr_spike", "multiply the learning rate",
       {{"factor", ParamType::kDouble, false, "10000", {}, ""}},
       false, false, check_factor_not_one},
      {"corrupt_sample",
       "break one sample in a private copy of the dataset inside the run folder before training "
       "(the dataset itself is never written; a link out of the dataset folder stops the copy)",
       {{"sample", ParamType::kInt, true, "", {}, "dataset index"},
        {"kind", ParamType::kString, false, "truncate_image",
         choice_names(SampleCorruption{}),
         "what to break: keep the first third of the image file, empty it, or set the first "
         "word's first x to NaN / all its vertices to its first (UFO annotations)"}},
       false, /*before_training=*/true, check_corrupt_sample},
      {"memory_ballast", "hold extra memory on the device or host",
       {{"bytes", ParamType::kBytes, true, "", {}, "e.g. 512MiB"},
        {"on", ParamType::kString, false, "device", choice_names(MemorySide{}), ""}}},
      {"memory_cap", "a memory budget for the worker (host address space on CPU, the "
                     "allocator's limit on CUDA)",
       {{"bytes", ParamType::kBytes, true, "", {}, "e.g. 2GiB"}},
       false, /*before_training=*/true},
      {"cuda_error", "a CUDA/cuDNN error from a named module: on a CUDA device illegal_instruction and "
                     "illegal_memory_access launch a kernel that really faults and cuda_oom really "
                     "exhausts the allocator; otherwise the error's text is raised (reported as emulated)",
       {{"kind", ParamType::kString, true, "",
         choice_names(CudaErrorKind{}),
         ""},
        {"module", ParamType::kModule, false, "decoder.fusion", {}, ""},
        {"sticky", ParamType::kBool, false, "false", {},
         "every later CUDA call in the process fails, as with a corrupted context"}}},
      {"crash", "kill the worker with a signal at a step",
       {{"signal", ParamType::kString, false, "SIGSEGV", choice_names(CrashSignal{}),
         ""}}},
      {"hang", "stop making progress at a step (no events, no exit)", {}},
      {"broken_postprocess",
       "evaluate with post-processing settings that keep no box, at every validation from at_step on (needs " +
           std::string(DBH_SCENARIO_KEY(train.eval_every)) + "), as a configuration copied from another model does",
       {{"box_thresh", ParamType::kDouble, false, "1", {},
         "box score threshold used instead of " + std::string(DBH_SCENARIO_KEY(data.val)) + "'s"},
        {"binarize_thresh", ParamType::kDouble, false, "", {},
         "text threshold used instead of " + std::string(DBH_SCENARIO_KEY(data.val)) + "'s"}},
       false, false, check_broken_postprocess},
      {"nondeterminism",
       "perturb one micro-batch's input by an amount that differs from process to process, as a "
       "nondeterministic kernel does: repeated processes diverge exactly there",
       {{"micro_batch", ParamType::kInt, false, "0", {},
         "micro-batch of the step (below " + std::string(DBH_SCENARIO_KEY(train.accumulation)) + ")"},
        {"scale", ParamType::kDouble, false, "0.001", {}, "largest added value"}},
       false, false, check_nondeterminism},
      {"slow_data", "delay every batch",
       {{"seconds", ParamType::kDouble, false, "1", {}, "delay per batch"}}},
      {"leak", "retain tensors across in-process runs",
       {{"bytes", ParamType::kBytes, false, "64MiB", {}, "retained per run"}},
       false, false, check_leak},
      // Silent faults: the run stays finite but cannot learn. Each fires at
      // every step from at_step on unless until_step says otherwise.
      {"label_shift",
       "shift the four label maps by (dx, dy) pixels against the image, as labels built for another "
       "crop or padding are; uncovered pixels get background labels (from at_step on)",
       {{"dx", ParamType::kInt, false, "16", {}, "pixels to the right (negative: to the left)"},
        {"dy", ParamType::kInt, false, "16", {}, "pixels down (negative: up)"}},
       true, false, check_label_shift},
      {"label_scale",
       "scale the four label maps about the image centre against the image, as labels built for "
       "another resize are; uncovered pixels get background labels (from at_step on)",
       {{"factor", ParamType::kDouble, false, "2", {}, "scale (> 1: labels larger than the text)"}},
       true, false, check_label_scale},
      {"wrong_normalisation",
       "the image reaches the model wrongly normalised: black (every pixel 0 before the ImageNet "
       "normalisation), saturated (every pixel 255), or unnormalised (the raw 0-255 pixel values) "
       "(from at_step on)",
       {{"kind", ParamType::kString, false, "black", choice_names(Normalisation{}), ""}},
       true},
      {"lr_freeze", "set the learning rate to 0 (through the optimizer hook lr_spike uses; from at_step on)", {}, true},
      {"label_swap",
       "swap the four label maps of samples 0 and 1 of the batch: each image is trained on the "
       "other's labels (needs " + std::string(DBH_SCENARIO_KEY(data.batch_size)) + " >= 2; from at_step on)",
       {},
       true, false, check_label_swap},
      {"all_dont_care",
       "make every word don't-care, as an inverted illegibility flag does: no text kernel, training "
       "and threshold masks 0 where text is (from at_step on)",
       {},
       true, false, check_labels_of_text},
  };
  return kCatalog;
}

const FaultSpec* find_fault(const std::string& name) {
  for (const auto& f : fault_catalog()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace dbh::harness::scenario

#include "harness/faults/catalog.h"

namespace dbh::harness {

std::string to_string(ParamType t) {
  switch (t) {
    case ParamType::kInt: return "int";
    case ParamType::kDouble: return "number";
    case ParamType::kString: return "string";
    case ParamType::kBool: return "bool";
    case ParamType::kBytes: return "bytes";
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

const std::vector<FaultSpec>& fault_catalog() {
  const std::vector<std::string> kMaps = {"gt_shrink", "gt_shrink_mask", "gt_thresh",
                                          "gt_thresh_mask"};
  static const std::vector<FaultSpec> kCatalog = {
      {"nan_input", "NaN pixels in the input batch",
       {{"sample", ParamType::kInt, false, "0", {}, "sample of the batch"},
        {"count", ParamType::kInt, false, "16", {}, "pixels set"}}},
      {"inf_input", "+Inf pixels in the input batch",
       {{"sample", ParamType::kInt, false, "0", {}, "sample of the batch"},
        {"count", ParamType::kInt, false, "16", {}, "pixels set"}}},
      {"nan_label", "NaN in a label map of the batch",
       {{"sample", ParamType::kInt, false, "0", {}, "sample of the batch"},
        {"map", ParamType::kString, false, "gt_thresh", kMaps, "which map"},
        {"count", ParamType::kInt, false, "16", {}, "pixels set"}}},
      {"nan_activation", "replace a named module's forward output with NaN",
       {{"module", ParamType::kString, true, "", {}, "module name, e.g. decoder.fusion"}}},
      {"nan_gradient", "NaN gradients for a parameter or all parameters of a module",
       {{"module", ParamType::kString, false, "", {}, "module name prefix"},
        {"parameter", ParamType::kString, false, "", {}, "full parameter name"}}},
      {"unstable_binarization",
       "switch the head to the exp form 1/(1+exp(-k(P-T))), evaluated in the given dtype",
       {{"dtype", ParamType::kString, false, "float16", {"float16", "float32"}, ""}}},
      {"loss_scale_overflow", "multiply the loss by a factor that overflows it, as an fp16 "
                              "loss scale does",
       {{"factor", ParamType::kDouble, false, "1e39", {}, ""}}},
      {"lr_spike", "multiply the learning rate",
       {{"factor", ParamType::kDouble, false, "10000", {}, ""}}},
      {"corrupt_sample",
       "break one sample in a private copy of the dataset inside the run folder before training "
       "(the dataset itself is never written; a link out of the dataset folder stops the copy)",
       {{"sample", ParamType::kInt, true, "", {}, "dataset index"},
        {"kind", ParamType::kString, false, "truncate_image",
         {"truncate_image", "zero_byte_image", "nan_coordinate", "duplicate_vertices"},
         "what to break: keep the first third of the image file, empty it, or set the first "
         "word's first x to NaN / all its vertices to its first (UFO annotations)"}}},
      {"memory_ballast", "hold extra memory on the device or host",
       {{"bytes", ParamType::kBytes, true, "", {}, "e.g. 512MiB"},
        {"on", ParamType::kString, false, "device", {"device", "host"}, ""}}},
      {"memory_cap", "a memory budget for the worker (host address space on CPU, the "
                     "allocator's limit on CUDA)",
       {{"bytes", ParamType::kBytes, true, "", {}, "e.g. 2GiB"}}},
      {"cuda_error", "a CUDA/cuDNN error from a named module: on a CUDA device illegal_instruction and "
                     "illegal_memory_access launch a kernel that really faults and cuda_oom really "
                     "exhausts the allocator; otherwise the error's text is raised (reported as emulated)",
       {{"kind", ParamType::kString, true, "",
         {"cudnn_execution_failed", "illegal_instruction", "illegal_memory_access",
          "cudnn_no_engine", "cuda_oom"},
         ""},
        {"module", ParamType::kString, false, "decoder.fusion", {}, ""},
        {"sticky", ParamType::kBool, false, "false", {},
         "every later CUDA call in the process fails, as with a corrupted context"}}},
      {"crash", "kill the worker with a signal at a step",
       {{"signal", ParamType::kString, false, "SIGSEGV", {"SIGSEGV", "SIGABRT", "SIGKILL", "SIGBUS"},
         ""}}},
      {"hang", "stop making progress at a step (no events, no exit)", {}},
      {"broken_postprocess",
       "evaluate with post-processing settings that keep no box, at every validation from at_step on "
       "(needs train.eval_every), as a configuration copied from another model does",
       {{"box_thresh", ParamType::kDouble, false, "1", {}, "box score threshold used instead of data.val's"},
        {"binarize_thresh", ParamType::kDouble, false, "", {}, "text threshold used instead of data.val's"}}},
      {"nondeterminism",
       "perturb one micro-batch's input by an amount that differs from process to process, as a "
       "nondeterministic kernel does: repeated processes diverge exactly there",
       {{"micro_batch", ParamType::kInt, false, "0", {}, "micro-batch of the step (below train.accumulation)"},
        {"scale", ParamType::kDouble, false, "0.001", {}, "largest added value"}}},
      {"slow_data", "delay every batch",
       {{"seconds", ParamType::kDouble, false, "1", {}, "delay per batch"}}},
      {"leak", "retain tensors across in-process runs",
       {{"bytes", ParamType::kBytes, false, "64MiB", {}, "retained per run"}}},
      // Silent faults: the run stays finite but cannot learn. Each fires at
      // every step from at_step on unless until_step says otherwise.
      {"label_shift",
       "shift the four label maps by (dx, dy) pixels against the image, as labels built for another "
       "crop or padding are; uncovered pixels get background labels (from at_step on)",
       {{"dx", ParamType::kInt, false, "16", {}, "pixels to the right (negative: to the left)"},
        {"dy", ParamType::kInt, false, "16", {}, "pixels down (negative: up)"}},
       true},
      {"label_scale",
       "scale the four label maps about the image centre against the image, as labels built for "
       "another resize are; uncovered pixels get background labels (from at_step on)",
       {{"factor", ParamType::kDouble, false, "2", {}, "scale (> 1: labels larger than the text)"}},
       true},
      {"wrong_normalisation",
       "the image reaches the model wrongly normalised: black (every pixel 0 before the ImageNet "
       "normalisation), saturated (every pixel 255), or unnormalised (the raw 0-255 pixel values) "
       "(from at_step on)",
       {{"kind", ParamType::kString, false, "black", {"black", "saturated", "unnormalised"}, ""}},
       true},
      {"lr_freeze", "set the learning rate to 0 (through the optimizer hook lr_spike uses; from at_step on)", {}, true},
      {"label_swap",
       "swap the four label maps of samples 0 and 1 of the batch: each image is trained on the "
       "other's labels (needs data.batch_size >= 2; from at_step on)",
       {},
       true},
      {"all_dont_care",
       "make every word don't-care, as an inverted illegibility flag does: no text kernel, training "
       "and threshold masks 0 where text is (from at_step on)",
       {},
       true},
  };
  return kCatalog;
}

const FaultSpec* find_fault(const std::string& name) {
  for (const auto& f : fault_catalog()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace dbh::harness

#include "harness/faults/injectors.h"

#ifdef DBH_TORCH_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/faults/dataset_corruption.h"
#include "harness/gpu/fault_kernels.h"
#include "model/data/dataset_copy.h"
#include "model/data/scan.h"
#include "model/eval/overlay.h"
#include "model/label/label_maps.h"

namespace dbh::harness::faults {
namespace fs = std::filesystem;

std::vector<torch::Tensor>& leaked_tensors() {
  static std::vector<torch::Tensor> kept;
  return kept;
}

bool apply_host_memory_cap(int64_t bytes) {
  rlimit lim{static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
  return setrlimit(RLIMIT_DATA, &lim) == 0;
}

std::string FaultInjector::cuda_error_text(scenario::CudaErrorKind kind) {
  switch (kind) {
    case scenario::CudaErrorKind::kCudnnExecutionFailed:
      return "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED";
    case scenario::CudaErrorKind::kIllegalInstruction:
      return "CUDA error: an illegal instruction was encountered";
    case scenario::CudaErrorKind::kIllegalMemoryAccess:
      return "CUDA error: an illegal memory access was encountered";
    case scenario::CudaErrorKind::kCudnnNoEngine:
      return "FIND was unable to find an engine to execute this computation";
    case scenario::CudaErrorKind::kCudaOom:
      return "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 11.76 GiB "
             "of which 1.12 GiB is free.";
  }
  return "CUDA error: unknown error";
}

bool FaultInjector::fires(size_t i) const { return faults_[i].fires_at(step_, run_); }

void FaultInjector::fired(size_t i, const std::string& module, nlohmann::json detail) {
  proto::FaultFired f;
  f.fault = faults_[i].name;
  f.index = static_cast<int64_t>(i);
  f.run = run_;
  f.step = step_;
  f.module = module;
  f.detail = std::move(detail);
  events_.emit(f);
}

void FaultInjector::hold_memory(int64_t bytes, bool host) {
  if (host || device_ == "cpu") {
    std::vector<char> block(static_cast<size_t>(bytes));
    for (size_t k = 0; k < block.size(); k += 4096) block[k] = 1;  // touch every page
    host_held_.push_back(std::move(block));
  } else {
    held_.push_back(torch::ones({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device_)));
  }
}

bool FaultInjector::on_cuda() const { return device_.rfind("cuda", 0) == 0 && torch::cuda::is_available(); }

void FaultInjector::on_teardown() {
  // A framework syncs the device when it tears down; after a real fault the
  // driver answers with the lost context's error itself.
  if (context_lost_) torch::cuda::synchronize();
  if (poisoned_) throw std::runtime_error(cuda_error_text(scenario::CudaErrorKind::kIllegalInstruction));
}

// See Note [Real GPU faults].
void FaultInjector::raise_cuda_error(size_t i, const std::string& module, scenario::CudaErrorKind kind,
                                     bool sticky) {
  using scenario::CudaErrorKind;
  const int index = device_.size() > 5 ? std::stoi(device_.substr(5)) : 0;
  const std::string& name = scenario::choice_name(kind);
  const bool kernel_kind = kind == CudaErrorKind::kIllegalInstruction || kind == CudaErrorKind::kIllegalMemoryAccess;
  if (on_cuda() && kernel_kind && gpu::kernels_built()) {
    const auto r = gpu::launch_fault_kernel(kind == CudaErrorKind::kIllegalInstruction
                                                ? gpu::KernelFault::illegal_instruction
                                                : gpu::KernelFault::illegal_memory_access,
                                            index);
    context_lost_ = r.error_code != 0;
    fired(i, module, {{"kind", name}, {"sticky", true}, {"real", true}, {"launched", r.launched},
                      {"cuda_error", r.error_name}, {"cuda_error_text", r.error_text}});
    throw std::runtime_error("CUDA error: " + r.error_text + " (" + r.error_name +
                             ", from dbh's fault kernel launched in " + module + ")");
  }
  if (on_cuda() && kind == CudaErrorKind::kCudaOom) {
    // Real exhaustion: ask the caching allocator for more than the card has.
    int64_t total = int64_t{1} << 40;
#ifdef DBH_TORCH_HAS_CUDA
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) total = static_cast<int64_t>(total_b);
#endif
    fired(i, module, {{"kind", name}, {"sticky", false}, {"real", true}, {"bytes", total}});
    held_.push_back(torch::empty({total}, torch::TensorOptions().dtype(torch::kUInt8).device(device_)));
    throw std::runtime_error("cuda_oom: an allocation of the card's whole memory succeeded");
  }
  fired(i, module, {{"kind", name}, {"sticky", sticky}, {"real", false}});
  if (sticky) poisoned_ = true;
  throw std::runtime_error(cuda_error_text(kind));
}

namespace {

// Moves every label map of `t` so that output pixel (y, x) shows input pixel
// (ys[y], xs[x]); an index of -1 marks a pixel no input pixel lands on, which
// gets background labels: no text, trained on, the threshold map's minimum,
// no threshold supervision.
void remap_labels(model::DbTargets& t, const std::vector<int64_t>& ys, const std::vector<int64_t>& xs) {
  const auto device = t.gt_shrink.device();
  const auto to_tensor = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(device); };
  const auto yi = to_tensor(ys), xi = to_tensor(xs);
  const auto covered = (yi >= 0).view({1, 1, -1, 1}).logical_and((xi >= 0).view({1, 1, 1, -1}));  // [1, 1, H, W]
  const auto ysrc = yi.clamp_min(0), xsrc = xi.clamp_min(0);
  const auto move = [&](torch::Tensor& m, double background) {
    m = torch::where(covered, m.index_select(2, ysrc).index_select(3, xsrc), torch::full({}, background, m.options()))
            .contiguous();
  };
  move(t.gt_shrink, 0.0);
  move(t.gt_shrink_mask, 1.0);
  move(t.gt_thresh, model::LabelMapOptions().thresh_min);
  move(t.gt_thresh_mask, 0.0);
}

// Source index of every output index for a shift by `d` pixels; -1 outside.
std::vector<int64_t> shifted_indices(int64_t n, int64_t d) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = i - d;
    out[static_cast<size_t>(i)] = src >= 0 && src < n ? src : -1;
  }
  return out;
}

// Source index of every output index for a scale by `factor` about the
// centre (nearest neighbour); -1 outside.
std::vector<int64_t> scaled_indices(int64_t n, double factor) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  const double c = (static_cast<double>(n) - 1.0) / 2.0;
  for (int64_t i = 0; i < n; ++i) {
    const double src = std::round(c + (static_cast<double>(i) - c) / factor);
    out[static_cast<size_t>(i)] = src >= 0 && src < static_cast<double>(n) ? static_cast<int64_t>(src) : -1;
  }
  return out;
}

}  // namespace

// Note [Fault registry]
// ~~~~~~~~~~~~~~~~~~~~~
// A fault is declared once in the catalog (scenario/fault_catalog.cc: its parameters, help
// and schedule) and acts through one entry here: the hooks of the training
// step it acts at, each called only for a fault scheduled to fire there
// (FaultConfig::fires_at), except `on_model` and `on_start`, which run before
// the first step and check the schedule themselves. Adding a fault is a
// catalog entry, an entry here and its test; every catalog name must have an
// entry (tests/unit/harness/injectors_torch_test.cc), so none can be declared
// and then do nothing. Two hooks act outside the training step: `on_dataset`
// (corrupt_sample: a private corrupted copy of the dataset, before the
// dataset is opened) and `on_validation` (broken_postprocess: the
// post-processing of each validation); they too check the schedule.
struct FaultInjector::Hooks {
  std::function<void(FaultInjector&, size_t)> on_model, on_start, on_step_begin;
  std::function<void(FaultInjector&, size_t, DatasetSite&)> on_dataset;
  std::function<void(FaultInjector&, size_t, int64_t step_taken, model::PostprocessOptions&)> on_validation;
  std::function<void(FaultInjector&, size_t, const std::string& module)> on_enter;
  std::function<void(FaultInjector&, size_t, const std::string& module, torch::Tensor&)> on_output;
  std::function<void(FaultInjector&, size_t, model::Batch&, int64_t micro)> on_batch;
  std::function<void(FaultInjector&, size_t, model::DbLossParts&)> on_loss;
  std::function<void(FaultInjector&, size_t, model::DbNet&)> on_before_optimizer;

  static const std::map<std::string, Hooks>& registry();
  /// A NaN/Inf written into the first `count` values of one sample of `target`.
  static void poison(FaultInjector& self, size_t i, model::Batch& b, torch::Tensor target, const std::string& what,
                     float value);
};

namespace {
using Self = FaultInjector;
}  // namespace

const std::map<std::string, FaultInjector::Hooks>& FaultInjector::Hooks::registry() {
  static const std::map<std::string, Hooks> hooks = [] {
    std::map<std::string, Hooks> r;
    const auto exp_binarization = [](Self& self, size_t i) {
      const auto& f = self.faults_[i];
      const auto dtype = scenario::choice_param<scenario::BinarizationDtype>(f, "dtype");
      (*self.net_)->set_binarization(model::Binarization::kExp, dtype == scenario::BinarizationDtype::kFloat32
                                                                    ? torch::kFloat32
                                                                    : torch::kFloat16);
      self.fired(i, "head.binarize", {{"form", "exp"}, {"dtype", scenario::choice_name(dtype)}});
    };
    r["unstable_binarization"].on_model = [exp_binarization](Self& self, size_t i) {
      const auto& f = self.faults_[i];
      if (f.at_step == 0 && (f.run < 0 || f.run == self.run_)) exp_binarization(self, i);
    };
    r["unstable_binarization"].on_step_begin = [exp_binarization](Self& self, size_t i) {
      if (self.step_ > 0 && self.step_ == self.faults_[i].at_step && self.net_ != nullptr) exp_binarization(self, i);
    };

    r["memory_cap"].on_start = [](Self& self, size_t i) {
      if (self.run_ != 0) return;
      const int64_t bytes = self.faults_[i].get_bytes("bytes");
      const bool ok = self.device_ == "cpu" ? apply_host_memory_cap(bytes) : false;
      self.fired(i, "", {{"bytes", bytes}, {"enforced", ok ? "RLIMIT_DATA" : "not enforced"}});
    };
    r["memory_ballast"].on_start = [](Self& self, size_t i) {
      const auto& f = self.faults_[i];
      const auto side = scenario::choice_param<scenario::MemorySide>(f, "on");
      self.hold_memory(f.get_bytes("bytes"), side == scenario::MemorySide::kHost);
      self.fired(i, "", {{"bytes", f.get_bytes("bytes")}, {"on", scenario::choice_name(side)}});
    };
    r["memory_ballast"].on_step_begin = [](Self& self, size_t i) {
      const auto& f = self.faults_[i];
      if (!(self.step_ > 0 && self.step_ == f.at_step)) return;
      self.hold_memory(f.get_bytes("bytes"),
                       scenario::choice_param<scenario::MemorySide>(f, "on") == scenario::MemorySide::kHost);
      self.fired(i, "", {{"bytes", f.get_bytes("bytes")}});
    };
    r["leak"].on_step_begin = [](Self& self, size_t i) {
      const auto& f = self.faults_[i];
      if (self.step_ != f.at_step) return;
      const int64_t bytes = f.get_bytes("bytes");
      // On the run's device: on CUDA it is the allocator's memory that grows.
      leaked_tensors().push_back(
          torch::ones({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(self.device_)));
      self.fired(i, "", {{"bytes", bytes}, {"retained_total", static_cast<int64_t>(leaked_tensors().size()) * bytes}});
    };
    r["crash"].on_step_begin = [](Self& self, size_t i) {
      const auto which = scenario::choice_param<scenario::CrashSignal>(self.faults_[i], "signal");
      self.fired(i, "", {{"signal", scenario::choice_name(which)}});
      int sig = SIGSEGV;
      switch (which) {
        case scenario::CrashSignal::kSegv: sig = SIGSEGV; break;
        case scenario::CrashSignal::kAbrt: sig = SIGABRT; break;
        case scenario::CrashSignal::kKill: sig = SIGKILL; break;
        case scenario::CrashSignal::kBus: sig = SIGBUS; break;
      }
      signal(sig, SIG_DFL);
      raise(sig);
    };
    r["hang"].on_step_begin = [](Self& self, size_t i) {
      self.fired(i, "");
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
    };

    r["cuda_error"].on_enter = [](Self& self, size_t i, const std::string& module) {
      const auto& f = self.faults_[i];
      if (f.get("module") == module) {
        self.raise_cuda_error(i, module, scenario::choice_param<scenario::CudaErrorKind>(f, "kind"),
                              f.get_bool("sticky"));
      }
    };
    r["nan_activation"].on_output = [](Self& self, size_t i, const std::string& module, torch::Tensor& output) {
      if (self.faults_[i].get("module") != module) return;
      output = output + std::numeric_limits<float>::quiet_NaN();
      self.fired(i, module);
    };

    r["perturb_activation"].on_output = [](Self& self, size_t i, const std::string& module, torch::Tensor& output) {
      if (self.faults_[i].get("module") != module) return;
      const double relative = self.faults_[i].get_double("relative");
      output = output * (1.0 + relative);
      self.fired(i, module, {{"relative", relative}});
    };

    r["nan_input"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      Hooks::poison(self, i, b, b.image, "image", std::numeric_limits<float>::quiet_NaN());
    };
    r["inf_input"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      Hooks::poison(self, i, b, b.image, "image", std::numeric_limits<float>::infinity());
    };
    r["nan_label"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      const auto map = scenario::choice_param<scenario::LabelMap>(self.faults_[i], "map");
      torch::Tensor target;
      switch (map) {
        case scenario::LabelMap::kGtShrink: target = b.targets.gt_shrink; break;
        case scenario::LabelMap::kGtShrinkMask: target = b.targets.gt_shrink_mask; break;
        case scenario::LabelMap::kGtThresh: target = b.targets.gt_thresh; break;
        case scenario::LabelMap::kGtThreshMask: target = b.targets.gt_thresh_mask; break;
      }
      const std::string& m = scenario::choice_name(map);
      Hooks::poison(self, i, b, target, m, std::numeric_limits<float>::quiet_NaN());
    };
    r["nondeterminism"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t micro) {
      const auto& f = self.faults_[i];
      if (micro != f.get_int("micro_batch")) return;
      // The same in every step of one process, far apart between processes:
      // a multiplicative (golden-ratio) hash of the pid, so that neighbouring
      // pids, as repeated processes usually get, differ by about 0.38 of the
      // scale rather than by a few thousandths, which a float32 loss can miss.
      const auto h = static_cast<uint32_t>(static_cast<uint64_t>(::getpid()) * 2654435761ULL);
      const double u = 0.1 + 0.9 * (static_cast<double>(h) / 4294967296.0);
      const double delta = f.get_double("scale") * u;
      b.image.add_(delta);
      self.fired(i, "", {{"micro_batch", micro}, {"added", delta}});
    };
    r["slow_data"].on_batch = [](Self& self, size_t i, model::Batch&, int64_t) {
      const double seconds = self.faults_[i].get_double("seconds");
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      self.fired(i, "", {{"seconds", seconds}});
    };
    r["wrong_normalisation"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      const auto kind = scenario::choice_param<scenario::Normalisation>(self.faults_[i], "kind");
      for (int64_t c = 0; c < 3 && c < b.image.size(1); ++c) {
        auto channel = b.image.select(1, c);
        const double mean = model::kImageNetMean[c], std = model::kImageNetStd[c];
        switch (kind) {
          case scenario::Normalisation::kBlack:
            channel.fill_((0.0 - mean) / std);
            break;
          case scenario::Normalisation::kSaturated:
            channel.fill_((1.0 - mean) / std);
            break;
          case scenario::Normalisation::kUnnormalised:  // the 8-bit pixel values, neither scaled nor normalised
            channel.mul_(std).add_(mean).mul_(255.0);
            break;
        }
      }
      self.fired(i, "", {{"kind", scenario::choice_name(kind)}});
    };
    r["label_shift"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      auto& t = b.targets;
      const int64_t dx = self.faults_[i].get_int("dx"), dy = self.faults_[i].get_int("dy");
      remap_labels(t, shifted_indices(t.gt_shrink.size(2), dy), shifted_indices(t.gt_shrink.size(3), dx));
      self.fired(i, "", {{"dx", dx}, {"dy", dy}});
    };
    r["label_scale"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      auto& t = b.targets;
      const double factor = self.faults_[i].get_double("factor");
      remap_labels(t, scaled_indices(t.gt_shrink.size(2), factor), scaled_indices(t.gt_shrink.size(3), factor));
      self.fired(i, "", {{"factor", factor}});
    };
    r["label_swap"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      if (b.size() < 2) return;  // the scenario layer requires batch_size >= 2
      auto& t = b.targets;
      const auto order = torch::tensor({int64_t{1}, int64_t{0}}, torch::kLong).to(t.gt_shrink.device());
      const auto swap = [&](torch::Tensor& m) { m = torch::cat({m.index_select(0, order), m.slice(0, 2)}).contiguous(); };
      swap(t.gt_shrink);
      swap(t.gt_shrink_mask);
      swap(t.gt_thresh);
      swap(t.gt_thresh_mask);
      const auto id = [&](size_t k) { return k < b.sample_ids.size() ? b.sample_ids[k] : std::string(); };
      self.fired(i, "", {{"samples", {id(0), id(1)}}});
    };
    r["all_dont_care"].on_batch = [](Self& self, size_t i, model::Batch& b, int64_t) {
      auto& t = b.targets;
      // Where text is: its kernel or its dilated outline (the threshold mask).
      const auto text = (t.gt_shrink > 0).logical_or(t.gt_thresh_mask > 0);
      t.gt_shrink_mask = torch::where(text, torch::zeros({}, t.gt_shrink_mask.options()), t.gt_shrink_mask);
      t.gt_shrink = torch::zeros_like(t.gt_shrink);
      t.gt_thresh_mask = torch::zeros_like(t.gt_thresh_mask);
      t.gt_thresh = torch::full_like(t.gt_thresh, model::LabelMapOptions().thresh_min);
      self.fired(i, "", {{"text_pixels", text.sum().item<int64_t>()}});
    };

    r["loss_scale_overflow"].on_loss = [](Self& self, size_t i, model::DbLossParts& loss) {
      const double factor = self.faults_[i].get_double("factor");
      loss.total = loss.total * static_cast<float>(std::min(factor, 3.0e38)) *
                   static_cast<float>(std::max(1.0, factor / 3.0e38));
      self.fired(i, "", {{"factor", factor}});
    };
    r["nan_gradient"].on_before_optimizer = [](Self& self, size_t i, model::DbNet& net) {
      const std::string mod = self.faults_[i].get("module"), param = self.faults_[i].get("parameter");
      int64_t hit = 0;
      for (auto& p : net->named_parameters(true)) {
        // `module` names an observed module or a prefix of one ("head"),
        // owning parameters as the monitors attribute them.
        const std::string owner = model::observed_module_of(p.key());
        const bool match = !param.empty() ? p.key() == param : owner == mod || owner.rfind(mod + ".", 0) == 0;
        if (match && p.value().grad().defined()) {
          p.value().mutable_grad().fill_(std::numeric_limits<float>::quiet_NaN());
          ++hit;
        }
      }
      self.fired(i, !param.empty() ? param : mod, {{"parameters", hit}});
    };
    r["lr_spike"].on_before_optimizer = [](Self& self, size_t i, model::DbNet&) {
      if (self.optimizer_ == nullptr) return;
      const double factor = self.faults_[i].get_double("factor");
      double lr = 0;
      for (auto& group : self.optimizer_->param_groups()) {
        lr = group.options().get_lr() * factor;
        group.options().set_lr(lr);
      }
      self.fired(i, "", {{"factor", factor}, {"lr", lr}});
    };
    r["lr_freeze"].on_before_optimizer = [](Self& self, size_t i, model::DbNet&) {
      if (self.optimizer_ == nullptr) return;
      double scheduled = 0;
      for (auto& group : self.optimizer_->param_groups()) {
        scheduled = group.options().get_lr();
        group.options().set_lr(0.0);
      }
      self.fired(i, "", {{"lr", 0.0}, {"scheduled_lr", scheduled}});
    };

    // Outside the training step (see the Note).
    r["corrupt_sample"].on_dataset = [](Self& self, size_t i, DatasetSite& site) {
      const auto& f = self.faults_[i];
      if (site.source != scenario::DataSource::kReal) return;  // synthetic data has no files to break
      const std::string copy = (fs::path(site.run_dir) / "data").string();
      const auto kind = scenario::choice_param<scenario::SampleCorruption>(f, "kind");
      const std::string file = corrupt_dataset_copy(site.path, copy, f.get_int("sample"), kind);
      site.path = copy;
      self.fired(i, "", {{"sample", f.get_int("sample")}, {"file", file}, {"kind", scenario::choice_name(kind)},
                         {"copy", copy}});
    };
    r["broken_postprocess"].on_validation = [](Self& self, size_t i, int64_t step_taken,
                                               model::PostprocessOptions& pp) {
      const auto& f = self.faults_[i];
      if (step_taken < f.at_step || (f.run >= 0 && f.run != self.run_)) return;
      pp.box_thresh = f.get_double("box_thresh");
      if (!f.get("binarize_thresh").empty()) pp.binarize_thresh = f.get_double("binarize_thresh");
      const int64_t step = self.step_;
      self.step_ = step_taken;
      self.fired(i, "", {{"box_thresh", pp.box_thresh}});
      self.step_ = step;
    };
    return r;
  }();
  return hooks;
}

void FaultInjector::Hooks::poison(FaultInjector& self, size_t i, model::Batch& b, torch::Tensor target,
                                  const std::string& what, float value) {
  const auto& f = self.faults_[i];
  const int64_t sample = std::min<int64_t>(f.get_int("sample"), b.size() - 1);
  const int64_t count = std::max<int64_t>(1, f.get_int("count"));
  auto flat = target[sample].view({-1});
  const int64_t n = std::min<int64_t>(count, flat.numel());
  flat.slice(0, 0, n).fill_(value);
  self.fired(i, "",
             {{"tensor", what},
              {"sample", sample},
              {"sample_id",
               sample < static_cast<int64_t>(b.sample_ids.size()) ? b.sample_ids[static_cast<size_t>(sample)] : ""},
              {"count", n}});
}

FaultInjector::FaultInjector(const std::vector<scenario::FaultConfig>& faults, proto::EventWriter& events,
                             const std::string& device)
    : faults_(faults), events_(events), device_(device) {
  // Note [Fault registry]: every fault the scenario names acts through its entry.
  for (const auto& f : faults_) {
    const auto it = Hooks::registry().find(f.name);
    if (it == Hooks::registry().end()) {
      throw std::logic_error("fault " + f.name + ": in the catalog but without an injector (harness/faults/injectors.cc)");
    }
    hooks_.push_back(&it->second);
  }
}

bool FaultInjector::has_injector(const std::string& name) { return Hooks::registry().count(name) > 0; }

void FaultInjector::on_model(model::DbNet& net) {
  net_ = &net;
  step_ = 0;
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_model) hooks_[i]->on_model(*this, i);
  }
}

std::string FaultInjector::on_dataset(const std::string& path, scenario::DataSource source,
                                      const std::string& run_dir) {
  DatasetSite site{path, source, run_dir};
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_dataset) hooks_[i]->on_dataset(*this, i, site);
  }
  return site.path;
}

void FaultInjector::on_validation(int64_t step_taken, model::PostprocessOptions& pp) {
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_validation) hooks_[i]->on_validation(*this, i, step_taken, pp);
  }
}

void FaultInjector::on_start() {
  step_ = 0;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (f.at_step == 0 && (f.run < 0 || f.run == run_) && hooks_[i]->on_start) hooks_[i]->on_start(*this, i);
  }
}

void FaultInjector::on_enter(const std::string& name) {
  if (poisoned_) {
    throw std::runtime_error(cuda_error_text(scenario::CudaErrorKind::kIllegalInstruction) +
                             " (CUDA context unusable after an earlier error)");
  }
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_enter && fires(i)) hooks_[i]->on_enter(*this, i, name);
  }
}

void FaultInjector::on_output(const std::string& name, torch::Tensor& output) {
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_output && fires(i)) hooks_[i]->on_output(*this, i, name, output);
  }
}

void FaultInjector::on_step_begin(int64_t step) {
  step_ = step;
  micro_ = 0;
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_step_begin && fires(i)) hooks_[i]->on_step_begin(*this, i);
  }
}

void FaultInjector::on_batch(int64_t step, model::Batch& b) {
  torch::NoGradGuard no_grad;
  const int64_t micro = micro_++;
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_batch && fires(i)) hooks_[i]->on_batch(*this, i, b, micro);
  }
}

void FaultInjector::on_loss(int64_t step, model::DbLossParts& loss) {
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_loss && fires(i)) hooks_[i]->on_loss(*this, i, loss);
  }
}

void FaultInjector::on_before_optimizer(int64_t step, model::DbNet& net) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (hooks_[i]->on_before_optimizer && fires(i)) hooks_[i]->on_before_optimizer(*this, i, net);
  }
}

}  // namespace dbh::harness::faults

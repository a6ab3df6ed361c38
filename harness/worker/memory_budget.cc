#include "harness/worker/memory_budget.h"

#include <fstream>

#include <sys/resource.h>

#include <torch/torch.h>

#ifdef DBH_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/monitors/monitors.h"
#include "harness/scenario/scenario.h"
#include "harness/worker/host_allocator.h"

namespace dbh::harness::worker {

nlohmann::json BudgetEnforcement::to_json() const {
  return {{"applied", applied},         {"method", method},
          {"budget_bytes", budget_bytes}, {"device_total", device_total},
          {"used_before", used_before}, {"ballast_bytes", ballast_bytes},
          {"allocator_fraction", allocator_fraction}, {"detail", detail}};
}

BudgetEnforcement enforce_memory_budget(const std::string& device, int64_t budget) {
  BudgetEnforcement e;
  e.budget_bytes = budget;
  if (budget <= 0) return e;
  if (device == "cpu") {
    rlimit lim{static_cast<rlim_t>(budget), static_cast<rlim_t>(budget)};
    // Note [Keeping freed host memory]: on the smaller machine a freed
    // tensor's memory serves every allocator of the process.
    keep_freed_host_memory(false);
    e.applied = setrlimit(RLIMIT_DATA, &lim) == 0;
    e.method = "RLIMIT_DATA";
    e.detail = "The worker's data segment and anonymous mappings (heap, tensors, thread stacks) are capped at " +
               scenario::format_bytes(budget) + "; shared libraries' code is not counted; freed memory is not kept for reuse";
    return e;
  }
#ifdef DBH_TORCH_HAS_CUDA
  const torch::Device d(device);
  const int index = d.has_index() ? d.index() : 0;
  if (cudaSetDevice(index) != cudaSuccess) {
    e.detail = "cudaSetDevice failed";
    return e;
  }
  // Create the context (and the allocator) first, so its memory is counted.
  (void)torch::empty({1}, torch::TensorOptions().device(d));
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    e.detail = "cudaMemGetInfo failed";
    return e;
  }
  e.device_total = static_cast<int64_t>(total_bytes);
  e.used_before = static_cast<int64_t>(total_bytes - free_bytes);
  const int64_t available = budget - e.used_before;
  if (available <= 0) {
    e.detail = "the budget is smaller than what the context already uses (" + scenario::format_bytes(e.used_before) + ")";
    return e;
  }
  e.ballast_bytes = std::max<int64_t>(0, static_cast<int64_t>(free_bytes) - available);
  if (e.ballast_bytes > 0) {
    void* ballast = nullptr;
    if (cudaMalloc(&ballast, static_cast<size_t>(e.ballast_bytes)) != cudaSuccess) {
      e.detail = "the ballast of " + scenario::format_bytes(e.ballast_bytes) + " could not be allocated";
      return e;
    }
    // Held for the life of the worker on purpose.
  }
  e.allocator_fraction = static_cast<double>(available) / static_cast<double>(total_bytes);
  c10::cuda::CUDACachingAllocator::setMemoryFraction(e.allocator_fraction, static_cast<c10::DeviceIndex>(index));
  e.applied = true;
  e.method = "cuda ballast + allocator limit";
  e.detail = "card " + scenario::format_bytes(e.device_total) + ", already used " + scenario::format_bytes(e.used_before) +
             " (context, libraries, other processes), ballast " + scenario::format_bytes(e.ballast_bytes) +
             " outside the allocator, allocator capped at " + scenario::format_bytes(available) +
             "; cuDNN/cuBLAS workspaces and later library loads compete for the same " + scenario::format_bytes(budget);
#else
  e.detail = "this build has no CUDA";
#endif
  return e;
}

#ifdef DBH_TORCH_HAS_CUDA
namespace {

// Note [The allocator before its first tensor]: the caching allocator starts
// with the first CUDA tensor; asking it for statistics before that throws
// ("Invalid device argument"), as a run's first memory sample did before the
// model was built, which killed every CUDA trial without a budget. Nothing is
// allocated before then, so its counters are zero.
bool cuda_allocator_started(const std::string& device) {
  return device.rfind("cuda", 0) == 0 && torch::cuda::is_available() &&
         c10::cuda::CUDACachingAllocator::get() != nullptr &&
         c10::cuda::CUDACachingAllocator::get()->initialized();
}

}  // namespace
#endif

nlohmann::json memory_sample(const std::string& device) {
  nlohmann::json m = {{"rss_bytes", monitors::current_rss_bytes()}, {"peak_rss_bytes", monitors::peak_rss_bytes()}};
  // Note [Keeping freed host memory]: part of the resident size may be blocks
  // kept for reuse; what training itself held at most is said beside it.
  if (const HostAllocatorStats h = host_allocator_stats(); h.installed) {
    m["host_cached_bytes"] = h.cached_bytes;
    m["host_peak_allocated_bytes"] = h.peak_allocated_bytes;
  }
#ifdef DBH_TORCH_HAS_CUDA
  if (device.rfind("cuda", 0) == 0 && torch::cuda::is_available()) {
    // A sample is evidence about a failure, never a failure of its own: it is
    // taken in the worker's error path too, where a throw would replace the
    // error being reported with this one.
    try {
      c10::CachingDeviceAllocator::DeviceStats stats;
      if (cuda_allocator_started(device)) {
        const torch::Device d(device);
        stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
            static_cast<c10::DeviceIndex>(d.has_index() ? d.index() : 0));
      }
      const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
      m["cuda_allocated_bytes"] = stats.allocated_bytes[all].current;
      m["cuda_reserved_bytes"] = stats.reserved_bytes[all].current;
      m["cuda_peak_allocated_bytes"] = stats.allocated_bytes[all].peak;
      m["cuda_peak_reserved_bytes"] = stats.reserved_bytes[all].peak;
      m["cuda_fragmentation_bytes"] = stats.reserved_bytes[all].current - stats.allocated_bytes[all].current;
    } catch (const std::exception&) {
      // Left out: the sample says what it could read.
    }
  }
#else
  (void)device;
#endif
  return m;
}

void reset_memory_peaks(const std::string& device) {
#ifdef DBH_TORCH_HAS_CUDA
  if (cuda_allocator_started(device)) {
    const torch::Device d(device);
    try {
      c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(d.has_index() ? d.index() : 0));
    } catch (const std::exception&) {
      // The next sample's peaks then span more than a step; the step's own
      // error, if any, is what the run reports.
    }
  }
#else
  (void)device;
#endif
}

bool record_memory_history(const std::string& device, int64_t max_entries) {
#ifdef DBH_TORCH_HAS_CUDA
  if (device.rfind("cuda", 0) == 0 && torch::cuda::is_available()) {
    // Allocation events only, without stack traces: cheap enough for every
    // step, and a ring of `max_entries` keeps the failing step's events.
    torch::cuda::_record_memory_history(std::string("all"), std::nullopt, "python",
                                        static_cast<size_t>(max_entries));
    return true;
  }
#endif
  (void)device;
  (void)max_entries;
  return false;
}

bool write_memory_snapshot(const std::string& device, const std::string& path) {
#ifdef DBH_TORCH_HAS_CUDA
  if (device.rfind("cuda", 0) == 0 && torch::cuda::is_available()) {
    const std::string pickled = torch::cuda::_memory_snapshot_pickled();
    try {
      write_file_atomically(path, pickled);  // never through a link in the run folder
    } catch (const Error&) {
      return false;
    }
    return true;
  }
#endif
  (void)device;
  (void)path;
  return false;
}

}  // namespace dbh::harness::worker

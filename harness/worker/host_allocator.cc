#include "harness/worker/host_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include "harness/common/error.h"

namespace dbh::harness::worker {
namespace {

// Note [Keeping freed host memory] (host_allocator.h).
class CachingHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (static_cast<int64_t>(n) < kMinCachedBytes) {
      void* data = c10::alloc_cpu(n);
      return {data, data, &free_small, c10::Device(c10::DeviceType::CPU)};
    }
    void* data = take(n);
    return {data, data, &free_large, c10::Device(c10::DeviceType::CPU)};
  }

  // raw_allocate/raw_deallocate (oneDNN's scratch memory) come here with
  // either size, and possibly with a block allocated before this allocator
  // was installed.
  c10::DeleterFnPtr raw_deleter() const override { return &free_any; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  HostAllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    HostAllocatorStats s = stats_;
    s.installed = true;
    return s;
  }

  void release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_locked(stats_.cached_bytes);
  }

  void set_keep(bool keep) {
    std::lock_guard<std::mutex> lock(mutex_);
    keep_ = keep;
    if (!keep_) release_locked(stats_.cached_bytes);
  }

  static CachingHostAllocator& instance() {
    // Never destroyed: tensors of static lifetime are freed after main.
    static auto* a = new CachingHostAllocator();
    return *a;
  }

 private:
  static void free_small(void* data) { c10::free_cpu(data); }
  static void free_large(void* data) { instance().give_back(data); }
  static void free_any(void* data) {
    if (!instance().give_back(data)) c10::free_cpu(data);
  }

  // A kept block of at least `n` bytes and at most an eighth more, or a new
  // one of n bytes rounded up to whole pages.
  void* take(size_t n) {
    const size_t size = (n + 4095) / 4096 * 4096;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 8) {
        void* data = it->second;
        const size_t got = it->first;
        free_.erase(it);
        stats_.cached_bytes -= static_cast<int64_t>(got);
        hand_out(data, got);
        ++stats_.hits;
        return data;
      }
      ++stats_.misses;
      // The bound: handed out + kept ≤ 9/8 of the peak handed out, that peak
      // counting this request.
      const int64_t peak = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes + static_cast<int64_t>(size));
      const int64_t over = stats_.allocated_bytes + stats_.cached_bytes + static_cast<int64_t>(size) - (peak + peak / 8);
      if (over > 0) release_locked(over);
    }
    void* data = nullptr;
    try {
      data = c10::alloc_cpu(size);
    } catch (const c10::Error&) {
      // Refused: what is kept goes back to the system first, as the CUDA
      // caching allocator does before it reports out of memory.
      release_all();
      data = c10::alloc_cpu(size);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    hand_out(data, size);
    return data;
  }

  void hand_out(void* data, size_t size) {
    live_.emplace(data, size);
    stats_.allocated_bytes += static_cast<int64_t>(size);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  }

  // False when `data` is not a large block handed out by this allocator.
  bool give_back(void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(data);
    if (it == live_.end()) return false;
    const size_t size = it->second;
    live_.erase(it);
    stats_.allocated_bytes -= static_cast<int64_t>(size);
    if (!keep_) {
      c10::free_cpu(data);
      return true;
    }
    free_.emplace(size, data);
    stats_.cached_bytes += static_cast<int64_t>(size);
    return true;
  }

  // Frees kept blocks, largest first, until `bytes` are freed or none is left.
  void release_locked(int64_t bytes) {
    while (bytes > 0 && !free_.empty()) {
      auto it = std::prev(free_.end());
      c10::free_cpu(it->second);
      bytes -= static_cast<int64_t>(it->first);
      stats_.cached_bytes -= static_cast<int64_t>(it->first);
      ++stats_.releases;
      free_.erase(it);
    }
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;         // kept blocks by size
  std::unordered_map<void*, size_t> live_;     // large blocks handed out
  HostAllocatorStats stats_;
  bool keep_ = true;  // keep_freed_host_memory
};

bool g_installed = false;

}  // namespace

void install_host_allocator() {
  const char* env = std::getenv("DBH_HOST_ALLOCATOR");
  const std::string choice = env != nullptr ? env : "";
  if (choice == "system") return;
  if (!choice.empty() && choice != "caching") {
    throw UsageError("$DBH_HOST_ALLOCATOR: expected \"caching\" (the default) or \"system\", but got \"" +
                                choice + "\"");
  }
  if (g_installed) return;
  // Priority 1: above LibTorch's default CPU allocator (0).
  c10::SetCPUAllocator(&CachingHostAllocator::instance(), 1);
  g_installed = true;
}

HostAllocatorStats host_allocator_stats() {
  if (!g_installed) return {};
  return CachingHostAllocator::instance().stats();
}

void release_cached_host_memory() {
  if (g_installed) CachingHostAllocator::instance().release_all();
}

void keep_freed_host_memory(bool keep) {
  if (g_installed) CachingHostAllocator::instance().set_keep(keep);
}

}  // namespace dbh::harness::worker

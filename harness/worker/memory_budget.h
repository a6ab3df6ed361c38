#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dbh::harness::worker {

/// How a memory budget was put in force, for the report.
struct BudgetEnforcement {
  bool applied = false;
  std::string method;        // "RLIMIT_DATA" | "cuda ballast + allocator limit"
  int64_t budget_bytes = 0;
  int64_t device_total = 0;  // CUDA: the real card's memory
  int64_t used_before = 0;   // CUDA: context, libraries, other processes
  int64_t ballast_bytes = 0;
  double allocator_fraction = 0;
  std::string detail;        // how close the emulation is
  nlohmann::json to_json() const;
};

/// Makes the worker behave as on a device (CUDA) or host (CPU) with
/// `budget_bytes` of memory.
///
/// Note [Emulating a smaller GPU]: the caching allocator's fraction cap
/// leaves the CUDA context, cuDNN/cuBLAS workspaces and library loads
/// uncounted. So on CUDA the difference between the card's free memory and
/// the budget (minus what is already used) is held in a ballast allocated with
/// cudaMalloc, outside the allocator, and the allocator's limit is set too.
/// Everything then competes for the budget as it would on the smaller card.
/// On the CPU, RLIMIT_DATA caps the worker's heap and anonymous mappings.
BudgetEnforcement enforce_memory_budget(const std::string& device, int64_t budget_bytes);

/// Memory now: process RSS and its peak; on CUDA also the caching allocator's
/// allocated/reserved bytes and their peaks.
nlohmann::json memory_sample(const std::string& device);
/// Starts recording the CUDA caching allocator's history (the last
/// `max_entries` allocation events, no stack traces). False off CUDA.
bool record_memory_history(const std::string& device, int64_t max_entries);
/// Writes the allocator's snapshot with its recorded history to `path` in the
/// format PyTorch's memory viewer opens (snapshot.pickle). False off CUDA.
bool write_memory_snapshot(const std::string& device, const std::string& path);
/// Resets the CUDA allocator's peak counters (per-step peaks).
void reset_memory_peaks(const std::string& device);

}  // namespace dbh::harness::worker

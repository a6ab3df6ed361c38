#pragma once

#include <cstdint>
#include <string>

namespace dbh::harness::worker {

/// Note [Keeping freed host memory]: LibTorch's CPU allocator hands every
/// block to glibc, which gives blocks of 32 MiB and more (and, when the top
/// of its heap is free, smaller ones) back to the kernel at once. A training
/// step frees its activations at the end and allocates the same sizes again
/// in the next: at 640² on 2 cores that is 3-3.5 GB of fresh pages a step,
/// about 870k page faults, a quarter of the step's time spent in the kernel.
///
/// The caching host allocator keeps freed blocks of kMinCachedBytes or more
/// and hands them out again for a request of the same size or up to an
/// eighth smaller. What it holds stays bounded: the bytes handed out plus the
/// bytes kept never exceed the largest amount handed out at once so far
/// (the working set's peak) by more than an eighth; a request that would go
/// over frees kept blocks first, largest first. When the system refuses a
/// block (a full machine), every kept block is freed and the request tried
/// once more. Smaller blocks go to LibTorch's allocator unchanged.
///
/// Under a host memory budget nothing is kept (keep_freed_host_memory).
/// `$DBH_HOST_ALLOCATOR=system` keeps LibTorch's allocator (the choice is an
/// outcome variable: it changes the peak resident size a run reports).
struct HostAllocatorStats {
  bool installed = false;
  int64_t allocated_bytes = 0;       // large blocks handed out now
  int64_t cached_bytes = 0;          // large blocks kept for reuse
  int64_t peak_allocated_bytes = 0;  // the most handed out at once
  int64_t hits = 0;                  // requests served from kept blocks
  int64_t misses = 0;                // requests that went to the system
  int64_t releases = 0;              // kept blocks freed to stay in bounds
};

/// The smallest block the allocator keeps (1 MiB).
inline constexpr int64_t kMinCachedBytes = int64_t{1} << 20;

/// Makes the caching host allocator LibTorch's CPU allocator, unless
/// $DBH_HOST_ALLOCATOR says "system". Idempotent; tensors allocated before
/// keep their own deleters. Throws UsageError for any other value
/// of $DBH_HOST_ALLOCATOR, naming it.
void install_host_allocator();

/// The allocator's counters (installed = false and zeros when LibTorch's own
/// allocator is in use).
HostAllocatorStats host_allocator_stats();

/// Frees every kept block (tests; a caller about to measure memory).
void release_cached_host_memory();

/// Whether freed blocks are kept (true by default). Under a host memory
/// budget the worker turns keeping off and frees what is kept: the budget
/// emulates a smaller machine, where memory LibTorch frees is free for every
/// other allocator of the process too (oneDNN's primitives, OpenCV, the C++
/// runtime), and blocks kept for tensors would make those fail first ("could
/// not create a primitive" instead of the out-of-memory the smaller machine
/// shows).
void keep_freed_host_memory(bool keep);

}  // namespace dbh::harness::worker

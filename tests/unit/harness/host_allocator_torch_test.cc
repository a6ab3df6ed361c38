// The caching host allocator (Note [Keeping freed host memory]) through
// LibTorch's own allocation path: tensors reuse freed blocks of their size,
// what is kept stays within an eighth of the peak, and a memory budget that
// fits without the cache fits with it. The budget runs in a child process of
// its own (gtest's threadsafe death-test style re-runs this binary), with
// glibc mapping every block so that freeing gives the memory back.
#include "harness/worker/host_allocator.h"

#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

namespace dbh::harness {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

torch::Tensor bytes(int64_t n) { return torch::empty({n}, torch::kUInt8); }

class HostAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::getenv("DBH_HOST_ALLOCATOR"), nullptr) << "the tests need the default choice";
    worker::install_host_allocator();
    worker::release_cached_host_memory();
  }
};

TEST_F(HostAllocatorTest, AFreedBlockIsHandedOutAgainForTheSameSize) {
  const worker::HostAllocatorStats before = worker::host_allocator_stats();
  ASSERT_TRUE(before.installed);
  const void* first = nullptr;
  {
    const torch::Tensor t = bytes(4 * kMiB);
    first = t.data_ptr();
    EXPECT_EQ(worker::host_allocator_stats().allocated_bytes, before.allocated_bytes + 4 * kMiB);
  }
  EXPECT_EQ(worker::host_allocator_stats().cached_bytes, 4 * kMiB);
  const torch::Tensor again = bytes(4 * kMiB);
  EXPECT_EQ(again.data_ptr(), first);
  const worker::HostAllocatorStats after = worker::host_allocator_stats();
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_EQ(after.cached_bytes, 0);
}

TEST_F(HostAllocatorTest, ASmallerRequestTakesAKeptBlockOnlyWithinAnEighth) {
  {
    // Freed at once, both kept: the larger makes a peak under whose bound
    // nothing below is released.
    const torch::Tensor room = bytes(64 * kMiB), block = bytes(8 * kMiB);
  }
  const worker::HostAllocatorStats before = worker::host_allocator_stats();
  {
    const torch::Tensor near = bytes(15 * kMiB / 2);  // 8 MiB ≤ 7.5 MiB + 1/8
    EXPECT_EQ(worker::host_allocator_stats().hits, before.hits + 1);
  }
  const torch::Tensor far = bytes(6 * kMiB);  // 8 MiB > 6 MiB + 1/8
  EXPECT_EQ(worker::host_allocator_stats().hits, before.hits + 1);
  EXPECT_EQ(worker::host_allocator_stats().misses, before.misses + 1);
  EXPECT_EQ(worker::host_allocator_stats().cached_bytes, 72 * kMiB);
}

TEST_F(HostAllocatorTest, SmallTensorsAreNotKept) {
  const worker::HostAllocatorStats before = worker::host_allocator_stats();
  for (int i = 0; i < 10; ++i) bytes(worker::kMinCachedBytes - 1);
  const worker::HostAllocatorStats after = worker::host_allocator_stats();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses);
  EXPECT_EQ(after.cached_bytes, 0);
}

TEST_F(HostAllocatorTest, HandedOutPlusKeptStaysWithinAnEighthOfThePeak) {
  // A peak of its own, above whatever this process handed out before (the
  // block is never touched: no memory is used).
  const int64_t big = std::max<int64_t>(256 * kMiB, 2 * worker::host_allocator_stats().peak_allocated_bytes / kMiB * kMiB);
  bytes(big);
  const int64_t peak = worker::host_allocator_stats().peak_allocated_bytes;
  ASSERT_EQ(peak, big);
  ASSERT_EQ(worker::host_allocator_stats().cached_bytes, big);
  // Blocks no kept one serves: the big block goes once they need its room
  // (after big / 8 of them).
  std::vector<torch::Tensor> held;
  for (int64_t i = 0; i < big / (16 * kMiB) + 4; ++i) {
    held.push_back(bytes(2 * kMiB));
    const worker::HostAllocatorStats s = worker::host_allocator_stats();
    ASSERT_LE(s.allocated_bytes + s.cached_bytes, s.peak_allocated_bytes + s.peak_allocated_bytes / 8) << "block " << i;
  }
  const worker::HostAllocatorStats s = worker::host_allocator_stats();
  EXPECT_EQ(s.peak_allocated_bytes, peak);
  EXPECT_EQ(s.cached_bytes, 0) << "the big block is freed once an eighth of it more is needed";
  EXPECT_GE(s.releases, 1);
}

TEST_F(HostAllocatorTest, UnderABudgetNothingIsKept) {
  bytes(4 * kMiB);
  ASSERT_EQ(worker::host_allocator_stats().cached_bytes, 4 * kMiB);
  worker::keep_freed_host_memory(false);
  EXPECT_EQ(worker::host_allocator_stats().cached_bytes, 0) << "what was kept is freed";
  bytes(4 * kMiB);
  EXPECT_EQ(worker::host_allocator_stats().cached_bytes, 0) << "a freed block goes back at once";
  worker::keep_freed_host_memory(true);
  bytes(4 * kMiB);
  EXPECT_EQ(worker::host_allocator_stats().cached_bytes, 4 * kMiB);
}

TEST_F(HostAllocatorTest, OneDnnScratchMemoryGoesThroughTheRawPath) {
  c10::Allocator* a = c10::GetCPUAllocator();
  const worker::HostAllocatorStats before = worker::host_allocator_stats();
  void* big = a->raw_allocate(2 * kMiB);
  void* small = a->raw_allocate(1024);
  a->raw_deallocate(small);
  a->raw_deallocate(big);
  EXPECT_EQ(worker::host_allocator_stats().cached_bytes, before.cached_bytes + 2 * kMiB);
}

// VmData of this process (brk heap and private anonymous mappings: what
// RLIMIT_DATA counts), in bytes.
int64_t vm_data_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmData:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
  }
  return -1;
}

// In the child: keeps 40 MiB, then leaves room for only 4 MiB more under
// RLIMIT_DATA and asks for 5 MiB, which no kept block serves and the bound
// lets through. Exit 0 when it is granted and the kept blocks were freed.
[[noreturn]] void budget_child() {
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);  // every block here is mapped: freeing unmaps
  worker::install_host_allocator();
  {
    const torch::Tensor a = bytes(32 * kMiB), b = bytes(8 * kMiB);
  }
  if (worker::host_allocator_stats().cached_bytes != 40 * kMiB) {
    std::cerr << "expected 40 MiB kept, got " << worker::host_allocator_stats().cached_bytes << "\n";
    std::exit(3);
  }
  const rlimit limit{static_cast<rlim_t>(vm_data_bytes() + 4 * kMiB), static_cast<rlim_t>(vm_data_bytes() + 4 * kMiB)};
  if (setrlimit(RLIMIT_DATA, &limit) != 0) std::exit(4);
  int64_t kept = -1;
  try {
    const torch::Tensor c = bytes(5 * kMiB);
    c.fill_(1);
    kept = worker::host_allocator_stats().cached_bytes;
  } catch (const std::exception& e) {
    std::cerr << "refused: " << e.what() << "\n";
    std::exit(1);
  }
  std::cerr << "granted; kept " << kept << " bytes\n";
  std::exit(kept == 0 ? 0 : 2);
}

TEST(HostAllocatorBudgetTest, ARefusedBlockFreesWhatIsKeptAndIsGrantedOnRetry) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(budget_child(), ::testing::ExitedWithCode(0), "granted; kept 0 bytes");
}

TEST(HostAllocatorChoiceTest, AnUnknownChoiceIsRefusedNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("DBH_HOST_ALLOCATOR", "jemalloc", 1);
        try {
          worker::install_host_allocator();
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
          std::exit(0);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "DBH_HOST_ALLOCATOR: expected \"caching\" .* or \"system\", but got \"jemalloc\"");
}

}  // namespace
}  // namespace dbh::harness

#pragma once

#include <cstdint>

namespace dbh::harness {

/// The CPUs this process may run on (its affinity mask, which taskset, cgroup
/// cpusets and Slurm narrow), at least 1; what "all cores" means for the
/// intra-op thread pool.
int64_t available_cores();

}  // namespace dbh::harness

#include "harness/common/cpu.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace dbh::harness {

int64_t available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

}  // namespace dbh::harness

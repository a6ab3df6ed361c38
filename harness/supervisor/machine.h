#pragma once

#include <string>
#include <vector>

#include "harness/common/home.h"  // cache_root(), kCacheDirEnv

namespace dbh::harness {


/// The shared libraries this process mapped (LibTorch, CUDA, cuDNN, OpenCV as
/// the binary found them), sorted.
std::vector<std::string> mapped_libraries();

/// mapped_libraries() with their sizes and modification times, as a digest:
/// which LibTorch and CUDA libraries run, not which dbh build. Computed once
/// per process.
std::string libraries_identity();

/// The machine: CPU model and cores, NVIDIA driver and GPUs (model, UUID,
/// bus). The environment variables that steer devices and libraries are the
/// input manifest's (common/environment_vars.h). Computed once per process.
std::string machine_identity();

}  // namespace dbh::harness

#pragma once

#include <string>
#include <vector>

#include "harness/common/home.h"  // cache_root(), kCacheDirEnv

namespace dbh::harness::supervisor {


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

/// Whether this machine shows an NVIDIA GPU: one the driver lists under
/// /proc/driver/nvidia/gpus, a /dev/nvidiaN device (a container that hides
/// /proc/driver), or WSL2's /dev/dxg with the NVIDIA driver's libcuda. Read
/// without loading CUDA; a CUDA scenario on a machine without one is
/// skipped, so nothing is measured for it, and a user's training is not
/// started for it.
bool nvidia_gpu_present();

}  // namespace dbh::harness::supervisor

#pragma once

#include <string>
#include <vector>

namespace dbh::harness {

/// The variable naming dbh's per-user cache folder (measured choices).
inline constexpr const char* kCacheDirEnv = "DBH_CACHE_DIR";

/// dbh's per-user cache folder: $DBH_CACHE_DIR, else $XDG_CACHE_HOME/dbh,
/// else $HOME/.cache/dbh; "" when none of them is set (nothing is cached).
std::string cache_root();

/// Where cache_root() came from, for messages: "$DBH_CACHE_DIR",
/// "$XDG_CACHE_HOME" or "$HOME".
std::string cache_root_origin();

/// The shared libraries this process mapped (LibTorch, CUDA, cuDNN, OpenCV as
/// the binary found them), sorted.
std::vector<std::string> mapped_libraries();

/// mapped_libraries() with their sizes and modification times, as a digest:
/// which LibTorch and CUDA libraries run, not which dbh build. Computed once
/// per process.
std::string libraries_identity();

/// The machine: CPU model and cores, NVIDIA driver and GPUs (model, UUID,
/// bus), and the environment variables that steer devices and libraries
/// (CUDA_*, CUDNN_*, TORCH_*, OMP_*, …). Computed once per process.
std::string machine_identity();

}  // namespace dbh::harness

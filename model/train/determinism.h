#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace dbh::model {

/// Every global switch that decides what a run computes, set in one place.
struct DeterminismOptions {
  TORCH_ARG(uint64_t, seed) = 0;
  /// Intra-op threads; LibTorch defaults to 1 on small machines, so the
  /// trainer always sets it. 0 keeps LibTorch's choice.
  TORCH_ARG(int64_t, threads) = 0;
  TORCH_ARG(bool, cudnn_enabled) = true;
  TORCH_ARG(bool, cudnn_benchmark) = false;
  TORCH_ARG(bool, cudnn_deterministic) = false;
  TORCH_ARG(bool, allow_tf32) = false;
  /// torch.use_deterministic_algorithms(True): errors on nondeterministic ops.
  TORCH_ARG(bool, deterministic_algorithms) = false;
};

/// Applies `options`: seeds the CPU and CUDA generators, sets the thread
/// count and the cuDNN / TF32 switches.
void apply_determinism(const DeterminismOptions& options);

/// Parses "cpu", "cuda", "cuda:N". Throws std::invalid_argument on a bad
/// string and std::runtime_error when CUDA is asked for but unavailable,
/// naming what was found.
torch::Device parse_device(const std::string& spec);

}  // namespace dbh::model

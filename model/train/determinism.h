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

/// The device a run asks for is not on this machine (no CUDA device, or
/// fewer than its index): the run cannot be tried here, which is not a
/// failure of the training.
class DeviceUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses "cpu", "cuda", "cuda:N". Throws std::invalid_argument on a bad
/// string and DeviceUnavailable when CUDA is asked for but unavailable,
/// naming what was found.
torch::Device parse_device(const std::string& spec);

}  // namespace dbh::model

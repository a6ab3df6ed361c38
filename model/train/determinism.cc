#include "model/train/determinism.h"

#include <stdexcept>

namespace dbh::model {

void apply_determinism(const DeterminismOptions& o) {
  torch::manual_seed(o.seed());
  if (torch::cuda::is_available()) torch::cuda::manual_seed_all(o.seed());
  if (o.threads() > 0) torch::set_num_threads(static_cast<int>(o.threads()));
  auto& ctx = at::globalContext();
  ctx.setUserEnabledCuDNN(o.cudnn_enabled());
  ctx.setBenchmarkCuDNN(o.cudnn_benchmark());
  ctx.setDeterministicCuDNN(o.cudnn_deterministic());
  ctx.setAllowTF32CuDNN(o.allow_tf32());
  ctx.setAllowTF32CuBLAS(o.allow_tf32());
  ctx.setDeterministicAlgorithms(o.deterministic_algorithms(), /*warn_only=*/false);
}

torch::Device parse_device(const std::string& spec) {
  std::optional<torch::Device> device;
  try {
    device.emplace(spec);
  } catch (const std::exception&) {
    throw std::invalid_argument("expected a device \"cpu\", \"cuda\" or \"cuda:N\", got \"" +
                                spec + "\"");
  }
  if (device->is_cpu()) return *device;
  if (!device->is_cuda()) {
    throw std::invalid_argument("expected a device \"cpu\", \"cuda\" or \"cuda:N\", got \"" +
                                spec + "\"");
  }
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    throw DeviceUnavailable("device \"" + spec + "\" requested, but no CUDA device is available");
  }
  const int64_t index = device->has_index() ? device->index() : 0;
  if (index >= count) {
    throw DeviceUnavailable("device \"" + spec + "\" requested, but only " + std::to_string(count) +
                            " CUDA device(s) exist");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace dbh::model

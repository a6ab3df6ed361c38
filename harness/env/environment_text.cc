// The environment as text and JSON: torch-free, for the report writers
// (dbh_harness_core); collecting it needs LibTorch (environment.cc).
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/env/environment.h"

namespace dbh::harness::env {

std::string format_environment(const Environment& e) {
  std::ostringstream out;
  auto gib = [](int64_t bytes) {
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(1);
    s << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
    return s.str();
  };
  out << "dbh:       " << e.dbh_version << "\n"
      << "LibTorch:  " << e.torch_version
      << (e.torch_cuda.empty() ? " (CPU build)" : " (CUDA " + e.torch_cuda + ")") << "\n"
      << "cuDNN:     " << (e.cudnn_version.empty() ? "unavailable" : e.cudnn_version) << "\n"
      << "OpenCV:    " << e.opencv_version << "\n"
      << "CUDA:      "
      << (e.cuda_available ? std::to_string(e.cuda_device_count) + " device(s)"
                           : "no device")
      << "\n";
  for (const auto& g : e.gpus) out << "GPU:       " << g << "\n";
  out << "Driver:    " << (e.driver_version.empty() ? "none" : e.driver_version) << "\n"
      << "Device:    " << e.device << "\n"
      << "CPU:       " << e.cpu_model << " (" << e.cpu_cores << " cores, "
      << e.torch_threads << " torch threads)\n"
      << "RAM:       " << gib(e.ram_bytes) << "\n"
      << "OS:        " << e.os << (e.wsl ? " (WSL2)" : "") << "\n"
      << "Kernel:    " << e.kernel << "\n";
  return out.str();
}

std::string environment_json(const Environment& e) {
  nlohmann::ordered_json j;
  j["dbh_version"] = e.dbh_version;
  j["torch_version"] = e.torch_version;
  j["torch_cuda"] = e.torch_cuda;
  j["cudnn_version"] = e.cudnn_version;
  j["opencv_version"] = e.opencv_version;
  j["cuda_available"] = e.cuda_available;
  j["cuda_device_count"] = e.cuda_device_count;
  j["gpus"] = e.gpus;
  j["driver_version"] = e.driver_version;
  j["device"] = e.device;
  j["cpu_model"] = e.cpu_model;
  j["cpu_cores"] = e.cpu_cores;
  j["torch_threads"] = e.torch_threads;
  j["ram_bytes"] = e.ram_bytes;
  j["os"] = e.os;
  j["kernel"] = e.kernel;
  j["wsl"] = e.wsl;
  j["hostname"] = e.hostname;
  j["alloc_conf"] = e.alloc_conf;
  j["compute_capability"] = e.compute_capability;
  j["kernel_archs"] = e.kernel_archs;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dbh::harness::env

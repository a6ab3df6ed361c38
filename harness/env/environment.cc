#include "harness/env/environment.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <opencv2/core/version.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#ifdef DBH_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include "harness/gpu/fault_kernels.h"
#include "harness/version.h"

namespace dbh::harness {
namespace {

std::string read_first_line_with(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return line;
  }
  return {};
}

std::string after_colon(const std::string& line) {
  const auto pos = line.find(':');
  if (pos == std::string::npos) return {};
  auto v = line.substr(pos + 1);
  v.erase(0, v.find_first_not_of(" \t"));
  return v;
}

std::string trim_quotes(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
    s = s.substr(1, s.size() - 2);
  }
  return s;
}

}  // namespace

Environment collect_environment() {
  Environment env;
  env.dbh_version = kVersion;
  env.torch_version = TORCH_VERSION;
  env.opencv_version = CV_VERSION;
  try {
    const long v = at::detail::getCUDAHooks().versionCUDART();
    if (v > 0) {
      env.torch_cuda = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
    }
  } catch (const std::exception&) {
  }
  try {
    env.cuda_available = torch::cuda::is_available();
    env.cuda_device_count = static_cast<int64_t>(torch::cuda::device_count());
    if (torch::cuda::cudnn_is_available()) {
      const long v = at::detail::getCUDAHooks().versionCuDNN();
      env.cudnn_version = std::to_string(v / 10000) + "." +
                          std::to_string((v / 100) % 100) + "." +
                          std::to_string(v % 100);
    }
  } catch (const std::exception&) {
    env.cuda_available = false;
  }
  if (env.cudnn_version.empty()) {
    // Without a device cuDNN is not loaded; report what the build links.
    try {
      const long v = at::detail::getCUDAHooks().versionCuDNN();
      if (v > 0) {
        env.cudnn_version = std::to_string(v / 10000) + "." +
                            std::to_string((v / 100) % 100) + "." +
                            std::to_string(v % 100) + " (linked; no device)";
      }
    } catch (const std::exception&) {
    }
  }
  env.device = env.cuda_available ? "cuda:0" : "cpu";
  env.driver_version = after_colon(
      read_first_line_with("/proc/driver/nvidia/version", "NVRM version"));
#ifdef DBH_TORCH_HAS_CUDA
  for (int64_t i = 0; i < env.cuda_device_count; ++i) {
    const auto* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
    std::ostringstream g;
    g.setf(std::ios::fixed);
    g.precision(1);
    g << "cuda:" << i << " " << prop->name << ", "
      << static_cast<double>(prop->totalGlobalMem) / (1024.0 * 1024.0 * 1024.0)
      << " GiB, sm_" << prop->major << prop->minor;
    env.gpus.push_back(g.str());
    if (i == 0) env.compute_capability = std::to_string(prop->major) + "." + std::to_string(prop->minor);
  }
#endif
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      env.alloc_conf = std::string(name) + "=" + v;
      break;
    }
  }
  env.kernel_archs = gpu::built_architectures();
  env.cpu_model = after_colon(read_first_line_with("/proc/cpuinfo", "model name"));
  env.cpu_cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  env.torch_threads = at::get_num_threads();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) env.ram_bytes = static_cast<int64_t>(pages) * page;
  const std::string kPretty = "PRETTY_NAME=";
  const auto os_line = read_first_line_with("/etc/os-release", kPretty);
  if (!os_line.empty()) env.os = trim_quotes(os_line.substr(kPretty.size()));
  struct utsname u {};
  if (uname(&u) == 0) {
    env.kernel = u.release;
    const std::string release = u.release;
    env.wsl = release.find("microsoft") != std::string::npos ||
              release.find("WSL") != std::string::npos;
    env.hostname = u.nodename;
  }
  return env;
}

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

}  // namespace dbh::harness

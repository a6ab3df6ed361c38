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

namespace dbh::harness::env {
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

}  // namespace dbh::harness::env

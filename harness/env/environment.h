#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dbh::harness::env {

/// What a report needs to know about the machine and the libraries.
struct Environment {
  std::string dbh_version;
  std::string torch_version;   // LibTorch, e.g. "2.11.0"
  std::string torch_cuda;      // CUDA version LibTorch was built with, or ""
  std::string cudnn_version;   // e.g. "9.19.0", or "" when unavailable
  std::string opencv_version;
  bool cuda_available = false;
  int64_t cuda_device_count = 0;
  std::vector<std::string> gpus;  // "NVIDIA H100 80GB HBM3, 79.2 GiB, sm_90"
  std::string driver_version;     // NVIDIA driver, "" without one
  std::string device;             // the default device dbh trains on
  std::string cpu_model;
  int64_t cpu_cores = 0;
  int64_t torch_threads = 0;
  int64_t ram_bytes = 0;
  std::string os;      // PRETTY_NAME from /etc/os-release
  std::string kernel;  // uname -r
  bool wsl = false;
  std::string hostname;
  std::string alloc_conf;          // PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF, "" = defaults
  std::string compute_capability;  // first GPU's, e.g. "9.0"; "" without one
  std::string kernel_archs;        // dbh's GPU fault kernels, e.g. "75-real,…"; "" = not built
};

/// Collects the environment. Never throws; unknown fields stay empty.
Environment collect_environment();

/// "Key: value" lines, the order of the reports' Environment section.
std::string format_environment(const Environment& env);

/// The same as a JSON object text (stable keys).
std::string environment_json(const Environment& env);

}  // namespace dbh::harness::env

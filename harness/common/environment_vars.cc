#include "harness/common/environment_vars.h"

#include <cstring>

extern char** environ;

namespace dbh::harness {

const std::vector<EnvironmentVariable>& outcome_variables() {
  static const std::vector<EnvironmentVariable> kList = {
      {"OMP_", "OpenMP threads and scheduling (LibTorch's intra-op pool)"},
      {"KMP_", "Intel OpenMP settings"},
      {"GOMP_", "GNU OpenMP settings"},
      {"MKL_", "MKL threads and code paths"},
      {"OPENBLAS_", "OpenBLAS threads and code paths"},
      {"DNNL_", "oneDNN kernels and instruction sets"},
      {"ONEDNN_", "oneDNN kernels and instruction sets"},
      {"OPENCV_", "OpenCV's decoders and their limits (OPENCV_IO_MAX_IMAGE_PIXELS), threads, instruction sets"},
      {"CUDA_", "the devices a worker sees, launch blocking, caching of modules"},
      {"CUDNN_", "cuDNN's logging and engine choices"},
      {"CUBLAS_", "cuBLAS workspaces (determinism)"},
      {"CUBLASLT_", "cuBLASLt workspaces"},
      {"NVIDIA_", "the container runtime's device selection"},
      {"NCCL_", "collectives"},
      {"PYTORCH_", "the CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF), NVML checks"},
      {"TORCH_", "PyTorch's flags (TORCH_CUDNN_V8_API_*, TORCH_SHOW_CPP_STACKTRACES, …)"},
      {"ATEN_", "ATen's CPU capability"},
      {"LD_PRELOAD", "libraries loaded before all others (an allocator, a hook)"},
      {"LD_LIBRARY_PATH", "which LibTorch, CUDA, cuDNN and OpenCV a worker loads"},
      {"MALLOC_", "glibc's allocator"},
      {"GLIBC_TUNABLES", "glibc's allocator and string functions"},
      {"PYTHONPATH", "the modules an external Python worker imports"},
      {"PYTHONHASHSEED", "an external Python worker's hashing (set and dict order)"},
      {"VIRTUAL_ENV", "an external worker's Python environment"},
      {"CONDA_PREFIX", "an external worker's conda environment"},
      {"DBH_HOST_ALLOCATOR", "which CPU allocator a worker uses (caching or system): its peak resident size"},
      {"DBH_HOME", "the knowledge base and data files dbh reads"},
  };
  return kList;
}

const std::vector<EnvironmentVariable>& reporting_variables() {
  static const std::vector<EnvironmentVariable> kList = {
      {"PATH", "finds dbh itself for printed commands and an external worker's program (the file it finds is in the "
               "key)"},
      {"HOME", "the default cache folder"},
      {"XDG_CACHE_HOME", "the default cache folder"},
      {"DBH_CACHE_DIR", "the cache folder"},
      {"DBH_PROBE_CACHE_MIB", "the probe cache's size cap"},
      {"DBH_TUNE_MAX_OTHERS_CORES", "how much load of other processes a layout/threads measurement may see and be "
                                    "trusted (speed, never an outcome)"},
      {"DBH_TUNE_BUDGET_S", "how many seconds a layout/threads measurement may take before a run keeps PyTorch's "
                            "defaults (speed, never an outcome)"},
      {"GITHUB_ACTIONS", "CI reporting"},
      {"GITHUB_STEP_SUMMARY", "CI reporting"},
      {"GITHUB_WORKSPACE", "CI reporting"},
      {"GITLAB_CI", "CI reporting"},
      {"CI_PROJECT_DIR", "CI reporting"},
      {"JOB_COMPLETION_INDEX", "which shard of a suite runs"},
      {"SLURM_ARRAY_TASK_", "which shard of a suite runs"},
      {"DBH_SHARD_COUNT", "which shard of a suite runs"},
      {"CI_NODE_INDEX", "which shard of a suite runs (GitLab parallel jobs)"},
      {"CI_NODE_TOTAL", "which shard of a suite runs (GitLab parallel jobs)"},
      {"GTEST_SHARD_INDEX", "which shard of a suite runs"},
      {"GTEST_TOTAL_SHARDS", "which shard of a suite runs"},
      {"TEST_SHARD_INDEX", "which shard of a suite runs (Bazel)"},
      {"TEST_TOTAL_SHARDS", "which shard of a suite runs (Bazel)"},
      {"DBH_WORKER_PROTOCOL", "the worker protocol, set by dbh for each trial"},
      {"DBH_WORKER_DESCRIBE", "the worker protocol, set by dbh for each trial"},
      {"DBH_EVENT_FD", "the worker protocol, set by dbh for each trial"},
      {"DBH_SCENARIO", "the worker protocol, set by dbh for each trial"},
      {"DBH_SCENARIO_HASH", "the worker protocol, set by dbh for each trial"},
      {"DBH_TRIAL_DIR", "the worker protocol, set by dbh for each trial"},
      {"DBH_TRIAL", "the worker protocol, set by dbh for each trial"},
      {"DBH_SUPERVISOR_PID", "the worker protocol, set by dbh for each trial"},
  };
  return kList;
}

bool covered_by(const std::vector<EnvironmentVariable>& list, const std::string& name) {
  for (const auto& v : list) {
    const size_t n = std::strlen(v.name);
    const bool prefix = n > 0 && v.name[n - 1] == '_';
    if (prefix ? name.compare(0, n, v.name) == 0 && name.size() > n : name == v.name) return true;
  }
  return false;
}

std::map<std::string, std::string> outcome_environment(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env) {
    if (covered_by(outcome_variables(), name)) out.emplace(name, value);
  }
  return out;
}

std::map<std::string, std::string> outcome_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return outcome_environment(env);
}

}  // namespace dbh::harness

// Built instead of fault_kernels.cu when no CUDA compiler was found: the
// `cuda_error` fault then throws the error's text (see Note [Real GPU faults]).
#include "harness/gpu/fault_kernels.h"

namespace dbh::harness::gpu {

bool kernels_built() { return false; }

std::string built_architectures() { return ""; }

KernelFaultResult launch_fault_kernel(KernelFault, int) {
  KernelFaultResult r;
  r.error_text = "this dbh was built without a CUDA compiler";
  return r;
}

}  // namespace dbh::harness::gpu

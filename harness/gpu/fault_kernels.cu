// Kernels behind the real `cuda_error` faults; see Note [Real GPU faults].
#include "harness/gpu/fault_kernels.h"

#include <cstdint>

#include <cuda_runtime_api.h>

namespace dbh::harness::gpu {
namespace {

__global__ void illegal_instruction_kernel() {
  // The trap instruction aborts the kernel. Measured on an H100 (driver 580,
  // tests/gpu/fault_probe.cu): a trap and a breakpoint both end in
  // cudaErrorLaunchFailure ("unspecified launch failure"), sticky; no kernel
  // built with nvcc there produced cudaErrorIllegalInstruction itself.
  __trap();
}

__global__ void illegal_memory_access_kernel(int* where) {
  // Far outside any allocation: the store faults on the device.
  *where = 1;
}

}  // namespace

bool kernels_built() { return true; }

std::string built_architectures() { return DBH_CUDA_ARCHITECTURES; }

KernelFaultResult launch_fault_kernel(KernelFault kind, int device) {
  KernelFaultResult r;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) {
    if (kind == KernelFault::illegal_instruction) {
      illegal_instruction_kernel<<<1, 1>>>();
    } else {
      // 2^47: inside the 49-bit virtual range, never mapped by the driver.
      illegal_memory_access_kernel<<<1, 1>>>(reinterpret_cast<int*>(uintptr_t{1} << 47));
    }
    e = cudaGetLastError();
    r.launched = e == cudaSuccess;
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  r.error_code = static_cast<int>(e);
  r.error_name = cudaGetErrorName(e);
  r.error_text = cudaGetErrorString(e);
  return r;
}

}  // namespace dbh::harness::gpu

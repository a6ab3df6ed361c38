#pragma once

#include <string>

namespace dbh::harness::gpu {

/// Kernels that really break a CUDA context, for the `cuda_error` fault.
///
/// Note [Real GPU faults]: on a CUDA device the fault launches one of these
/// kernels from inside the named module's forward or backward, so the error
/// comes from the hardware and the context is really lost: every later CUDA
/// call in the worker (the next kernel, the allocator's frees, teardown) fails
/// as it does in the seed reports. They are compiled by nvcc when the toolkit
/// is present at build time; elsewhere `kernels_built()` is false and the
/// fault falls back to throwing the error's text (reported as "emulated").
enum class KernelFault {
  illegal_instruction,    // executes `trap` (the GPU reports a launch failure)
  illegal_memory_access,  // stores through a pointer into unmapped memory
};

/// What a launch did.
struct KernelFaultResult {
  bool launched = false;  // the kernel was put on the device
  int error_code = 0;     // cudaError_t after synchronising (0: no error)
  std::string error_name; // e.g. "cudaErrorIllegalInstruction"
  std::string error_text; // e.g. "an illegal instruction was encountered"
};

/// Whether this binary carries the kernels (built with nvcc).
bool kernels_built();

/// Launches the kernel on `device` and synchronises. Never throws.
KernelFaultResult launch_fault_kernel(KernelFault kind, int device);

/// "sm_75,sm_80,…": the architectures the kernels were built for ("" when
/// not built), for the report's environment section.
std::string built_architectures();

}  // namespace dbh::harness::gpu

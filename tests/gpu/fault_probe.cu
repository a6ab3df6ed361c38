// Which CUDA error each way of breaking a kernel produces on this GPU, one
// process per variant (a broken context cannot be reused). Built and run by
// scripts/gpu-check.sh probe; its table chose the kernels in
// harness/gpu/fault_kernels.cu (docs/gpu.md).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <cuda_runtime_api.h>

__device__ unsigned int not_code[64];

__global__ void k_trap() { __trap(); }
__global__ void k_brkpt() { asm volatile("brkpt;"); }
__global__ void k_null_call() {
  void (*volatile f)() = nullptr;
  f();
}
__global__ void k_data_call() {
  for (int i = 0; i < 64; ++i) not_code[i] = 0xffffffffu;
  void (*volatile f)() = reinterpret_cast<void (*)()>(&not_code[0]);
  f();
}
__global__ void k_bad_store(int* p) { *p = 1; }
__global__ void k_misaligned(char* p) { *reinterpret_cast<int*>(p + 1) = 1; }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__global__ void k_setmaxnreg() { asm volatile("setmaxnreg.inc.sync.aligned.u32 240;"); }
__global__ void k_wgmma_fence_diverged() {
  if (threadIdx.x == 0) asm volatile("wgmma.fence.sync.aligned;");
}
#else
__global__ void k_setmaxnreg() {}
__global__ void k_wgmma_fence_diverged() {}
#endif

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* v = argv[1];
  char* dev = nullptr;
  cudaMalloc(&dev, 64);
  if (!strcmp(v, "trap")) k_trap<<<1, 1>>>();
  else if (!strcmp(v, "brkpt")) k_brkpt<<<1, 1>>>();
  else if (!strcmp(v, "null_call")) k_null_call<<<1, 1>>>();
  else if (!strcmp(v, "data_call")) k_data_call<<<1, 1>>>();
  else if (!strcmp(v, "bad_store")) k_bad_store<<<1, 1>>>(reinterpret_cast<int*>(uintptr_t{1} << 47));
  else if (!strcmp(v, "misaligned")) k_misaligned<<<1, 1>>>(dev);
  else if (!strcmp(v, "setmaxnreg")) k_setmaxnreg<<<1, 32>>>();
  else if (!strcmp(v, "wgmma_fence_diverged")) k_wgmma_fence_diverged<<<1, 128>>>();
  else return 2;
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  const cudaError_t after = cudaMalloc(&dev, 64);  // sticky?
  printf("%-22s %-32s %-48s sticky=%s\n", v, cudaGetErrorName(e), cudaGetErrorString(e),
         after != cudaSuccess ? "yes" : "no");
  return 0;
}

/*
 * cuda.cu — CUDA backend: device probe (more in cuda_ops below).
 * Compiled only when the Makefile finds nvcc (CUDA=1, HF_HAVE_CUDA).
 */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int tr_cuda_probe_impl(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "%s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (n <= 0) {
        snprintf(why, whylen, "no CUDA device visible (CUDA_VISIBLE_DEVICES?)");
        return 0;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        snprintf(why, whylen, "cannot query device 0");
        return 0;
    }
    snprintf(why, whylen, "%s, %.1f GiB, sm_%d%d", p.name, p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    return 1;
}

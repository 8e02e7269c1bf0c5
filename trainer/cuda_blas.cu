/*
 * cuda_blas.cu — what the CUDA backend loads and asks of the machine: the
 * probe for a usable GPU (device.c's tr_cuda_probe) and cuBLAS, opened on
 * first use (cuda_int.h, tr_cublas_ready). Compiled only with CUDA
 * (HF_HAVE_CUDA). NCCL is linked and used by the collectives
 * (coll_nccl.c), not here.
 */
#include "trainer/cuda_int.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

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

/* cuBLAS is opened on first use, not linked: loading libcublas and
 * libcublasLt costs about 75 ms of relocations at every start of the
 * trainer, and most trials (every CPU trial, every rung-0 trial of an ASHA
 * sweep on a CPU agent) never call it (docs/trainer.md, "Start-up"). The
 * four entry points used are resolved by dlsym from the soname of the
 * major version the headers describe; the executable's run path (CUDA's
 * lib64) is searched as for a linked library. */
#define HF_STR2(x) #x
#define HF_STR(x) HF_STR2(x)
tr_cublas_api tr_cbl = {PTHREAD_ONCE_INIT, 0, "", NULL, NULL, NULL, NULL};

static void cublas_open(void)
{
    static const char *so = "libcublas.so." HF_STR(CUBLAS_VER_MAJOR);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(tr_cbl.why, sizeof tr_cbl.why, "cannot load %s: %s", so, dlerror());
        return;
    }
    *(void **)&tr_cbl.create = dlsym(h, "cublasCreate_v2");
    *(void **)&tr_cbl.destroy = dlsym(h, "cublasDestroy_v2");
    *(void **)&tr_cbl.set_math_mode = dlsym(h, "cublasSetMathMode");
    *(void **)&tr_cbl.sgemm = dlsym(h, "cublasSgemm_v2");
    if (!tr_cbl.create || !tr_cbl.destroy || !tr_cbl.set_math_mode || !tr_cbl.sgemm) {
        snprintf(tr_cbl.why, sizeof tr_cbl.why, "%s lacks cublasCreate_v2/cublasSgemm_v2", so);
        dlclose(h);
        return;
    }
    tr_cbl.ok = 1;   /* h stays open for the process's life */
}

int tr_cublas_ready(char *why, size_t whylen)
{
    pthread_once(&tr_cbl.once, cublas_open);
    if (!tr_cbl.ok) snprintf(why, whylen, "%s", tr_cbl.why);
    return tr_cbl.ok ? 0 : -1;
}

/*
 * cuda_int.h — what the CUDA backend's files share (nvcc only, C++):
 * the device state of one model (struct tr_cuda), the error macros, the
 * kernels' declarations (cuda_kernels.cu) and the cuBLAS entry points
 * opened at run time (cuda_blas.cu). The host side (cuda.cu) launches the
 * kernels and calls cuBLAS; no file but those three includes this.
 *
 * Layout conventions match the CPU reference (layer.h): row-major
 * activations (B, C, H, W), dense W (out, in) then b (out), conv W
 * (Co, Ci, k, k) then b (Co) inside the flat parameter array.
 */
#ifndef TR_CUDA_INT_H
#define TR_CUDA_INT_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "hf_err.h"
#include "hf_log.h"
#include "trainer/backend.h"
#include "trainer/device.h"
}

#define NORM_BLOCKS 256

/* One model's state on the device. Every array is device memory except
 * the h_ ones; sized for max_batch rows. */
struct tr_cuda {
    cublasHandle_t h;
    int      n_layers, max_batch, n_classes, first_param;
    tr_layer lay[TR_MAX_LAYERS];             /* shapes/offsets (host scratch pointers unused) */
    size_t   n_params, n_bufs;
    float   *params, *grads, *bufs;          /* device (n_params), (n_params), (n_bufs) */
    float   *act[TR_MAX_LAYERS + 1], *dact[TR_MAX_LAYERS + 1];   /* (B, in(i)) */
    float   *col[TR_MAX_LAYERS];             /* CONV2D (K, N) then tmp (Co, N) */
    int32_t *argmax[TR_MAX_LAYERS];          /* MAXPOOL (B, C, OH, OW) */
    uint8_t *mask[TR_MAX_LAYERS];            /* DROPOUT (B, in) */
    float   *xhat[TR_MAX_LAYERS];            /* BATCHNORM (B, C, H, W) then mean (C), istd (C) */
    int32_t *y;                              /* (max_batch) labels */
    double  *rowloss;                        /* (max_batch) */
    int     *rowhit;                         /* (max_batch) */
    double  *h_rowloss;                      /* host copies */
    int     *h_rowhit;
    float   *ostate;                         /* optimizer state (n_ostate), layout as tr_optim.state */
    size_t   n_ostate;
    double  *norm_part;                      /* (NORM_BLOCKS + 1) grad-norm partial sums */
};

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    hf_error("%s:%d %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); goto fail; } } while (0)
#define CB(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    hf_error("%s:%d %s: cublas status %d", __FILE__, __LINE__, #call, (int)s_); goto fail; } } while (0)

static inline unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

/* ---- cuBLAS, opened on first use (cuda_blas.cu) ---------------------------- */

typedef struct tr_cublas_api {
    pthread_once_t once;
    int ok;
    char why[256];
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
} tr_cublas_api;

/* The entry points; valid once tr_cublas_ready returned 0. */
extern tr_cublas_api tr_cbl;
/* RET 0 with tr_cbl set, or -1 with why. */
int tr_cublas_ready(char *why, size_t whylen);
/* Is a CUDA GPU usable? RET 1 (why: its name) or 0 (why: the reason). */
extern "C" int tr_cuda_probe_impl(char *why, size_t whylen);

/* ---- kernels (cuda_kernels.cu); shapes as the CPU loops of layer.c -------- */

struct conv_geom { int C, H, W, k, pad, OH, OW, Co; };

__global__ void k_bias_add(float *y, const float *b, int B, int n);
__global__ void k_bias_grad(const float *dy, float *db, int B, int n);
__global__ void k_relu(const float *x, float *y, size_t n);
__global__ void k_relu_back(const float *y, const float *dy, float *dx, size_t n);
__global__ void k_softmax_xent(const float *z, const int32_t *lab, int B, int C, float *dz, float inv,
                               double *rowloss, int *rowhit);
__global__ void k_im2col(const float *x, float *col, conv_geom g, int B);
__global__ void k_col2im(const float *col, float *dx, conv_geom g, int B);
__global__ void k_conv_scatter(const float *tmp, const float *bias, float *y, int B, int Co, int OHW);
__global__ void k_conv_gather(const float *dy, float *tmp, int B, int Co, int OHW);
__global__ void k_row_sum(const float *tmp, float *db, size_t N);
__global__ void k_pool(const float *x, float *y, int32_t *am, int BC, int H, int W, int k, int OH, int OW);
__global__ void k_pool_back(const float *dy, const int32_t *am, float *dx, int BC, int HW, int OHW);
__global__ void k_dropout(const float *x, float *y, uint8_t *mask, int B, size_t per, float pd, float scale,
                          uint64_t seed, int64_t step, int index, int64_t row_base);
__global__ void k_dropout_back(const float *dy, const uint8_t *mask, float *dx, size_t n, float scale);
__global__ void k_bn_forward(const float *x, float *y, float *xhat, float *stat, const float *gamma,
                             const float *beta, float *rmean, float *rvar, int B, int C, int HW, int train,
                             float eps, float mom);
__global__ void k_bn_backward(const float *dy, const float *xhat, const float *stat, const float *gamma,
                              float *dgamma, float *dbeta, float *dx, int B, int C, int HW);
__global__ void k_sgd(float *p, const float *g, size_t n, float lr, float wd);
__global__ void k_sgd_momentum(float *p, const float *g, float *v, size_t n, float lr, float wd, float mu,
                               int first, int nesterov);
__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float dec, float l2, float b1,
                       float b2, float c1, float c2, float step, float rbc2, float eps);
__global__ void k_sumsq(const float *g, size_t n, double *part);
__global__ void k_sum_parts(double *part, int np);
__global__ void k_scale(float *g, size_t n, float k);

#endif

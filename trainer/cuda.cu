/*
 * cuda.cu — the CUDA backend (device.h): probe, and the forward/backward
 * pass of dense/ReLU/flatten stacks on the GPU with cuBLAS + kernels.
 * Compiled only when the Makefile finds nvcc (CUDA=1, HF_HAVE_CUDA).
 *
 * Layout conventions match the CPU reference (layer.c): row-major
 * activations (B, N), dense weights W (out, in) then b (out) inside the
 * flat parameter array. cuBLAS is column-major, so a row-major (R, C)
 * matrix is used as its column-major transpose (C, R):
 *   forward   Y^T (out,B) = W (as op T) x X^T          -> gemm(T, N, out, B, in)
 *   dW        dW^T (in,out) = X^T x dY                 -> gemm(N, T, in, out, B)
 *   dX        dX^T (in,B) = W^T x dY^T                  -> gemm(N, N, in, B, out)
 * Math mode is CUBLAS_DEFAULT_MATH with TF32 disabled so results stay
 * within float rounding of the CPU (tests/unit/test_trainer_cuda.c).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "hf_err.h"
#include "hf_log.h"
#include "trainer/device.h"
}

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

struct tr_cuda {
    cublasHandle_t h;
    int      n_layers, max_batch, n_classes, first_param;
    int      kind[TR_MAX_LAYERS], in[TR_MAX_LAYERS], out[TR_MAX_LAYERS];
    size_t   off[TR_MAX_LAYERS], cnt[TR_MAX_LAYERS];
    size_t   n_params;
    float   *params, *grads;                 /* device (n_params) */
    float   *act[TR_MAX_LAYERS + 1], *dact[TR_MAX_LAYERS + 1];
    int32_t *y;
    double  *rowloss;                        /* (max_batch) */
    int     *rowhit;                         /* (max_batch) */
    double  *h_rowloss;                      /* host copies */
    int     *h_rowhit;
};

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    hf_error("%s:%d %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); goto fail; } } while (0)
#define CB(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    hf_error("%s:%d %s: cublas status %d", __FILE__, __LINE__, #call, (int)s_); goto fail; } } while (0)

__global__ void k_bias_add(float *y, const float *b, int B, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * n) y[i] += b[i % n];
}

__global__ void k_bias_grad(const float *dy, float *db, int B, int n)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float s = 0.0f;
    for (int r = 0; r < B; r++) s += dy[(size_t)r * n + j];
    db[j] = s;
}

__global__ void k_relu(const float *x, float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void k_relu_back(const float *y, const float *dy, float *dx, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* one thread per row: loss (double), hit, and d(mean loss)/dz scaled by 1/scale_B */
__global__ void k_softmax_xent(const float *z, const int32_t *lab, int B, int C, float *dz, float inv,
                               double *rowloss, int *rowhit)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B) return;
    const float *zr = z + (size_t)r * C;
    int arg = 0;
    float mx = zr[0];
    for (int j = 1; j < C; j++) if (zr[j] > mx) { mx = zr[j]; arg = j; }
    double s = 0;
    for (int j = 0; j < C; j++) s += exp((double)(zr[j] - mx));
    int y = lab[r];
    if (y < 0 || y >= C) y = 0;
    rowloss[r] = log(s) - (double)(zr[y] - mx);
    rowhit[r] = arg == y;
    float *d = dz + (size_t)r * C;
    for (int j = 0; j < C; j++) d[j] = (float)(exp((double)(zr[j] - mx)) / s) * inv;
    d[y] -= inv;
}

static unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

extern "C" void tr_cuda_free(tr_cuda *c)
{
    if (!c) return;
    if (c->h) cublasDestroy(c->h);
    cudaFree(c->params);
    cudaFree(c->grads);
    for (int i = 0; i <= TR_MAX_LAYERS; i++) { cudaFree(c->act[i]); cudaFree(c->dact[i]); }
    cudaFree(c->y);
    cudaFree(c->rowloss);
    cudaFree(c->rowhit);
    free(c->h_rowloss);
    free(c->h_rowhit);
    free(c);
}

extern "C" tr_cuda *tr_cuda_new(const tr_model *m, char *err, size_t el)
{
    char why[256];
    if (!tr_cuda_probe_impl(why, sizeof why)) {
        snprintf(err, el, "no usable CUDA GPU: %s", why);
        return NULL;
    }
    for (int i = 0; i < m->n_layers; i++) {
        int k = m->layers[i].kind;
        if (k != TR_DENSE && k != TR_RELU && k != TR_FLATTEN) {
            snprintf(err, el, "the CUDA backend runs dense/relu/flatten stacks; layer %d is %s", i,
                     tr_layer_name(m->layers[i].kind));
            return NULL;
        }
    }
    tr_cuda *c = (tr_cuda *)calloc(1, sizeof *c);
    if (!c) { snprintf(err, el, "out of memory"); return NULL; }
    c->n_layers = m->n_layers;
    c->max_batch = m->max_batch;
    c->n_classes = m->n_classes;
    c->n_params = m->n_params;
    c->first_param = 0;
    while (c->first_param < m->n_layers && m->layers[c->first_param].param_count == 0) c->first_param++;
    int B = m->max_batch;
    for (int i = 0; i < m->n_layers; i++) {
        const tr_layer *l = &m->layers[i];
        c->kind[i] = l->kind;
        c->in[i] = (int)tr_shape_size(l->in);
        c->out[i] = (int)tr_shape_size(l->out);
        c->off[i] = l->param_off;
        c->cnt[i] = l->param_count;
    }
    CB(cublasCreate(&c->h));
    CB(cublasSetMathMode(c->h, CUBLAS_DEFAULT_MATH));
    CK(cudaMalloc(&c->params, (m->n_params + 1) * sizeof(float)));
    CK(cudaMalloc(&c->grads, (m->n_params + 1) * sizeof(float)));
    for (int i = 0; i <= m->n_layers; i++) {
        size_t n = (size_t)B * (i < m->n_layers ? c->in[i] : c->n_classes);
        CK(cudaMalloc(&c->act[i], n * sizeof(float)));
        CK(cudaMalloc(&c->dact[i], n * sizeof(float)));
    }
    CK(cudaMalloc(&c->y, B * sizeof(int32_t)));
    CK(cudaMalloc(&c->rowloss, B * sizeof(double)));
    CK(cudaMalloc(&c->rowhit, B * sizeof(int)));
    c->h_rowloss = (double *)malloc(B * sizeof(double));
    c->h_rowhit = (int *)malloc(B * sizeof(int));
    if (!c->h_rowloss || !c->h_rowhit) goto fail;
    return c;
fail:
    snprintf(err, el, "CUDA initialisation failed (see log)");
    tr_cuda_free(c);
    return NULL;
}

extern "C" int tr_cuda_step(tr_cuda *c, const float *params, const float *x, const int32_t *y, int B, int scale_B,
                            float *grads, float *logits, double *loss, int *hits)
{
    const float one = 1.0f, zero = 0.0f;
    const unsigned T = 256;
    int L = c->n_layers, C = c->n_classes;
    double sum = 0;
    int h = 0;
    if (B <= 0 || B > c->max_batch) return HF_EINVAL;
    CK(cudaMemcpy(c->params, params, c->n_params * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->act[0], x, (size_t)B * c->in[0] * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->y, y, B * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int i = 0; i < L; i++) {
        float *X = c->act[i], *Y = c->act[i + 1];
        size_t n = (size_t)B * c->in[i];
        switch (c->kind[i]) {
        case TR_DENSE: {
            const float *W = c->params + c->off[i], *b = W + (size_t)c->in[i] * c->out[i];
            CB(cublasSgemm(c->h, CUBLAS_OP_T, CUBLAS_OP_N, c->out[i], B, c->in[i], &one, W, c->in[i], X, c->in[i],
                           &zero, Y, c->out[i]));
            k_bias_add<<<blocks((size_t)B * c->out[i], T), T>>>(Y, b, B, c->out[i]);
            break;
        }
        case TR_RELU: k_relu<<<blocks(n, T), T>>>(X, Y, n); break;
        default: CK(cudaMemcpyAsync(Y, X, n * sizeof(float), cudaMemcpyDeviceToDevice)); break;
        }
        CK(cudaGetLastError());
    }
    k_softmax_xent<<<blocks(B, 64), 64>>>(c->act[L], c->y, B, C, c->dact[L], 1.0f / (float)(scale_B > 0 ? scale_B : B),
                                         c->rowloss, c->rowhit);
    CK(cudaGetLastError());
    for (int i = L - 1; i >= 0; i--) {
        float *X = c->act[i], *Y = c->act[i + 1], *dY = c->dact[i + 1];
        float *dX = i > c->first_param ? c->dact[i] : NULL;
        size_t n = (size_t)B * c->in[i];
        switch (c->kind[i]) {
        case TR_DENSE: {
            const float *W = c->params + c->off[i];
            float *dW = c->grads + c->off[i], *db = dW + (size_t)c->in[i] * c->out[i];
            CB(cublasSgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_T, c->in[i], c->out[i], B, &one, X, c->in[i], dY, c->out[i],
                           &zero, dW, c->in[i]));
            k_bias_grad<<<blocks(c->out[i], T), T>>>(dY, db, B, c->out[i]);
            if (dX)
                CB(cublasSgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_N, c->in[i], B, c->out[i], &one, W, c->in[i], dY,
                               c->out[i], &zero, dX, c->in[i]));
            break;
        }
        case TR_RELU: if (dX) k_relu_back<<<blocks(n, T), T>>>(Y, dY, dX, n); break;
        default: if (dX) CK(cudaMemcpyAsync(dX, dY, n * sizeof(float), cudaMemcpyDeviceToDevice)); break;
        }
        CK(cudaGetLastError());
    }
    CK(cudaMemcpy(grads, c->grads, c->n_params * sizeof(float), cudaMemcpyDeviceToHost));
    if (logits) CK(cudaMemcpy(logits, c->act[L], (size_t)B * C * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->h_rowloss, c->rowloss, B * sizeof(double), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->h_rowhit, c->rowhit, B * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < B; r++) { sum += c->h_rowloss[r]; h += c->h_rowhit[r]; }
    if (loss) *loss = sum / B;
    if (hits) *hits = h;
    return 0;
fail:
    return HF_EIO;
}

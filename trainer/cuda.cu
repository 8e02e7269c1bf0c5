/*
 * cuda.cu — the CUDA backend (device.h): probe, every layer's forward and
 * backward pass, softmax cross-entropy, gradient clipping and the
 * optimizer step on the GPU, with cuBLAS sgemm for dense and conv2d.
 * Compiled only when the Makefile finds nvcc (CUDA=1, HF_HAVE_CUDA).
 *
 * The CPU reference (layer.c, optim.c) is the specification; each kernel
 * here follows its loop, and where it can cheaply do so produces the same
 * bits:
 *   relu, flatten, maxpool (argmax, strict > so ties pick the first),
 *   dropout (the same counter hash tr_hash64 per element, so the mask is
 *   identical), col2im (same summation order), SGD/Adam/AdamW (the same
 *   IEEE operations, _rn intrinsics so nvcc does not fuse them into FMAs;
 *   bias corrections computed on the host with the same powf),
 *   gradient clipping scale.
 *   dense/conv (cuBLAS vs OpenBLAS summation order), batch norm and
 *   bias/BN reductions (double, tree order vs sequential) and softmax
 *   (device exp/log) agree within float rounding, not bit for bit.
 *
 * Layout conventions match the CPU reference: row-major activations
 * (B, C, H, W), dense W (out, in) then b (out), conv W (Co, Ci, k, k) then
 * b (Co) inside the flat parameter array. cuBLAS is column-major, so a
 * row-major (R, C) matrix is used as its column-major transpose (C, R):
 *   dense forward  Y^T (out,B) = W (as op T) x X^T       -> gemm(T, N, out, B, in)
 *   dense dW       dW^T (in,out) = X^T x dY               -> gemm(N, T, in, out, B)
 *   dense dX       dX^T (in,B) = W^T x dY^T               -> gemm(N, N, in, B, out)
 *   conv forward   tmp (Co,N) = W (Co,K) col (K,N)        -> gemm(N, N, N, Co, K)
 *   conv dW        dW (Co,K) = tmp (Co,N) col^T (N,K)     -> gemm(T, N, K, Co, N)
 *   conv dcol      dcol (K,N) = W^T (K,Co) tmp (Co,N)     -> gemm(N, T, N, K, Co)
 * where K = Ci*k*k and N = B*OH*OW (the whole batch lowered at once, as
 * the CPU path does). Math mode is CUBLAS_DEFAULT_MATH and
 * CUBLAS_TF32_TENSOR_OP_MATH is never set, so sgemm is true FP32.
 *
 * State on the device: params, grads, BN buffers, optimizer state, every
 * activation and its gradient, per-layer scratch. The host copies are
 * refreshed only by tr_cuda_store (checkpoints, evaluation).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
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

/* cuBLAS is opened on first use, not linked: loading libcublas and
 * libcublasLt costs about 75 ms of relocations at every start of the
 * trainer, and most trials (every CPU trial, every rung-0 trial of an ASHA
 * sweep on a CPU agent) never call it (docs/trainer.md, "Start-up"). The
 * four entry points used are resolved by dlsym from the soname of the
 * major version the headers describe; the executable's run path (CUDA's
 * lib64) is searched as for a linked library. */
#define HF_STR2(x) #x
#define HF_STR(x) HF_STR2(x)
static struct {
    pthread_once_t once;
    int ok;
    char why[256];
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
} cbl = {PTHREAD_ONCE_INIT, 0, "", NULL, NULL, NULL, NULL};

static void cublas_open(void)
{
    static const char *so = "libcublas.so." HF_STR(CUBLAS_VER_MAJOR);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cbl.why, sizeof cbl.why, "cannot load %s: %s", so, dlerror());
        return;
    }
    *(void **)&cbl.create = dlsym(h, "cublasCreate_v2");
    *(void **)&cbl.destroy = dlsym(h, "cublasDestroy_v2");
    *(void **)&cbl.set_math_mode = dlsym(h, "cublasSetMathMode");
    *(void **)&cbl.sgemm = dlsym(h, "cublasSgemm_v2");
    if (!cbl.create || !cbl.destroy || !cbl.set_math_mode || !cbl.sgemm) {
        snprintf(cbl.why, sizeof cbl.why, "%s lacks cublasCreate_v2/cublasSgemm_v2", so);
        dlclose(h);
        return;
    }
    cbl.ok = 1;   /* h stays open for the process's life */
}

/* RET 0 with the cbl entry points set, or -1 with why. */
static int cublas_ready(char *why, size_t whylen)
{
    pthread_once(&cbl.once, cublas_open);
    if (!cbl.ok) snprintf(why, whylen, "%s", cbl.why);
    return cbl.ok ? 0 : -1;
}

#define NORM_BLOCKS 256

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

static unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

/* ---- counter hash (bit-identical copy of tr_hash64 in layer.c) ------- */

__device__ static uint64_t d_hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ull;
    uint64_t in[3] = {b, c, d};
    for (int i = 0; i < 3; i++) {
        h ^= in[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 27; h *= 0x94D049BB133111EBull;
        h ^= h >> 31;
    }
    return h;
}

/* block-wide double sum; every thread gets the result. blockDim.x <= 256, power of 2 */
__device__ static double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* ---- dense, relu, softmax -------------------------------------------- */

// y (B, n) += b (n)
__global__ void k_bias_add(float *y, const float *b, int B, int n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)B * n) y[i] += b[i % n];
}

// db (n) = sum over rows of dy (B, n)
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

/* one thread per row of z (B, C): loss (double), hit, and d(mean loss)/dz scaled by inv */
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

/* ---- conv2d ----------------------------------------------------------- */

struct conv_geom { int C, H, W, k, pad, OH, OW, Co; };

// x (B, C, H, W) -> col (C*k*k, B*OH*OW): row (c, ki, kj), column (b, oy, ox)
__global__ void k_im2col(const float *x, float *col, conv_geom g, int B)
{
    size_t N = (size_t)B * g.OH * g.OW, K = (size_t)g.C * g.k * g.k;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= K * N) return;
    size_t r = idx / N, n = idx % N;
    int kj = (int)(r % g.k), ki = (int)((r / g.k) % g.k), c = (int)(r / ((size_t)g.k * g.k));
    int ox = (int)(n % g.OW), oy = (int)((n / g.OW) % g.OH), b = (int)(n / ((size_t)g.OW * g.OH));
    int iy = oy + ki - g.pad, ix = ox + kj - g.pad;
    col[idx] = (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) ? x[(((size_t)b * g.C + c) * g.H + iy) * g.W + ix] : 0.0f;
}

// col (C*k*k, B*OH*OW) -> dx (B, C, H, W); one thread per dx element, (ki, kj) in the CPU's order
__global__ void k_col2im(const float *col, float *dx, conv_geom g, int B)
{
    size_t N = (size_t)B * g.OH * g.OW;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * g.C * g.H * g.W) return;
    int ix = (int)(idx % g.W), iy = (int)((idx / g.W) % g.H);
    int c = (int)((idx / ((size_t)g.W * g.H)) % g.C), b = (int)(idx / ((size_t)g.W * g.H * g.C));
    float s = 0.0f;
    for (int ki = 0; ki < g.k; ki++) {
        int oy = iy - ki + g.pad;
        if (oy < 0 || oy >= g.OH) continue;
        for (int kj = 0; kj < g.k; kj++) {
            int ox = ix - kj + g.pad;
            if (ox < 0 || ox >= g.OW) continue;
            s += col[((size_t)(c * g.k + ki) * g.k + kj) * N + (size_t)b * g.OH * g.OW + (size_t)oy * g.OW + ox];
        }
    }
    dx[idx] = s;
}

// tmp (Co, B*OHW) + bias (Co) -> y (B, Co, OH, OW)
__global__ void k_conv_scatter(const float *tmp, const float *bias, float *y, int B, int Co, int OHW)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * Co * OHW) return;
    int i = (int)(idx % OHW), co = (int)((idx / OHW) % Co), b = (int)(idx / ((size_t)OHW * Co));
    y[idx] = tmp[(size_t)co * B * OHW + (size_t)b * OHW + i] + bias[co];
}

// dy (B, Co, OH, OW) -> tmp (Co, B*OHW)
__global__ void k_conv_gather(const float *dy, float *tmp, int B, int Co, int OHW)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * Co * OHW) return;
    int i = (int)(idx % OHW), co = (int)((idx / OHW) % Co), b = (int)(idx / ((size_t)OHW * Co));
    tmp[(size_t)co * B * OHW + (size_t)b * OHW + i] = dy[idx];
}

// db (Co): one block per output channel, summing its row of tmp (Co, N) in double
__global__ void k_row_sum(const float *tmp, float *db, size_t N)
{
    __shared__ double sh[256];
    const float *row = tmp + (size_t)blockIdx.x * N;
    double s = 0;
    for (size_t i = threadIdx.x; i < N; i += blockDim.x) s += row[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) db[blockIdx.x] = (float)s;
}

/* ---- max-pool ---------------------------------------------------------- */

// x (B, C, H, W) -> y (B, C, OH, OW), am (B, C, OH, OW) index into the (H, W) plane
__global__ void k_pool(const float *x, float *y, int32_t *am, int BC, int H, int W, int k, int OH, int OW)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BC * OH * OW) return;
    int ox = (int)(idx % OW), oy = (int)((idx / OW) % OH);
    size_t bc = idx / ((size_t)OW * OH);
    const float *xp = x + bc * H * W;
    int best = (oy * k) * W + ox * k;
    float bv = xp[best];
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            int id = (oy * k + i) * W + ox * k + j;
            if (xp[id] > bv) { bv = xp[id]; best = id; }
        }
    y[idx] = bv;
    am[idx] = best;
}

// dy (B, C, OH, OW) -> dx (B, C, H, W) (zeroed first; windows do not overlap)
__global__ void k_pool_back(const float *dy, const int32_t *am, float *dx, int BC, int HW, int OHW)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BC * OHW) return;
    size_t bc = idx / OHW;
    dx[bc * HW + am[idx]] += dy[idx];
}

/* ---- dropout ----------------------------------------------------------- */

// x (B, per) -> y (B, per), mask (B, per); mask bit = the CPU's
__global__ void k_dropout(const float *x, float *y, uint8_t *mask, int B, size_t per, float pd, float scale,
                          uint64_t seed, uint64_t step, uint64_t index, int64_t row_base)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)B * per) return;
    size_t r = k / per, i = k % per;
    uint64_t rs = d_hash64(seed, step, index, (uint64_t)(row_base + (int64_t)r));
    uint64_t h = d_hash64(rs, i, 0x5D, 0);
    float u = __fmul_rn((float)(h >> 40), 1.0f / 16777216.0f);
    uint8_t keep = u >= pd;
    mask[k] = keep;
    y[k] = keep ? __fmul_rn(x[k], scale) : 0.0f;
}

__global__ void k_dropout_back(const float *dy, const uint8_t *mask, float *dx, size_t n, float scale)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dx[i] = mask[i] ? __fmul_rn(dy[i], scale) : 0.0f;
}

/* ---- batch norm ---------------------------------------------------------- */

// one block per channel. x, y, xhat (B, C, HW); stat = mean (C), istd (C);
// rmean, rvar (C) running statistics (updated when train)
__global__ void k_bn_forward(const float *x, float *y, float *xhat, float *stat, const float *gamma,
                             const float *beta, float *rmean, float *rvar, int B, int C, int HW, int train,
                             float eps, float mom)
{
    __shared__ double sh[256];
    __shared__ float s_mu, s_is;
    int ch = blockIdx.x;
    size_t M = (size_t)B * HW;
    if (train) {
        double s = 0;
        for (size_t j = threadIdx.x; j < M; j += blockDim.x)
            s += x[((size_t)(j / HW) * C + ch) * HW + j % HW];
        double m = block_sum(s, sh) / (double)M;
        double ss = 0;
        for (size_t j = threadIdx.x; j < M; j += blockDim.x) {
            double d = x[((size_t)(j / HW) * C + ch) * HW + j % HW] - m;
            ss += d * d;
        }
        double var = block_sum(ss, sh) / (double)M;
        if (threadIdx.x == 0) {
            float mu = (float)m;
            s_mu = mu;
            s_is = (float)(1.0 / sqrt(var + eps));
            float om = 1 - mom;
            rmean[ch] = __fadd_rn(__fmul_rn(om, rmean[ch]), __fmul_rn(mom, mu));
            rvar[ch] = __fadd_rn(__fmul_rn(om, rvar[ch]),
                                 __fmul_rn(mom, (float)(M > 1 ? var * (double)M / (double)(M - 1) : var)));
        }
    } else if (threadIdx.x == 0) {
        s_mu = rmean[ch];
        s_is = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(rvar[ch], eps)));
    }
    __syncthreads();
    float mu = s_mu, is = s_is, ga = gamma[ch], be = beta[ch];
    if (threadIdx.x == 0) { stat[ch] = mu; stat[C + ch] = is; }
    for (size_t j = threadIdx.x; j < M; j += blockDim.x) {
        size_t o = ((size_t)(j / HW) * C + ch) * HW + j % HW;
        float hh = __fmul_rn(__fsub_rn(x[o], mu), is);
        xhat[o] = hh;
        y[o] = __fadd_rn(__fmul_rn(ga, hh), be);
    }
}

// one block per channel: dgamma, dbeta and (dx != NULL) dx, all (B, C, HW) but the parameter grads (C)
__global__ void k_bn_backward(const float *dy, const float *xhat, const float *stat, const float *gamma,
                              float *dgamma, float *dbeta, float *dx, int B, int C, int HW)
{
    __shared__ double sh[256];
    int ch = blockIdx.x;
    size_t M = (size_t)B * HW;
    double sg = 0, sb = 0;
    for (size_t j = threadIdx.x; j < M; j += blockDim.x) {
        size_t o = ((size_t)(j / HW) * C + ch) * HW + j % HW;
        sg += dy[o] * xhat[o];
        sb += dy[o];
    }
    sg = block_sum(sg, sh);
    sb = block_sum(sb, sh);
    if (threadIdx.x == 0) { dgamma[ch] = (float)sg; dbeta[ch] = (float)sb; }
    if (!dx) return;
    float Mf = (float)M;
    float k = __fdiv_rn(__fmul_rn(gamma[ch], stat[C + ch]), Mf), fg = (float)sg, fb = (float)sb;
    for (size_t j = threadIdx.x; j < M; j += blockDim.x) {
        size_t o = ((size_t)(j / HW) * C + ch) * HW + j % HW;
        dx[o] = __fmul_rn(k, __fsub_rn(__fsub_rn(__fmul_rn(Mf, dy[o]), fb), __fmul_rn(xhat[o], fg)));
    }
}

/* ---- optimizer, clipping ------------------------------------------------- */

__global__ void k_sgd(float *p, const float *g, size_t n, float lr, float wd)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = __fsub_rn(p[i], __fmul_rn(lr, __fadd_rn(g[i], __fmul_rn(wd, p[i]))));
}

__global__ void k_sgd_momentum(float *p, const float *g, float *v, size_t n, float lr, float wd, float mu,
                               int first, int nesterov)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
    float vi = first ? gi : __fadd_rn(__fmul_rn(mu, v[i]), gi);
    v[i] = vi;
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, nesterov ? __fadd_rn(gi, __fmul_rn(mu, vi)) : vi));
}

__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float dec, float l2, float b1,
                       float b2, float c1, float c2, float step, float rbc2, float eps)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float pi = __fsub_rn(p[i], __fmul_rn(dec, p[i]));
    float gi = __fadd_rn(g[i], __fmul_rn(l2, p[i]));
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(c2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step, mi), __fadd_rn(__fmul_rn(__fsqrt_rn(vi), rbc2), eps)));
}

// part (gridDim.x): per-block sums of g^2 in double
__global__ void k_sumsq(const float *g, size_t n, double *part)
{
    __shared__ double sh[256];
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_sum_parts(double *part, int np)
{
    __shared__ double sh[256];
    double s = 0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) s += part[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[np] = s;
}

__global__ void k_scale(float *g, size_t n, float k)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = __fmul_rn(g[i], k);
}

/* ---- lifetime ------------------------------------------------------------ */

extern "C" void tr_cuda_free(tr_cuda *c)
{
    if (!c) return;
    if (c->h) cbl.destroy(c->h);
    cudaFree(c->params);
    cudaFree(c->grads);
    cudaFree(c->bufs);
    for (int i = 0; i <= TR_MAX_LAYERS; i++) { cudaFree(c->act[i]); cudaFree(c->dact[i]); }
    for (int i = 0; i < TR_MAX_LAYERS; i++) {
        cudaFree(c->col[i]);
        cudaFree(c->argmax[i]);
        cudaFree(c->mask[i]);
        cudaFree(c->xhat[i]);
    }
    cudaFree(c->y);
    cudaFree(c->rowloss);
    cudaFree(c->rowhit);
    cudaFree(c->ostate);
    cudaFree(c->norm_part);
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
    tr_cuda *c = (tr_cuda *)calloc(1, sizeof *c);
    if (!c) { snprintf(err, el, "out of memory"); return NULL; }
    c->n_layers = m->n_layers;
    c->max_batch = m->max_batch;
    c->n_classes = m->n_classes;
    c->n_params = m->n_params;
    c->n_bufs = m->n_bufs;
    c->first_param = 0;
    while (c->first_param < m->n_layers && m->layers[c->first_param].param_count == 0) c->first_param++;
    int B = m->max_batch;
    if (cublas_ready(why, sizeof why)) {
        snprintf(err, el, "no cuBLAS: %s", why);
        free(c);
        return NULL;
    }
    CB(cbl.create(&c->h));
    CB(cbl.set_math_mode(c->h, CUBLAS_DEFAULT_MATH));   /* FP32; TF32 tensor ops stay off */
    CK(cudaMalloc(&c->params, (m->n_params + 1) * sizeof(float)));
    CK(cudaMalloc(&c->grads, (m->n_params + 1) * sizeof(float)));
    CK(cudaMalloc(&c->bufs, (m->n_bufs + 1) * sizeof(float)));
    CK(cudaMemset(c->grads, 0, (m->n_params + 1) * sizeof(float)));
    for (int i = 0; i <= m->n_layers; i++) {
        tr_shape s = i < m->n_layers ? m->layers[i].in : m->layers[m->n_layers - 1].out;
        size_t n = (size_t)B * tr_shape_size(s);
        CK(cudaMalloc(&c->act[i], n * sizeof(float)));
        CK(cudaMalloc(&c->dact[i], n * sizeof(float)));
    }
    for (int i = 0; i < m->n_layers; i++) {
        const tr_layer *l = &m->layers[i];
        c->lay[i] = *l;
        c->lay[i].col = NULL; c->lay[i].argmax = NULL; c->lay[i].xhat = NULL; c->lay[i].stat = NULL;
        c->lay[i].mask = NULL;
        size_t nin = (size_t)B * tr_shape_size(l->in), nout = (size_t)B * tr_shape_size(l->out);
        switch (l->kind) {
        case TR_CONV2D: {
            size_t K = (size_t)l->in.c * l->spec.k * l->spec.k, N = (size_t)B * l->out.h * l->out.w;
            CK(cudaMalloc(&c->col[i], (K * N + (size_t)l->out.c * N) * sizeof(float)));
            break;
        }
        case TR_MAXPOOL: CK(cudaMalloc(&c->argmax[i], nout * sizeof(int32_t))); break;
        case TR_DROPOUT: CK(cudaMalloc(&c->mask[i], nin)); break;
        case TR_BATCHNORM: CK(cudaMalloc(&c->xhat[i], (nin + 2 * (size_t)l->in.c) * sizeof(float))); break;
        case TR_DENSE: case TR_RELU: case TR_FLATTEN: break;
        default:
            snprintf(err, el, "the CUDA backend has no kernel for layer %d (%s)", i, tr_layer_name(l->kind));
            tr_cuda_free(c);
            return NULL;
        }
    }
    CK(cudaMalloc(&c->y, B * sizeof(int32_t)));
    CK(cudaMalloc(&c->rowloss, B * sizeof(double)));
    CK(cudaMalloc(&c->rowhit, B * sizeof(int)));
    CK(cudaMalloc(&c->norm_part, (NORM_BLOCKS + 1) * sizeof(double)));
    c->h_rowloss = (double *)malloc(B * sizeof(double));
    c->h_rowhit = (int *)malloc(B * sizeof(int));
    if (!c->h_rowloss || !c->h_rowhit) goto fail;
    if (tr_cuda_load(c, m->params, m->bufs, NULL)) goto fail;
    return c;
fail:
    snprintf(err, el, "CUDA initialisation failed (see log)");
    tr_cuda_free(c);
    return NULL;
}

/* ---- host <-> device ------------------------------------------------------ */

static int ensure_ostate(tr_cuda *c, size_t n)
{
    if (c->n_ostate == n) return 0;
    cudaFree(c->ostate);
    c->ostate = NULL;
    c->n_ostate = 0;
    if (!n) return 0;
    CK(cudaMalloc(&c->ostate, n * sizeof(float)));
    CK(cudaMemset(c->ostate, 0, n * sizeof(float)));
    c->n_ostate = n;
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_load(tr_cuda *c, const float *params, const float *bufs, const tr_optim *o)
{
    if (params) CK(cudaMemcpy(c->params, params, c->n_params * sizeof(float), cudaMemcpyHostToDevice));
    if (bufs && c->n_bufs) CK(cudaMemcpy(c->bufs, bufs, c->n_bufs * sizeof(float), cudaMemcpyHostToDevice));
    if (o) {
        if (o->n != c->n_params) { hf_error("cuda: optimizer over %zu, model %zu params", o->n, c->n_params); return HF_EINVAL; }
        if (ensure_ostate(c, o->n_state)) return HF_EIO;
        if (o->n_state) CK(cudaMemcpy(c->ostate, o->state, o->n_state * sizeof(float), cudaMemcpyHostToDevice));
    }
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_store(tr_cuda *c, float *params, float *bufs, tr_optim *o)
{
    if (params) CK(cudaMemcpy(params, c->params, c->n_params * sizeof(float), cudaMemcpyDeviceToHost));
    if (bufs && c->n_bufs) CK(cudaMemcpy(bufs, c->bufs, c->n_bufs * sizeof(float), cudaMemcpyDeviceToHost));
    if (o && o->n_state) {
        if (c->n_ostate != o->n_state) { hf_error("cuda: no optimizer state on the device to store"); return HF_EINVAL; }
        CK(cudaMemcpy(o->state, c->ostate, o->n_state * sizeof(float), cudaMemcpyDeviceToHost));
    }
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_get(tr_cuda *c, float *grads, float *logits, int B)
{
    if (grads) CK(cudaMemcpy(grads, c->grads, c->n_params * sizeof(float), cudaMemcpyDeviceToHost));
    if (logits)
        CK(cudaMemcpy(logits, c->act[c->n_layers], (size_t)B * c->n_classes * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_set_grads(tr_cuda *c, const float *grads)
{
    CK(cudaMemcpy(c->grads, grads, c->n_params * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
fail:
    return HF_EIO;
}

/* ---- layers ---------------------------------------------------------------- */

static conv_geom geom(const tr_layer *l)
{
    conv_geom g = {l->in.c, l->in.h, l->in.w, l->spec.k, l->spec.pad, l->out.h, l->out.w, l->spec.out};
    return g;
}

/* layer i forward on act[i] -> act[i+1] (B rows) */
static int layer_forward(tr_cuda *c, int i, const tr_layer_ctx *ctx, int B)
{
    const float one = 1.0f, zero = 0.0f;
    const unsigned T = 256;
    const tr_layer *l = &c->lay[i];
    float *X = c->act[i], *Y = c->act[i + 1];
    float *P = c->params + l->param_off;
    size_t per = tr_shape_size(l->in), n = (size_t)B * per, nout = (size_t)B * tr_shape_size(l->out);
    switch (l->kind) {
    case TR_DENSE: {
        int in = (int)per, out = l->spec.out;
        const float *b = P + (size_t)in * out;
        CB(cbl.sgemm(c->h, CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, &one, P, in, X, in, &zero, Y, out));
        k_bias_add<<<blocks(nout, T), T>>>(Y, b, B, out);
        break;
    }
    case TR_CONV2D: {
        conv_geom g = geom(l);
        int K = g.C * g.k * g.k, OHW = g.OH * g.OW;
        int N = B * OHW;
        float *col = c->col[i], *tmp = col + (size_t)K * N;
        k_im2col<<<blocks((size_t)K * N, T), T>>>(X, col, g, B);
        CB(cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_N, N, g.Co, K, &one, col, N, P, K, &zero, tmp, N));
        k_conv_scatter<<<blocks(nout, T), T>>>(tmp, P + (size_t)g.Co * K, Y, B, g.Co, OHW);
        break;
    }
    case TR_MAXPOOL:
        k_pool<<<blocks(nout, T), T>>>(X, Y, c->argmax[i], B * l->in.c, l->in.h, l->in.w, l->spec.k, l->out.h,
                                        l->out.w);
        break;
    case TR_RELU: k_relu<<<blocks(n, T), T>>>(X, Y, n); break;
    case TR_DROPOUT:
        if (!ctx->train || l->spec.p <= 0.0f) {
            CK(cudaMemcpyAsync(Y, X, n * sizeof(float), cudaMemcpyDeviceToDevice));
            break;
        }
        k_dropout<<<blocks(n, T), T>>>(X, Y, c->mask[i], B, per, l->spec.p, 1.0f / (1.0f - l->spec.p), ctx->seed,
                                        (uint64_t)ctx->step, (uint64_t)i, ctx->row_base);
        break;
    case TR_BATCHNORM: {
        int C = l->in.c, HW = l->in.h * l->in.w;
        float eps = ctx->bn_eps > 0 ? ctx->bn_eps : 1e-5f, mom = ctx->bn_momentum > 0 ? ctx->bn_momentum : 0.1f;
        float *bf = c->bufs + l->buf_off;
        k_bn_forward<<<C, T>>>(X, Y, c->xhat[i], c->xhat[i] + n, P, P + C, bf, bf + C, B, C, HW, ctx->train, eps,
                               mom);
        break;
    }
    default: CK(cudaMemcpyAsync(Y, X, n * sizeof(float), cudaMemcpyDeviceToDevice)); break;
    }
    CK(cudaGetLastError());
    return 0;
fail:
    return HF_EIO;
}

/* layer i backward from dact[i+1]: its grads, and dact[i] when want_dx */
static int layer_backward(tr_cuda *c, int i, const tr_layer_ctx *ctx, int B, int want_dx)
{
    const float one = 1.0f, zero = 0.0f;
    const unsigned T = 256;
    const tr_layer *l = &c->lay[i];
    float *X = c->act[i], *Y = c->act[i + 1], *dY = c->dact[i + 1];
    float *dX = want_dx ? c->dact[i] : NULL;
    float *P = c->params + l->param_off, *G = c->grads + l->param_off;
    size_t per = tr_shape_size(l->in), n = (size_t)B * per, nout = (size_t)B * tr_shape_size(l->out);
    switch (l->kind) {
    case TR_DENSE: {
        int in = (int)per, out = l->spec.out;
        float *db = G + (size_t)in * out;
        CB(cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, &one, X, in, dY, out, &zero, G, in));
        k_bias_grad<<<blocks(out, T), T>>>(dY, db, B, out);
        if (dX) CB(cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, &one, P, in, dY, out, &zero, dX, in));
        break;
    }
    case TR_CONV2D: {
        conv_geom g = geom(l);
        int K = g.C * g.k * g.k, OHW = g.OH * g.OW;
        int N = B * OHW;
        float *col = c->col[i], *tmp = col + (size_t)K * N;
        k_conv_gather<<<blocks(nout, T), T>>>(dY, tmp, B, g.Co, OHW);
        k_row_sum<<<g.Co, T>>>(tmp, G + (size_t)g.Co * K, (size_t)N);
        CB(cbl.sgemm(c->h, CUBLAS_OP_T, CUBLAS_OP_N, K, g.Co, N, &one, col, N, tmp, N, &zero, G, K));
        if (dX) {
            CB(cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_T, N, K, g.Co, &one, tmp, N, P, K, &zero, col, N));
            k_col2im<<<blocks(n, T), T>>>(col, dX, g, B);
        }
        break;
    }
    case TR_MAXPOOL:
        if (!dX) break;
        CK(cudaMemsetAsync(dX, 0, n * sizeof(float)));
        k_pool_back<<<blocks(nout, T), T>>>(dY, c->argmax[i], dX, B * l->in.c, l->in.h * l->in.w,
                                             l->out.h * l->out.w);
        break;
    case TR_RELU: if (dX) k_relu_back<<<blocks(n, T), T>>>(Y, dY, dX, n); break;
    case TR_DROPOUT:
        if (!dX) break;
        if (!ctx->train || l->spec.p <= 0.0f) CK(cudaMemcpyAsync(dX, dY, n * sizeof(float), cudaMemcpyDeviceToDevice));
        else k_dropout_back<<<blocks(n, T), T>>>(dY, c->mask[i], dX, n, 1.0f / (1.0f - l->spec.p));
        break;
    case TR_BATCHNORM: {
        int C = l->in.c, HW = l->in.h * l->in.w;
        k_bn_backward<<<C, T>>>(dY, c->xhat[i], c->xhat[i] + n, P, G, G + C, dX, B, C, HW);
        break;
    }
    default: if (dX) CK(cudaMemcpyAsync(dX, dY, n * sizeof(float), cudaMemcpyDeviceToDevice)); break;
    }
    CK(cudaGetLastError());
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_layer(tr_cuda *c, int i, const tr_layer_ctx *ctx, int B, const float *x, float *y,
                             const float *dy, float *dx, float *grads)
{
    if (i < 0 || i >= c->n_layers || B <= 0 || B > c->max_batch) return HF_EINVAL;
    const tr_layer *l = &c->lay[i];
    size_t nin = (size_t)B * tr_shape_size(l->in), nout = (size_t)B * tr_shape_size(l->out);
    CK(cudaMemcpy(c->act[i], x, nin * sizeof(float), cudaMemcpyHostToDevice));
    if (layer_forward(c, i, ctx, B)) return HF_EIO;
    if (y) CK(cudaMemcpy(y, c->act[i + 1], nout * sizeof(float), cudaMemcpyDeviceToHost));
    if (!dy) return 0;
    CK(cudaMemcpy(c->dact[i + 1], dy, nout * sizeof(float), cudaMemcpyHostToDevice));
    if (layer_backward(c, i, ctx, B, dx != NULL)) return HF_EIO;
    if (dx) CK(cudaMemcpy(dx, c->dact[i], nin * sizeof(float), cudaMemcpyDeviceToHost));
    if (grads && l->param_count)
        CK(cudaMemcpy(grads, c->grads + l->param_off, l->param_count * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
fail:
    return HF_EIO;
}

/* Upload x (B, in) and y (B), run the forward pass under ctx and the
 * softmax cross-entropy (dlogits scaled by inv into dact[L]). */
static int forward_xent(tr_cuda *c, const tr_layer_ctx *ctx, const float *x, const int32_t *y, int B, float inv)
{
    int L = c->n_layers;
    CK(cudaMemcpy(c->act[0], x, (size_t)B * tr_shape_size(c->lay[0].in) * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->y, y, B * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int i = 0; i < L; i++)
        if (layer_forward(c, i, ctx, B)) return HF_EIO;
    k_softmax_xent<<<blocks(B, 64), 64>>>(c->act[L], c->y, B, c->n_classes, c->dact[L], inv, c->rowloss, c->rowhit);
    CK(cudaGetLastError());
    return 0;
fail:
    return HF_EIO;
}

/* The batch's mean loss and correct rows from the per-row results. */
static int row_sums(tr_cuda *c, int B, double *loss, int *hits)
{
    double sum = 0;
    int h = 0;
    CK(cudaMemcpy(c->h_rowloss, c->rowloss, B * sizeof(double), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->h_rowhit, c->rowhit, B * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < B; r++) { sum += c->h_rowloss[r]; h += c->h_rowhit[r]; }
    if (loss) *loss = sum / B;
    if (hits) *hits = h;
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_forward_backward(tr_cuda *c, const tr_layer_ctx *ctx, const float *x, const int32_t *y,
                                        int B, int scale_B, double *loss, int *hits)
{
    tr_layer_ctx train;
    memset(&train, 0, sizeof train);
    train.train = 1;
    if (!ctx) ctx = &train;
    if (B <= 0 || B > c->max_batch) return HF_EINVAL;
    if (forward_xent(c, ctx, x, y, B, 1.0f / (float)(scale_B > 0 ? scale_B : B))) return HF_EIO;
    for (int i = c->n_layers - 1; i >= 0; i--)
        if (layer_backward(c, i, ctx, B, i > c->first_param)) return HF_EIO;
    return row_sums(c, B, loss, hits);
}

extern "C" int tr_cuda_infer(tr_cuda *c, const float *x, const int32_t *y, int B, double *loss, int *hits)
{
    tr_layer_ctx eval;
    memset(&eval, 0, sizeof eval);   /* train = 0: no dropout, BN running statistics (tr_model_infer) */
    if (B <= 0 || B > c->max_batch) return HF_EINVAL;
    /* dact[L] is scratch here: the next training step overwrites it */
    if (forward_xent(c, &eval, x, y, B, 1.0f / (float)B)) return HF_EIO;
    return row_sums(c, B, loss, hits);
}

extern "C" int tr_cuda_step(tr_cuda *c, const float *params, const float *x, const int32_t *y, int B, int scale_B,
                            float *grads, float *logits, double *loss, int *hits)
{
    if (params && tr_cuda_load(c, params, NULL, NULL)) return HF_EIO;
    int rc = tr_cuda_forward_backward(c, NULL, x, y, B, scale_B, loss, hits);
    if (rc) return rc;
    return tr_cuda_get(c, grads, logits, B);
}

/* ---- clipping, optimizer ------------------------------------------------------- */

extern "C" int tr_cuda_clip(tr_cuda *c, double max_norm, double *norm_out)
{
    const unsigned T = 256;
    double norm2 = 0;
    k_sumsq<<<NORM_BLOCKS, T>>>(c->grads, c->n_params, c->norm_part);
    k_sum_parts<<<1, T>>>(c->norm_part, NORM_BLOCKS);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&norm2, c->norm_part + NORM_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost));
    {
        double norm = sqrt(norm2);
        if (norm_out) *norm_out = norm;
        if (max_norm > 0 && norm > max_norm) {
            float k = (float)(max_norm / (norm + 1e-6));
            k_scale<<<blocks(c->n_params, T), T>>>(c->grads, c->n_params, k);
            CK(cudaGetLastError());
        }
    }
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_optim_step(tr_cuda *c, tr_optim *o, float lr)
{
    const unsigned T = 256;
    size_t n = c->n_params;
    if (o->n != n) return HF_EINVAL;
    if (c->n_ostate != o->n_state && tr_cuda_load(c, NULL, NULL, o)) return HF_EIO;
    float wd = o->weight_decay;
    o->t++;
    if (o->kind == TR_OPT_SGD) {
        if (!o->n_state) k_sgd<<<blocks(n, T), T>>>(c->params, c->grads, n, lr, wd);
        else
            k_sgd_momentum<<<blocks(n, T), T>>>(c->params, c->grads, c->ostate, n, lr, wd, o->momentum, o->t == 1,
                                                 o->nesterov);
    } else {
        /* the scalars exactly as optim.c computes them (host powf) */
        float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
        float bc1 = 1.0f - powf(b1, (float)o->t), bc2 = 1.0f - powf(b2, (float)o->t);
        float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2);
        float dec = o->kind == TR_OPT_ADAMW ? lr * wd : 0.0f, l2 = o->kind == TR_OPT_ADAMW ? 0.0f : wd;
        k_adam<<<blocks(n, T), T>>>(c->params, c->grads, c->ostate, c->ostate + n, n, dec, l2, b1, b2, 1.0f - b1,
                                     1.0f - b2, step, rbc2, eps);
    }
    CK(cudaGetLastError());
    return 0;
fail:
    return HF_EIO;
}

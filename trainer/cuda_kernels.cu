/*
 * cuda_kernels.cu — the CUDA backend's kernels: every layer's forward and
 * backward pass, softmax cross-entropy, the optimizers and the gradient
 * norm (declared in cuda_int.h, launched by cuda.cu). Compiled only with
 * CUDA (HF_HAVE_CUDA).
 *
 * The CPU reference (layer.c, optim.c) is the specification; each kernel
 * follows its loop and, where it can cheaply do so, produces the same
 * bits:
 *   relu, flatten, maxpool (argmax, strict > so ties pick the first),
 *   dropout (the counter hash of dropout_hash.h, which layer.c compiles
 *   too, so the mask is identical), col2im (same summation order),
 *   SGD/Adam/AdamW (the same IEEE operations, _rn intrinsics so nvcc does
 *   not fuse them into FMAs; bias corrections computed on the host with
 *   the same powf), gradient clipping scale.
 *   Batch norm and bias/BN reductions (double, tree order vs sequential)
 *   and softmax (device exp/log) agree within float rounding, not bit for
 *   bit; so do dense and conv, whose sgemm is cuBLAS's (cuda.cu).
 */
#include "trainer/cuda_int.h"

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
                          uint64_t seed, int64_t step, int index, int64_t row_base)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)B * per) return;
    size_t r = k / per, i = k % per;
    uint64_t rs = tr_dropout_row_seed(seed, step, index, row_base + (int64_t)r);
    uint8_t keep = (uint8_t)tr_dropout_keep(rs, i, pd);
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

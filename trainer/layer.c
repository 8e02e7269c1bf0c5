/*
 * layer.c — CPU reference kernels for every layer (see layer.h).
 *
 * Dense and conv2d go through OpenBLAS sgemm; the rest are plain loops.
 * Conv2d lowers the whole batch at once (im2col into a (Cin*k*k, B*OH*OW)
 * matrix) so each forward/backward is one large GEMM rather than B small
 * ones; the GEMM result is (Cout, B*OH*OW) and is scattered to NCHW.
 */
#include "layer.h"

#include "hf_err.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

uint64_t tr_hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return tr_hash64_inline(a, b, c, d);
}

const char *tr_layer_name(tr_layer_kind k)
{
    static const char *names[] = {"dense", "conv2d", "maxpool", "relu", "dropout", "batchnorm", "flatten"};
    return (unsigned)k < TR_LAYER_KIND_COUNT ? names[k] : "?";
}

int tr_layer_setup(tr_layer *l, const tr_layer_spec *s, tr_shape in)
{
    memset(l, 0, sizeof *l);
    l->kind = s->kind;
    l->spec = *s;
    l->in = in;
    l->out = in;
    if (in.c <= 0 || in.h <= 0 || in.w <= 0) return HF_EINVAL;
    switch (s->kind) {
    case TR_DENSE:
        if (s->out <= 0) return HF_EINVAL;
        l->out = (tr_shape){s->out, 1, 1};
        l->param_count = tr_shape_size(in) * (size_t)s->out + (size_t)s->out;
        break;
    case TR_CONV2D: {
        if (s->out <= 0 || s->k <= 0 || s->pad < 0) return HF_EINVAL;
        int oh = in.h + 2 * s->pad - s->k + 1, ow = in.w + 2 * s->pad - s->k + 1;
        if (oh <= 0 || ow <= 0) return HF_EINVAL;
        l->out = (tr_shape){s->out, oh, ow};
        l->param_count = (size_t)s->out * in.c * s->k * s->k + (size_t)s->out;
        break;
    }
    case TR_MAXPOOL:
        if (s->k <= 0 || in.h < s->k || in.w < s->k) return HF_EINVAL;
        l->out = (tr_shape){in.c, in.h / s->k, in.w / s->k};
        break;
    case TR_RELU: break;
    case TR_DROPOUT:
        if (!(s->p >= 0.0f && s->p < 1.0f)) return HF_EINVAL;
        break;
    case TR_BATCHNORM:
        l->param_count = 2 * (size_t)in.c;
        l->buf_count = 2 * (size_t)in.c;
        break;
    case TR_FLATTEN:
        l->out = (tr_shape){(int)tr_shape_size(in), 1, 1};
        break;
    default: return HF_EINVAL;
    }
    return 0;
}

/* Scratch, in floats (int32 and uint8 scratch rounded up to floats). */
size_t tr_layer_scratch_floats(const tr_layer *l, int B)
{
    size_t ohw = (size_t)l->out.h * l->out.w;
    switch (l->kind) {
    case TR_CONV2D:
        return (size_t)l->in.c * l->spec.k * l->spec.k * B * ohw + (size_t)l->out.c * B * ohw;
    case TR_MAXPOOL: return tr_shape_size(l->out) * B;   /* int32 argmax */
    case TR_DROPOUT: return (tr_shape_size(l->in) * B + 3) / 4;
    case TR_BATCHNORM: return tr_shape_size(l->in) * B + 2 * (size_t)l->in.c;
    default: return 0;
    }
}

void tr_layer_init(const tr_layer *l, float *p, float *bufs, uint64_t seed)
{
    size_t fan_in = 0, nw = 0;
    if (l->kind == TR_DENSE) { fan_in = tr_shape_size(l->in); nw = fan_in * l->spec.out; }
    if (l->kind == TR_CONV2D) { fan_in = (size_t)l->in.c * l->spec.k * l->spec.k; nw = fan_in * l->spec.out; }
    if (nw) {
        float bound = sqrtf(6.0f / (float)fan_in);
        for (size_t i = 0; i < nw; i++)
            p[i] = (2.0f * tr_hash_unit(tr_hash64(seed, 0x11, l->param_off, i)) - 1.0f) * bound;
        memset(p + nw, 0, (l->param_count - nw) * sizeof(float));
    }
    if (l->kind == TR_BATCHNORM) {
        int C = l->in.c;
        for (int i = 0; i < C; i++) { p[i] = 1.0f; p[C + i] = 0.0f; bufs[i] = 0.0f; bufs[C + i] = 1.0f; }
    }
}

/* ---- dense ---------------------------------------------------------- */

static void dense_forward(const tr_layer *l, const float *p, const float *x, float *y, int B)
{
    int in = (int)tr_shape_size(l->in), out = l->spec.out;
    const float *W = p, *b = p + (size_t)in * out;
    for (int r = 0; r < B; r++) memcpy(y + (size_t)r * out, b, out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
}

static void dense_backward(const tr_layer *l, const float *p, const float *x, const float *dy, float *dx,
                           float *g, int B)
{
    int in = (int)tr_shape_size(l->in), out = l->spec.out;
    float *dW = g, *db = g + (size_t)in * out;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, dy, out, x, in, 0.0f, dW, in);
    memset(db, 0, out * sizeof(float));
    for (int r = 0; r < B; r++) {
        const float *d = dy + (size_t)r * out;
        for (int j = 0; j < out; j++) db[j] += d[j];
    }
    if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, dy, out, p, in, 0.0f, dx, in);
}

/* ---- conv2d ---------------------------------------------------------- */

/* col (C*k*k, B*OH*OW): row (c, ki, kj), column (b, oy, ox). */
static void im2col(const tr_layer *l, const float *x, float *col, int B)
{
    int C = l->in.c, H = l->in.h, W = l->in.w, k = l->spec.k, pad = l->spec.pad;
    int OH = l->out.h, OW = l->out.w;
    size_t ncol = (size_t)B * OH * OW;
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                float *row = col + ((size_t)(c * k + ki) * k + kj) * ncol;
                for (int b = 0; b < B; b++) {
                    const float *xp = x + ((size_t)b * C + c) * H * W;
                    float *rp = row + (size_t)b * OH * OW;
                    for (int oy = 0; oy < OH; oy++) {
                        int iy = oy + ki - pad;
                        float *o = rp + oy * OW;
                        if (iy < 0 || iy >= H) { memset(o, 0, OW * sizeof(float)); continue; }
                        const float *xr = xp + (size_t)iy * W;
                        for (int ox = 0; ox < OW; ox++) {
                            int ix = ox + kj - pad;
                            o[ox] = (ix >= 0 && ix < W) ? xr[ix] : 0.0f;
                        }
                    }
                }
            }
}

static void col2im(const tr_layer *l, const float *col, float *dx, int B)
{
    int C = l->in.c, H = l->in.h, W = l->in.w, k = l->spec.k, pad = l->spec.pad;
    int OH = l->out.h, OW = l->out.w;
    size_t ncol = (size_t)B * OH * OW;
    memset(dx, 0, (size_t)B * C * H * W * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
                const float *row = col + ((size_t)(c * k + ki) * k + kj) * ncol;
                for (int b = 0; b < B; b++) {
                    float *xp = dx + ((size_t)b * C + c) * H * W;
                    const float *rp = row + (size_t)b * OH * OW;
                    for (int oy = 0; oy < OH; oy++) {
                        int iy = oy + ki - pad;
                        if (iy < 0 || iy >= H) continue;
                        float *xr = xp + (size_t)iy * W;
                        const float *o = rp + oy * OW;
                        for (int ox = 0; ox < OW; ox++) {
                            int ix = ox + kj - pad;
                            if (ix >= 0 && ix < W) xr[ix] += o[ox];
                        }
                    }
                }
            }
}

static void conv_forward(tr_layer *l, const float *p, const float *x, float *y, int B)
{
    int Co = l->spec.out, K = l->in.c * l->spec.k * l->spec.k;
    int OHW = l->out.h * l->out.w;
    size_t N = (size_t)B * OHW;
    float *col = l->col, *tmp = l->col + (size_t)K * N;
    const float *Wt = p, *bias = p + (size_t)Co * K;
    im2col(l, x, col, B);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Co, (int)N, K, 1.0f, Wt, K, col, (int)N, 0.0f, tmp,
                (int)N);
    for (int co = 0; co < Co; co++)
        for (int b = 0; b < B; b++) {
            const float *s = tmp + (size_t)co * N + (size_t)b * OHW;
            float *d = y + ((size_t)b * Co + co) * OHW, bv = bias[co];
            for (int i = 0; i < OHW; i++) d[i] = s[i] + bv;
        }
}

static void conv_backward(tr_layer *l, const float *p, const float *dy, float *dx, float *g, int B)
{
    int Co = l->spec.out, K = l->in.c * l->spec.k * l->spec.k;
    int OHW = l->out.h * l->out.w;
    size_t N = (size_t)B * OHW;
    float *col = l->col, *tmp = l->col + (size_t)K * N;
    float *dW = g, *db = g + (size_t)Co * K;
    for (int co = 0; co < Co; co++) {
        double acc = 0;
        for (int b = 0; b < B; b++) {
            const float *s = dy + ((size_t)b * Co + co) * OHW;
            float *d = tmp + (size_t)co * N + (size_t)b * OHW;
            float part = 0;
            for (int i = 0; i < OHW; i++) { d[i] = s[i]; part += s[i]; }
            acc += part;
        }
        db[co] = (float)acc;
    }
    /* dW (Co, K) = dY (Co, N) x col^T (N, K); col still holds the forward's im2col. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Co, K, (int)N, 1.0f, tmp, (int)N, col, (int)N, 0.0f, dW,
                K);
    if (dx) {
        /* dcol (K, N) = W^T (K, Co) x dY (Co, N), written over col (no longer needed). */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, (int)N, Co, 1.0f, p, K, tmp, (int)N, 0.0f, col,
                    (int)N);
        col2im(l, col, dx, B);
    }
}

/* ---- max-pool --------------------------------------------------------- */

static void pool_forward(tr_layer *l, const float *x, float *y, int B)
{
    int C = l->in.c, H = l->in.h, W = l->in.w, k = l->spec.k, OH = l->out.h, OW = l->out.w;
    int32_t *am = (int32_t *)l->col;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const float *xp = x + ((size_t)b * C + c) * H * W;
            size_t ob = ((size_t)b * C + c) * OH * OW;
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    int best = (oy * k) * W + ox * k;
                    float bv = xp[best];
                    for (int i = 0; i < k; i++)
                        for (int j = 0; j < k; j++) {
                            int idx = (oy * k + i) * W + ox * k + j;
                            if (xp[idx] > bv) { bv = xp[idx]; best = idx; }
                        }
                    y[ob + oy * OW + ox] = bv;
                    am[ob + oy * OW + ox] = best;
                }
        }
}

static void pool_backward(tr_layer *l, const float *dy, float *dx, int B)
{
    int C = l->in.c, HW = l->in.h * l->in.w, OHW = l->out.h * l->out.w;
    const int32_t *am = (const int32_t *)l->col;
    memset(dx, 0, (size_t)B * C * HW * sizeof(float));
    for (size_t bc = 0; bc < (size_t)B * C; bc++)
        for (int i = 0; i < OHW; i++) dx[bc * HW + am[bc * OHW + i]] += dy[bc * OHW + i];
}

/* ---- batch norm ------------------------------------------------------- */

static void bn_forward(tr_layer *l, const tr_layer_ctx *c, const float *p, float *bufs, const float *x, float *y,
                       int B)
{
    int C = l->in.c, HW = l->in.h * l->in.w;
    const float *gamma = p, *beta = p + C;
    float *rmean = bufs, *rvar = bufs + C;
    float *xhat = l->col, *mean = l->col + (size_t)B * C * HW, *istd = mean + C;
    float eps = c->bn_eps > 0 ? c->bn_eps : 1e-5f, mom = c->bn_momentum > 0 ? c->bn_momentum : 0.1f;
    double M = (double)B * HW;
    for (int ch = 0; ch < C; ch++) {
        float mu, is;
        if (c->train) {
            double s = 0, ss = 0;
            for (int b = 0; b < B; b++) {
                const float *xp = x + ((size_t)b * C + ch) * HW;
                for (int i = 0; i < HW; i++) s += xp[i];
            }
            double m = s / M;
            for (int b = 0; b < B; b++) {
                const float *xp = x + ((size_t)b * C + ch) * HW;
                for (int i = 0; i < HW; i++) { double d = xp[i] - m; ss += d * d; }
            }
            double var = ss / M;
            mu = (float)m;
            is = (float)(1.0 / sqrt(var + eps));
            rmean[ch] = (1 - mom) * rmean[ch] + mom * mu;
            rvar[ch] = (1 - mom) * rvar[ch] + mom * (float)(M > 1 ? var * M / (M - 1) : var);
        } else {
            mu = rmean[ch];
            is = 1.0f / sqrtf(rvar[ch] + eps);
        }
        mean[ch] = mu;
        istd[ch] = is;
        for (int b = 0; b < B; b++) {
            size_t o = ((size_t)b * C + ch) * HW;
            for (int i = 0; i < HW; i++) {
                float h = (x[o + i] - mu) * is;
                xhat[o + i] = h;
                y[o + i] = gamma[ch] * h + beta[ch];
            }
        }
    }
}

static void bn_backward(tr_layer *l, const float *p, const float *dy, float *dx, float *g, int B)
{
    int C = l->in.c, HW = l->in.h * l->in.w;
    const float *gamma = p;
    const float *xhat = l->col, *istd = l->col + (size_t)B * C * HW + C;
    float *dgamma = g, *dbeta = g + C;
    float M = (float)B * HW;
    for (int ch = 0; ch < C; ch++) {
        double sg = 0, sb = 0;
        for (int b = 0; b < B; b++) {
            size_t o = ((size_t)b * C + ch) * HW;
            for (int i = 0; i < HW; i++) { sg += dy[o + i] * xhat[o + i]; sb += dy[o + i]; }
        }
        dgamma[ch] = (float)sg;
        dbeta[ch] = (float)sb;
        if (!dx) continue;
        float k = gamma[ch] * istd[ch] / M, fg = (float)sg, fb = (float)sb;
        for (int b = 0; b < B; b++) {
            size_t o = ((size_t)b * C + ch) * HW;
            for (int i = 0; i < HW; i++) dx[o + i] = k * (M * dy[o + i] - fb - xhat[o + i] * fg);
        }
    }
}

/* ---- dispatch --------------------------------------------------------- */

void tr_layer_forward(tr_layer *l, const tr_layer_ctx *c, const float *p, float *bufs, const float *x, float *y,
                      int B)
{
    size_t n = tr_shape_size(l->in) * (size_t)B;
    switch (l->kind) {
    case TR_DENSE: dense_forward(l, p, x, y, B); break;
    case TR_CONV2D: conv_forward(l, p, x, y, B); break;
    case TR_MAXPOOL: pool_forward(l, x, y, B); break;
    case TR_RELU:
        for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case TR_DROPOUT: {
        float pd = l->spec.p;
        if (!c->train || pd <= 0.0f) { memcpy(y, x, n * sizeof(float)); break; }
        uint8_t *mask = (uint8_t *)l->col;
        float scale = 1.0f / (1.0f - pd);
        size_t per = tr_shape_size(l->in);
        for (int r = 0; r < B; r++) {
            uint64_t rs = tr_dropout_row_seed(c->seed, c->step, c->index, c->row_base + r);
            for (size_t i = 0; i < per; i++) {
                size_t k = (size_t)r * per + i;
                uint8_t keep = (uint8_t)tr_dropout_keep(rs, i, pd);
                mask[k] = keep;
                y[k] = keep ? x[k] * scale : 0.0f;
            }
        }
        break;
    }
    case TR_BATCHNORM: bn_forward(l, c, p, bufs, x, y, B); break;
    case TR_FLATTEN: memcpy(y, x, n * sizeof(float)); break;
    default: break;
    }
}

void tr_layer_backward(tr_layer *l, const tr_layer_ctx *c, const float *p, const float *x, const float *y,
                       float *dy, float *dx, float *g, int B)
{
    size_t n = tr_shape_size(l->in) * (size_t)B;
    switch (l->kind) {
    case TR_DENSE: dense_backward(l, p, x, dy, dx, g, B); break;
    case TR_CONV2D: conv_backward(l, p, dy, dx, g, B); break;
    case TR_MAXPOOL: if (dx) pool_backward(l, dy, dx, B); break;
    case TR_RELU:
        if (dx) for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        break;
    case TR_DROPOUT:
        if (!dx) break;
        if (!c->train || l->spec.p <= 0.0f) { memcpy(dx, dy, n * sizeof(float)); break; }
        {
            const uint8_t *mask = (const uint8_t *)l->col;
            float scale = 1.0f / (1.0f - l->spec.p);
            for (size_t i = 0; i < n; i++) dx[i] = mask[i] ? dy[i] * scale : 0.0f;
        }
        break;
    case TR_BATCHNORM: bn_backward(l, p, dy, dx, g, B); break;
    case TR_FLATTEN: if (dx) memcpy(dx, dy, n * sizeof(float)); break;
    default: break;
    }
    (void)x;
}

double tr_softmax_xent(const float *logits, const int32_t *labels, int B, int C, float *dlogits, int scale_B,
                       int *correct)
{
    double loss = 0;
    int hits = 0;
    float inv = 1.0f / (float)(scale_B > 0 ? scale_B : B);
    for (int r = 0; r < B; r++) {
        const float *z = logits + (size_t)r * C;
        int arg = 0;
        float mx = z[0];
        for (int j = 1; j < C; j++) if (z[j] > mx) { mx = z[j]; arg = j; }
        double s = 0;
        for (int j = 0; j < C; j++) s += exp((double)(z[j] - mx));
        int y = labels[r];
        if (y < 0 || y >= C) y = 0;   /* loaders validate labels; keep memory safe regardless */
        loss += log(s) - (double)(z[y] - mx);
        hits += arg == y;
        if (dlogits) {
            float *d = dlogits + (size_t)r * C;
            for (int j = 0; j < C; j++) d[j] = (float)(exp((double)(z[j] - mx)) / s) * inv;
            d[y] -= inv;
        }
    }
    if (correct) *correct = hits;
    return B > 0 ? loss / B : 0.0;
}

/*
 * cuda.cu — the host side of the CUDA backend (backend.h, device.h): the
 * device state's lifetime, copies between host and device, every layer's
 * forward and backward pass as kernel launches and cuBLAS sgemm calls,
 * clipping, the optimizer step, and the backend's table of operations
 * (tr_backend_cuda_ops). The kernels are in cuda_kernels.cu, the GPU probe
 * and cuBLAS loading in cuda_blas.cu. Compiled only when the Makefile finds
 * nvcc (CUDA=1, HF_HAVE_CUDA).
 *
 * cuBLAS is column-major, so a row-major (R, C) matrix is used as its
 * column-major transpose (C, R):
 *   dense forward  Y^T (out,B) = W (as op T) x X^T       -> gemm(T, N, out, B, in)
 *   dense dW       dW^T (in,out) = X^T x dY               -> gemm(N, T, in, out, B)
 *   dense dX       dX^T (in,B) = W^T x dY^T               -> gemm(N, N, in, B, out)
 *   conv forward   tmp (Co,N) = W (Co,K) col (K,N)        -> gemm(N, N, N, Co, K)
 *   conv dW        dW (Co,K) = tmp (Co,N) col^T (N,K)     -> gemm(T, N, K, Co, N)
 *   conv dcol      dcol (K,N) = W^T (K,Co) tmp (Co,N)     -> gemm(N, T, N, K, Co)
 * where K = Ci*k*k and N = B*OH*OW (the whole batch lowered at once, as
 * the CPU path does). Math mode is CUBLAS_DEFAULT_MATH and
 * CUBLAS_TF32_TENSOR_OP_MATH is never set, so sgemm is true FP32; dense and
 * conv agree with OpenBLAS within float rounding (summation order).
 *
 * State on the device: params, grads, BN buffers, optimizer state, every
 * activation and its gradient, per-layer scratch. The host copies are
 * refreshed only by tr_cuda_store (checkpoints, evaluation).
 */
#include "trainer/cuda_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lifetime ------------------------------------------------------------ */

extern "C" void tr_cuda_free(tr_cuda *c)
{
    if (!c) return;
    if (c->h) tr_cbl.destroy(c->h);
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
    if (tr_cublas_ready(why, sizeof why)) {
        snprintf(err, el, "no cuBLAS: %s", why);
        free(c);
        return NULL;
    }
    CB(tr_cbl.create(&c->h));
    CB(tr_cbl.set_math_mode(c->h, CUBLAS_DEFAULT_MATH));   /* FP32; TF32 tensor ops stay off */
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
        if (o->n > c->n_params) { hf_error("cuda: optimizer over %zu, model %zu params", o->n, c->n_params); return HF_EINVAL; }
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
        CB(tr_cbl.sgemm(c->h, CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, &one, P, in, X, in, &zero, Y, out));
        k_bias_add<<<blocks(nout, T), T>>>(Y, b, B, out);
        break;
    }
    case TR_CONV2D: {
        conv_geom g = geom(l);
        int K = g.C * g.k * g.k, OHW = g.OH * g.OW;
        int N = B * OHW;
        float *col = c->col[i], *tmp = col + (size_t)K * N;
        k_im2col<<<blocks((size_t)K * N, T), T>>>(X, col, g, B);
        CB(tr_cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_N, N, g.Co, K, &one, col, N, P, K, &zero, tmp, N));
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
                                        ctx->step, i, ctx->row_base);
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
        CB(tr_cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, &one, X, in, dY, out, &zero, G, in));
        k_bias_grad<<<blocks(out, T), T>>>(dY, db, B, out);
        if (dX) CB(tr_cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, &one, P, in, dY, out, &zero, dX, in));
        break;
    }
    case TR_CONV2D: {
        conv_geom g = geom(l);
        int K = g.C * g.k * g.k, OHW = g.OH * g.OW;
        int N = B * OHW;
        float *col = c->col[i], *tmp = col + (size_t)K * N;
        k_conv_gather<<<blocks(nout, T), T>>>(dY, tmp, B, g.Co, OHW);
        k_row_sum<<<g.Co, T>>>(tmp, G + (size_t)g.Co * K, (size_t)N);
        CB(tr_cbl.sgemm(c->h, CUBLAS_OP_T, CUBLAS_OP_N, K, g.Co, N, &one, col, N, tmp, N, &zero, G, K));
        if (dX) {
            CB(tr_cbl.sgemm(c->h, CUBLAS_OP_N, CUBLAS_OP_T, N, K, g.Co, &one, tmp, N, P, K, &zero, col, N));
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

/* tr_optim_step over params[off, off + o->n) on the device. */
static int optim_step_at(tr_cuda *c, tr_optim *o, size_t off, float lr)
{
    const unsigned T = 256;
    size_t n = o->n;
    if (off > c->n_params || n > c->n_params - off) return HF_EINVAL;
    if (c->n_ostate != o->n_state && tr_cuda_load(c, NULL, NULL, o)) return HF_EIO;
    float *P = c->params + off, *G = c->grads + off;
    float wd = o->weight_decay;
    o->t++;
    if (o->kind == TR_OPT_SGD) {
        if (!o->n_state) k_sgd<<<blocks(n, T), T>>>(P, G, n, lr, wd);
        else
            k_sgd_momentum<<<blocks(n, T), T>>>(P, G, c->ostate, n, lr, wd, o->momentum, o->t == 1, o->nesterov);
    } else {
        /* the scalars exactly as optim.c computes them (host powf) */
        float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
        float bc1 = 1.0f - powf(b1, (float)o->t), bc2 = 1.0f - powf(b2, (float)o->t);
        float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2);
        float dec = o->kind == TR_OPT_ADAMW ? lr * wd : 0.0f, l2 = o->kind == TR_OPT_ADAMW ? 0.0f : wd;
        k_adam<<<blocks(n, T), T>>>(P, G, c->ostate, c->ostate + n, n, dec, l2, b1, b2, 1.0f - b1, 1.0f - b2, step,
                                     rbc2, eps);
    }
    CK(cudaGetLastError());
    return 0;
fail:
    return HF_EIO;
}

extern "C" int tr_cuda_optim_step(tr_cuda *c, tr_optim *o, float lr)
{
    if (o->n != c->n_params) return HF_EINVAL;
    return optim_step_at(c, o, 0, lr);
}

/* ---- the backend's operations (backend.h) ---------------------------------------- */

static tr_cuda *dev_of(tr_backend *be) { return (tr_cuda *)be->dev; }

static int cu_open(tr_backend *be, char *err, size_t el)
{
    be->dev = tr_cuda_new(be->m, err, el);
    return be->dev ? 0 : HF_EUNSUP;
}

static void cu_close(tr_backend *be)
{
    tr_cuda_free(dev_of(be));
    be->dev = NULL;
}

static int cu_load(tr_backend *be, const float *params, const float *bufs, const tr_optim *o)
{
    return tr_cuda_load(dev_of(be), params, bufs, o);
}

static int cu_store(tr_backend *be, float *params, float *bufs, tr_optim *o)
{
    return tr_cuda_store(dev_of(be), params, bufs, o);
}

static int cu_put_batch(tr_backend *be, const float *x, const int32_t *y, int B)
{
    tr_cuda *c = dev_of(be);
    if (B <= 0 || B > c->max_batch) return HF_EINVAL;
    size_t nx = (size_t)B * tr_shape_size(c->lay[0].in);
    if (x) CK(cudaMemcpy(c->act[0], x, nx * sizeof(float), cudaMemcpyHostToDevice));
    if (y) CK(cudaMemcpy(c->y, y, B * sizeof(int32_t), cudaMemcpyHostToDevice));
    return 0;
fail:
    return HF_EIO;
}

static int cu_forward(tr_backend *be, int i, const tr_layer_ctx *ctx, int B)
{
    return layer_forward(dev_of(be), i, ctx, B);
}

static int cu_backward(tr_backend *be, int i, const tr_layer_ctx *ctx, int B, int want_dx)
{
    return layer_backward(dev_of(be), i, ctx, B, want_dx);
}

/* d(logits) always goes to dact[L]: in inference it is scratch that the
 * next training step overwrites. */
static int cu_xent(tr_backend *be, int B, int scale_B, int want_grad)
{
    (void)want_grad;
    tr_cuda *c = dev_of(be);
    int L = c->n_layers;
    float inv = 1.0f / (float)(scale_B > 0 ? scale_B : B);
    k_softmax_xent<<<blocks(B, 64), 64>>>(c->act[L], c->y, B, c->n_classes, c->dact[L], inv, c->rowloss, c->rowhit);
    CK(cudaGetLastError());
    return 0;
fail:
    return HF_EIO;
}

static int cu_xent_result(tr_backend *be, int B, double *loss, int *hits)
{
    return row_sums(dev_of(be), B, loss, hits);
}

static int cu_clip(tr_backend *be, double max_norm, double *norm)
{
    return tr_cuda_clip(dev_of(be), max_norm, norm);
}

static int cu_optim_step(tr_backend *be, tr_optim *o, size_t off, float lr)
{
    return optim_step_at(dev_of(be), o, off, lr);
}

static const tr_backend_ops cuda_ops = {
    "cuda", 0, cu_open, cu_close, cu_load, cu_store, cu_put_batch, cu_forward, cu_backward, cu_xent,
    cu_xent_result, cu_clip, cu_optim_step,
};

extern "C" const tr_backend_ops *tr_backend_cuda_ops(void) { return &cuda_ops; }

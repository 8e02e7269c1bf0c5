/*
 * backend.c — choosing the compute backend once, and the loops over layers
 * that every caller shares, written once over the per-layer operations of
 * backend.h. A loop here decides the order of the calls, which gradients
 * are computed and when the gradient callback runs; the backends decide
 * how each layer is computed. Calls nothing of the callers (train.c,
 * report.c, dist_*.c, model.c).
 */
#include "backend.h"

#include "device.h"
#include "hf_err.h"
#include "hf_log.h"

#include <stdio.h>
#include <string.h>

static int open_ops(tr_backend *be, const tr_backend_ops *ops, tr_model *m, char *err, size_t el)
{
    memset(be, 0, sizeof *be);
    be->ops = ops;
    be->m = m;
    int rc = ops->open(be, err, el);
    if (rc) memset(be, 0, sizeof *be);
    return rc;
}

int tr_backend_select(tr_backend *be, int dev, const char *want, tr_model *m, char *err, size_t el)
{
    if (dev == TR_DEV_CUDA) {
#ifdef HF_HAVE_CUDA
        int rc = open_ops(be, tr_backend_cuda_ops(), m, err, el);
#else
        int rc = HF_EUNSUP;
        snprintf(err, el, "no usable CUDA GPU: this hyperfarm-train was built without CUDA");
#endif
        if (rc == 0) {
            hf_info("training step (all layers, clipping, optimizer) and evaluation on the GPU");
            return 0;
        }
        if (!strcmp(want, "cuda")) return rc;
        hf_warn("device auto: %s; training on the CPU", err);
    }
    return open_ops(be, tr_backend_cpu_ops(), m, err, el);
}

void tr_backend_close(tr_backend *be)
{
    if (be && be->ops) be->ops->close(be);
    if (be) memset(be, 0, sizeof *be);
}

int tr_backend_load(tr_backend *be, const tr_optim *o)
{
    return be->ops->load(be, be->m->params, be->m->bufs, o);
}

int tr_backend_sync(tr_backend *be, tr_optim *o)
{
    return be->ops->store(be, be->m->params, be->m->bufs, o);
}

/* The first layer with parameters: no gradient is needed below it. */
static int first_param_layer(const tr_model *m)
{
    int first = 0;
    while (first < m->n_layers && m->layers[first].param_count == 0) first++;
    return first;
}

int tr_backend_forward(tr_backend *be, int a, int b, int B, const tr_layer_ctx *ctx)
{
    tr_layer_ctx lc = *ctx;
    for (int i = a; i < b; i++) {
        lc.index = i;
        int rc = be->ops->forward(be, i, &lc, B);
        if (rc) return rc;
    }
    return 0;
}

int tr_backend_backward(tr_backend *be, int a, int b, int B, const tr_layer_ctx *ctx, tr_grad_cb cb, void *cb_ctx)
{
    const tr_model *m = be->m;
    if (cb && !be->ops->host) return HF_EUNSUP;   /* the callback reads the host gradient */
    tr_layer_ctx lc = *ctx;
    int first = first_param_layer(m);
    for (int i = b - 1; i >= a; i--) {
        const tr_layer *l = &m->layers[i];
        lc.index = i;
        int rc = be->ops->backward(be, i, &lc, B, a > 0 || i > first);
        if (rc) return rc;
        if (cb && l->param_count) cb(cb_ctx, l->param_off, l->param_count);
    }
    return 0;
}

int tr_backend_xent(tr_backend *be, const int32_t *y, int B, int scale_B, int want_grad, double *loss, int *hits)
{
    int rc = be->ops->put_batch(be, NULL, y, B);
    if (!rc) rc = be->ops->xent(be, B, scale_B, want_grad);
    if (!rc) rc = be->ops->xent_result(be, B, loss, hits);
    return rc;
}

int tr_backend_step(tr_backend *be, const float *x, const int32_t *y, int B, int scale_B, const tr_layer_ctx *ctx,
                    tr_grad_cb cb, void *cb_ctx, double *loss, int *hits)
{
    tr_layer_ctx train;
    memset(&train, 0, sizeof train);
    train.train = 1;
    if (!ctx) ctx = &train;
    if (cb && !be->ops->host) return HF_EUNSUP;
    int L = be->m->n_layers, rc;
    if ((rc = be->ops->put_batch(be, x, y, B)) || (rc = tr_backend_forward(be, 0, L, B, ctx)) ||
        (rc = be->ops->xent(be, B, scale_B, 1)) || (rc = tr_backend_backward(be, 0, L, B, ctx, cb, cb_ctx)))
        return rc;
    return be->ops->xent_result(be, B, loss, hits);
}

int tr_backend_infer(tr_backend *be, const float *x, const int32_t *y, int B, double *loss, int *hits)
{
    tr_layer_ctx eval;
    memset(&eval, 0, sizeof eval);   /* train = 0: no dropout, BN running statistics */
    int rc;
    if ((rc = be->ops->put_batch(be, x, y, B)) || (rc = tr_backend_forward(be, 0, be->m->n_layers, B, &eval)) ||
        (rc = be->ops->xent(be, B, B, 0)))
        return rc;
    return be->ops->xent_result(be, B, loss, hits);
}

int tr_backend_clip(tr_backend *be, double max_norm, double *norm)
{
    return be->ops->clip(be, max_norm, norm);
}

int tr_backend_optim_step(tr_backend *be, tr_optim *o, size_t off, float lr)
{
    if (off > be->m->n_params || o->n > be->m->n_params - off) return HF_EINVAL;
    return be->ops->optim_step(be, o, off, lr);
}

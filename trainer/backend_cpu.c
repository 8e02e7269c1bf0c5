/*
 * backend_cpu.c — the CPU compute backend (backend.h): the reference
 * kernels of layer.c (OpenBLAS sgemm for dense and conv2d, plain loops for
 * the rest) and optim.c, on the model's own host arrays. Nothing is
 * copied: the batch is read where the caller put it (normally act[0]
 * itself), load and store only copy when handed arrays other than the
 * model's.
 */
#include "backend.h"

#include "hf_err.h"

#include <string.h>

static int cpu_open(tr_backend *be, char *err, size_t el)
{
    (void)err; (void)el;
    be->dev = NULL;
    return 0;
}

static void cpu_close(tr_backend *be) { (void)be; }

static void copy_if(float *dst, const float *src, size_t n)
{
    if (dst && src && dst != src && n) memcpy(dst, src, n * sizeof(float));
}

/* The optimizer's state is host memory already; only the arrays move. */
static int cpu_load(tr_backend *be, const float *params, const float *bufs, const tr_optim *o)
{
    (void)o;
    copy_if(be->m->params, params, be->m->n_params);
    copy_if(be->m->bufs, bufs, be->m->n_bufs);
    return 0;
}

static int cpu_store(tr_backend *be, float *params, float *bufs, tr_optim *o)
{
    (void)o;
    copy_if(params, be->m->params, be->m->n_params);
    copy_if(bufs, be->m->bufs, be->m->n_bufs);
    return 0;
}

static int cpu_put_batch(tr_backend *be, const float *x, const int32_t *y, int B)
{
    tr_model *m = be->m;
    if (B < 0 || B > m->max_batch) return HF_EINVAL;
    copy_if(m->act[0], x, (size_t)B * tr_shape_size(m->in_shape));
    if (y) be->y = y;
    return 0;
}

static int cpu_forward(tr_backend *be, int i, const tr_layer_ctx *ctx, int B)
{
    tr_model *m = be->m;
    tr_layer *l = &m->layers[i];
    tr_layer_forward(l, ctx, m->params + l->param_off, m->bufs + l->buf_off, m->act[i], m->act[i + 1], B);
    return 0;
}

static int cpu_backward(tr_backend *be, int i, const tr_layer_ctx *ctx, int B, int want_dx)
{
    tr_model *m = be->m;
    tr_layer *l = &m->layers[i];
    tr_layer_backward(l, ctx, m->params + l->param_off, m->act[i], m->act[i + 1], m->dact[i + 1],
                      want_dx ? m->dact[i] : NULL, m->grads + l->param_off, B);
    return 0;
}

static int cpu_xent(tr_backend *be, int B, int scale_B, int want_grad)
{
    tr_model *m = be->m;
    int L = m->n_layers;
    be->loss = tr_softmax_xent(m->act[L], be->y, B, m->n_classes, want_grad ? m->dact[L] : NULL, scale_B, &be->hits);
    return 0;
}

static int cpu_xent_result(tr_backend *be, int B, double *loss, int *hits)
{
    (void)B;
    if (loss) *loss = be->loss;
    if (hits) *hits = be->hits;
    return 0;
}

static int cpu_clip(tr_backend *be, double max_norm, double *norm)
{
    double n = tr_grad_clip(be->m->grads, be->m->n_params, max_norm);
    if (norm) *norm = n;
    return 0;
}

static int cpu_optim_step(tr_backend *be, tr_optim *o, size_t off, float lr)
{
    tr_optim_step(o, be->m->params + off, be->m->grads + off, lr);
    return 0;
}

static const tr_backend_ops cpu_ops = {
    .name = "cpu",
    .host = 1,
    .open = cpu_open,
    .close = cpu_close,
    .load = cpu_load,
    .store = cpu_store,
    .put_batch = cpu_put_batch,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .xent = cpu_xent,
    .xent_result = cpu_xent_result,
    .clip = cpu_clip,
    .optim_step = cpu_optim_step,
};

const tr_backend_ops *tr_backend_cpu_ops(void) { return &cpu_ops; }

void tr_backend_cpu(tr_backend *be, tr_model *m)
{
    memset(be, 0, sizeof *be);
    be->ops = &cpu_ops;
    be->m = m;
}

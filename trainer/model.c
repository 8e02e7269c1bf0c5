/*
 * model.c — sequential models over flat parameter/gradient arrays (model.h).
 *
 * Built once per run; every buffer (parameters, gradients, activations,
 * their gradients, per-layer scratch) is allocated here for max_batch rows,
 * so a training step allocates nothing.
 */
#include "model.h"

#include "backend.h"
#include "hf_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *falloc(size_t n)
{
    /* 64-byte aligned for the BLAS; at least one element so NULL means failure */
    size_t bytes = ((n ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

tr_model *tr_model_new(tr_shape in, const tr_layer_spec *specs, int n_specs, int max_batch, uint64_t seed,
                       char *err, size_t el)
{
    tr_model *m = NULL;
    if (n_specs <= 0 || n_specs > TR_MAX_LAYERS || max_batch <= 0) {
        snprintf(err, el, "model: %d layers (1..%d), max batch %d", n_specs, TR_MAX_LAYERS, max_batch);
        return NULL;
    }
    m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->in_shape = in;
    m->max_batch = max_batch;
    m->n_layers = n_specs;
    tr_shape s = in;
    size_t scratch = 0;
    uint64_t h = tr_hash64((uint64_t)in.c, (uint64_t)in.h, (uint64_t)in.w, 0xA5);
    int dl = snprintf(m->desc, sizeof m->desc, "%dx%dx%d", in.c, in.h, in.w);
    for (int i = 0; i < n_specs; i++) {
        tr_layer *l = &m->layers[i];
        if (tr_layer_setup(l, &specs[i], s)) {
            snprintf(err, el, "model: layer %d (%s) does not fit input %dx%dx%d", i, tr_layer_name(specs[i].kind),
                     s.c, s.h, s.w);
            goto fail;
        }
        l->param_off = m->n_params;
        l->buf_off = m->n_bufs;
        m->n_params += l->param_count;
        m->n_bufs += l->buf_count;
        scratch += tr_layer_scratch_floats(l, max_batch) + 16;
        s = l->out;
        h = tr_hash64(h, (uint64_t)specs[i].kind, (uint64_t)specs[i].out * 131 + (uint64_t)specs[i].k,
                      (uint64_t)specs[i].pad);
        if (dl > 0 && (size_t)dl < sizeof m->desc) {
            if (l->kind == TR_DENSE || l->kind == TR_CONV2D)
                dl += snprintf(m->desc + dl, sizeof m->desc - dl, " %s%d", l->kind == TR_DENSE ? "fc" : "conv",
                               specs[i].out);
            else if (l->kind == TR_MAXPOOL || l->kind == TR_BATCHNORM || l->kind == TR_DROPOUT)
                dl += snprintf(m->desc + dl, sizeof m->desc - dl, " %s", l->kind == TR_MAXPOOL ? "pool"
                                                                     : l->kind == TR_BATCHNORM ? "bn" : "drop");
        }
    }
    if (s.h != 1 || s.w != 1) {
        snprintf(err, el, "model: last layer must produce a vector, got %dx%dx%d", s.c, s.h, s.w);
        goto fail;
    }
    m->n_classes = s.c;
    m->arch_hash = tr_hash64(h, m->n_params, m->n_bufs, 0x5A);
    if (!(m->params = falloc(m->n_params)) || !(m->grads = falloc(m->n_params)) || !(m->bufs = falloc(m->n_bufs)) ||
        !(m->scratch = falloc(scratch)))
        goto oom;
    size_t off = 0;
    for (int i = 0; i <= n_specs; i++) {
        tr_shape si = i < n_specs ? m->layers[i].in : m->layers[n_specs - 1].out;
        size_t n = tr_shape_size(si) * (size_t)max_batch;
        if (!(m->act[i] = falloc(n)) || !(m->dact[i] = falloc(n))) goto oom;
        if (i < n_specs) {
            tr_layer *l = &m->layers[i];
            size_t need = tr_layer_scratch_floats(l, max_batch);
            l->col = need ? m->scratch + off : NULL;
            l->argmax = (int32_t *)l->col;
            l->xhat = l->col;
            l->mask = (uint8_t *)l->col;
            off += need + 16;   /* keeps each layer's block 64-byte aligned */
            tr_layer_init(l, m->params + l->param_off, m->bufs + l->buf_off, seed);
        }
    }
    return m;
oom:
    snprintf(err, el, "model: out of memory");
fail:
    tr_model_free(m);
    return NULL;
}

void tr_model_free(tr_model *m)
{
    if (!m) return;
    free(m->params);
    free(m->grads);
    free(m->bufs);
    free(m->scratch);
    for (int i = 0; i <= TR_MAX_LAYERS; i++) { free(m->act[i]); free(m->dact[i]); }
    free(m);
}

int tr_model_specs(const tr_options *o, tr_layer_spec *sp, int max, char *err, size_t el)
{
    int n = 0;
#define ADD(...) do { if (n >= max) goto toomany; sp[n++] = (tr_layer_spec){__VA_ARGS__}; } while (0)
    if (!strcmp(o->model, "mlp")) {
        ADD(.kind = TR_FLATTEN);
        for (int i = 0; i < o->n_hidden; i++) {
            ADD(.kind = TR_DENSE, .out = o->hidden[i]);
            if (o->batch_norm) ADD(.kind = TR_BATCHNORM);
            ADD(.kind = TR_RELU);
            if (o->dropout > 0) ADD(.kind = TR_DROPOUT, .p = (float)o->dropout);
        }
        ADD(.kind = TR_DENSE, .out = 10);
    } else if (!strcmp(o->model, "cnn")) {
        int side = 28;
        for (int i = 0; i < o->n_channels; i++) {
            if (side < 2) { snprintf(err, el, "cnn: %d conv blocks shrink 28x28 to nothing", o->n_channels); return HF_EINVAL; }
            ADD(.kind = TR_CONV2D, .out = o->channels[i], .k = 3, .pad = 1);
            if (o->batch_norm) ADD(.kind = TR_BATCHNORM);
            ADD(.kind = TR_RELU);
            ADD(.kind = TR_MAXPOOL, .k = 2);
            side /= 2;
        }
        ADD(.kind = TR_FLATTEN);
        if (o->dropout > 0) ADD(.kind = TR_DROPOUT, .p = (float)o->dropout);
        if (o->fc > 0) {
            ADD(.kind = TR_DENSE, .out = o->fc);
            ADD(.kind = TR_RELU);
            if (o->dropout > 0) ADD(.kind = TR_DROPOUT, .p = (float)o->dropout);
        }
        ADD(.kind = TR_DENSE, .out = 10);
    } else {
        snprintf(err, el, "unknown model '%s' (mlp|cnn)", o->model);
        return HF_EINVAL;
    }
    return n;
#undef ADD
toomany:
    snprintf(err, el, "model: more than %d layers", max);
    return HF_EINVAL;
}

tr_model *tr_model_from_options(const tr_options *o, int max_batch, char *err, size_t el)
{
    tr_layer_spec sp[TR_MAX_LAYERS];
    int n = tr_model_specs(o, sp, TR_MAX_LAYERS, err, el);
    if (n < 0) return NULL;
    tr_model *m = tr_model_new((tr_shape){1, 28, 28}, sp, n, max_batch, o->seed, err, el);
    if (m && !strcmp(o->model, "mlp")) {
        int dl = snprintf(m->desc, sizeof m->desc, "mlp 784");
        for (int i = 0; i < o->n_hidden && dl > 0 && (size_t)dl < sizeof m->desc; i++)
            dl += snprintf(m->desc + dl, sizeof m->desc - dl, "-%d", o->hidden[i]);
        if (dl > 0 && (size_t)dl < sizeof m->desc) snprintf(m->desc + dl, sizeof m->desc - dl, "-10");
    }
    return m;
}

/* The loops over layers are the backend driver's (backend.c), here on the
 * CPU backend over m: the CPU reference and the backends share one loop. */

void tr_model_forward(tr_model *m, int a, int b, int B, const tr_layer_ctx *c)
{
    tr_backend be;
    tr_backend_cpu(&be, m);
    tr_backend_forward(&be, a, b, B, c);
}

void tr_model_backward(tr_model *m, int a, int b, int B, const tr_layer_ctx *c, tr_grad_cb cb, void *ctx)
{
    tr_backend be;
    tr_backend_cpu(&be, m);
    tr_backend_backward(&be, a, b, B, c, cb, ctx);
}

double tr_model_step(tr_model *m, const int32_t *labels, int B, int scale_B, const tr_layer_ctx *c, tr_grad_cb cb,
                     void *ctx, int *correct)
{
    tr_backend be;
    double loss = 0;
    tr_backend_cpu(&be, m);
    tr_backend_step(&be, NULL, labels, B, scale_B, c, cb, ctx, &loss, correct);
    return loss;
}

void tr_model_infer(tr_model *m, int B)
{
    tr_layer_ctx c = {.train = 0};
    tr_model_forward(m, 0, m->n_layers, B, &c);
}

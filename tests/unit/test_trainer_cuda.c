/*
 * test_trainer_cuda.c — the CUDA backend against the CPU reference.
 *
 * Always (GPU or not):
 *   - tr_device_select: "cpu" is the CPU; "cuda" without a usable GPU is
 *     HF_EUNSUP with "no usable CUDA GPU: <why>"; "auto" falls back to
 *     the CPU; tr_cuda_new without a GPU fails with the same message.
 * With a usable GPU (otherwise the program exits 77, "skipped"):
 *   - every layer kind, alone, on random inputs, train and eval mode
 *     (tr_cuda_layer vs tr_layer_forward/backward): output, input gradient
 *     and parameter gradient. Tolerances:
 *       relu, flatten, maxpool, dropout       bit-identical (same mask)
 *       dense, conv2d (sgemm), batch norm     max|gpu-cpu| <= 1e-4 max|cpu|
 *     (normwise relative; cuBLAS runs FP32 with TF32 off, so only the
 *     summation order differs), BN running statistics likewise;
 *   - the optimizer and clipping on the device (SGD, momentum, Nesterov,
 *     Adam, AdamW with weight decay) on the same params and grads:
 *     parameters and state bit-identical to optim.c after 3 steps;
 *   - one step through the backend table (tr_backend_step on the CUDA
 *     backend) on an MLP (logits, loss, hits, grads within 1e-4 + 1e-3 |x|);
 *   - a whole MLP (batch norm, dropout, Nesterov) and a whole CNN (conv,
 *     BN, pool, dropout, SGD momentum + weight decay + clipping) trained
 *     5 steps on CPU and GPU from the same weights and batches: per-step
 *     loss within 1e-4 relative, final params, BN buffers and momentum
 *     within 1e-3 normwise (per layer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "trainer/backend.h"
#include "trainer/data.h"
#include "trainer/device.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int  g_have_gpu;
static char g_why[256];

static unsigned g_rng = 12345u;

static float frand(float lo, float hi)
{
    g_rng = g_rng * 1103515245u + 12345u;
    return lo + (hi - lo) * (float)((g_rng >> 8) & 0xFFFFFF) / 16777216.0f;
}

static void fill(float *a, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) a[i] = frand(lo, hi);
}

static float *fmalloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

/* max|gpu - cpu| <= rtol * max|cpu| (+ a denormal floor). RET 1 if close. */
static int close_norm(const char *what, int layer, const float *gpu, const float *cpu, size_t n, double rtol)
{
    double mx = 0, md = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)cpu[i]), d = fabs((double)gpu[i] - (double)cpu[i]);
        if (a > mx) mx = a;
        if (d > md || d != d) { md = d; at = i; }
    }
    if (md <= rtol * mx + 1e-30 && md == md) return 1;
    fprintf(stderr, "layer %d %s: max |gpu-cpu| %g at %zu (gpu %g cpu %g), max |cpu| %g, rtol %g\n", layer, what,
            md, at, gpu[at], cpu[at], mx, rtol);
    return 0;
}

static int same_bits(const char *what, int layer, const float *gpu, const float *cpu, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&gpu[i], &cpu[i], sizeof(float))) {
            fprintf(stderr, "layer %d %s: element %zu differs: gpu %.9g cpu %.9g\n", layer, what, i, gpu[i], cpu[i]);
            return 0;
        }
    return 1;
}

/* ---- no GPU needed ------------------------------------------------------ */

static void test_device_select(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(tr_device_select("cpu", err, sizeof err), TR_DEV_CPU);
    int d = tr_device_select("cuda", err, sizeof err);
    if (g_have_gpu) {
        assert_int_equal(d, TR_DEV_CUDA);
        assert_int_equal(tr_device_select("auto", err, sizeof err), TR_DEV_CUDA);
    } else {
        assert_int_equal(d, HF_EUNSUP);
        assert_non_null(strstr(err, "no usable CUDA GPU: "));
        assert_true(strlen(err) > strlen("no usable CUDA GPU: "));
        assert_int_equal(tr_device_select("auto", err, sizeof err), TR_DEV_CPU);
    }
}

static void test_cuda_new(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    snprintf(o.model, sizeof o.model, "cnn");
    o.batch_norm = 1;
    o.dropout = 0.25;
    char err[256] = "";
    tr_model *m = tr_model_from_options(&o, 4, err, sizeof err);
    assert_non_null(m);
    tr_cuda *g = tr_cuda_new(m, err, sizeof err);
    if (g_have_gpu) {
        if (!g) fprintf(stderr, "tr_cuda_new: %s\n", err);
        assert_non_null(g);   /* every layer kind has a kernel */
    } else {
        assert_null(g);
        assert_non_null(strstr(err, "no usable CUDA GPU: "));
    }
    tr_cuda_free(g);
    tr_model_free(m);
}

/* ---- every layer alone ---------------------------------------------------- */

static void test_layers_match_cpu(void **state)
{
    (void)state;
    /* every kind, with conv pad 1 and pad 0, BN over (B, H, W) and over B */
    tr_layer_spec sp[] = {
        {.kind = TR_CONV2D, .out = 8, .k = 3, .pad = 1},   /* (B, 3, 10, 10) -> (B, 8, 10, 10) */
        {.kind = TR_BATCHNORM},
        {.kind = TR_RELU},
        {.kind = TR_MAXPOOL, .k = 2},                      /* -> (B, 8, 5, 5) */
        {.kind = TR_DROPOUT, .p = 0.3f},
        {.kind = TR_CONV2D, .out = 6, .k = 3, .pad = 0},   /* -> (B, 6, 3, 3) */
        {.kind = TR_MAXPOOL, .k = 2},                      /* -> (B, 6, 1, 1), row/col 2 unused */
        {.kind = TR_FLATTEN},
        {.kind = TR_DENSE, .out = 20},
        {.kind = TR_BATCHNORM},
        {.kind = TR_RELU},
        {.kind = TR_DROPOUT, .p = 0.5f},
        {.kind = TR_DENSE, .out = 10},
    };
    int n = (int)(sizeof sp / sizeof sp[0]), B = 16;
    char err[256];
    tr_model *m = tr_model_new((tr_shape){3, 10, 10}, sp, n, B, 3, err, sizeof err);
    assert_non_null(m);
    for (int i = 0; i < n; i++) {
        tr_layer *l = &m->layers[i];
        float *p = m->params + l->param_off;
        if (l->kind == TR_BATCHNORM) {
            int C = l->in.c;
            fill(p, C, 0.5f, 1.5f);
            fill(p + C, C, -0.5f, 0.5f);
            fill(m->bufs + l->buf_off, C, -0.2f, 0.2f);
            fill(m->bufs + l->buf_off + C, C, 0.5f, 1.5f);
        } else {
            fill(p, l->param_count, -0.5f, 0.5f);
        }
    }
    tr_cuda *g = tr_cuda_new(m, err, sizeof err);
    if (!g) fprintf(stderr, "tr_cuda_new: %s\n", err);
    assert_non_null(g);
    size_t maxn = 0;
    for (int i = 0; i < n; i++) {
        size_t a = tr_shape_size(m->layers[i].in), b = tr_shape_size(m->layers[i].out);
        if (a > maxn) maxn = a;
        if (b > maxn) maxn = b;
    }
    maxn *= (size_t)B;
    float *x = fmalloc(maxn), *dy = fmalloc(maxn), *dyc = fmalloc(maxn);
    float *yc = fmalloc(maxn), *yg = fmalloc(maxn), *dxc = fmalloc(maxn), *dxg = fmalloc(maxn);
    float *gc = fmalloc(m->n_params), *gg = fmalloc(m->n_params), *bg = fmalloc(m->n_bufs);
    int bad = 0;
    for (int train = 1; train >= 0; train--)
        for (int i = 0; i < n; i++) {
            tr_layer *l = &m->layers[i];
            size_t nin = tr_shape_size(l->in) * B, nout = tr_shape_size(l->out) * B;
            fill(x, nin, -1.0f, 1.0f);
            fill(dy, nout, -1.0f, 1.0f);
            memcpy(dyc, dy, nout * sizeof(float));
            tr_layer_ctx c = {.train = train, .seed = 7, .step = 3, .index = i, .row_base = 100};
            tr_layer_forward(l, &c, m->params + l->param_off, m->bufs + l->buf_off, x, yc, B);
            tr_layer_backward(l, &c, m->params + l->param_off, x, yc, dyc, dxc, gc, B);
            assert_int_equal(tr_cuda_layer(g, i, &c, B, x, yg, dy, dxg, gg), 0);
            const char *name = tr_layer_name(l->kind);
            char what[64];
            int exact = l->kind == TR_RELU || l->kind == TR_FLATTEN || l->kind == TR_MAXPOOL ||
                        l->kind == TR_DROPOUT;
            snprintf(what, sizeof what, "%s %s forward", name, train ? "train" : "eval");
            bad += exact ? !same_bits(what, i, yg, yc, nout) : !close_norm(what, i, yg, yc, nout, 1e-4);
            snprintf(what, sizeof what, "%s %s dx", name, train ? "train" : "eval");
            bad += exact ? !same_bits(what, i, dxg, dxc, nin) : !close_norm(what, i, dxg, dxc, nin, 1e-4);
            if (l->param_count) {
                snprintf(what, sizeof what, "%s %s param grads", name, train ? "train" : "eval");
                bad += !close_norm(what, i, gg, gc, l->param_count, 1e-4);
            }
            if (l->buf_count) {
                assert_int_equal(tr_cuda_store(g, NULL, bg, NULL), 0);
                snprintf(what, sizeof what, "%s %s running stats", name, train ? "train" : "eval");
                bad += !close_norm(what, i, bg + l->buf_off, m->bufs + l->buf_off, l->buf_count, 1e-5);
            }
        }
    assert_int_equal(bad, 0);
    free(x); free(dy); free(dyc); free(yc); free(yg); free(dxc); free(dxg); free(gc); free(gg); free(bg);
    tr_cuda_free(g);
    tr_model_free(m);
}

/* ---- optimizer and clipping: bit for bit ------------------------------------- */

static void test_optim_bit_identical(void **state)
{
    (void)state;
    static const struct { const char *opt; double momentum; int nesterov; } cases[] = {
        {"sgd", 0.0, 0}, {"sgd", 0.9, 0}, {"sgd", 0.9, 1}, {"adam", 0, 0}, {"adamw", 0, 0},
    };
    tr_options o;
    tr_options_defaults(&o);
    o.hidden[0] = 16; o.n_hidden = 1;
    char err[256];
    tr_model *m = tr_model_from_options(&o, 4, err, sizeof err);
    assert_non_null(m);
    tr_cuda *g = tr_cuda_new(m, err, sizeof err);
    assert_non_null(g);
    size_t n = m->n_params;
    float *p = fmalloc(n), *gr = fmalloc(n), *pg = fmalloc(n), *gg = fmalloc(n);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(o.optimizer, sizeof o.optimizer, "%s", cases[k].opt);
        o.momentum = cases[k].momentum;
        o.nesterov = cases[k].nesterov;
        o.weight_decay = 1e-2;
        tr_optim oc, og;
        assert_int_equal(tr_optim_init(&oc, &o, n), 0);
        assert_int_equal(tr_optim_init(&og, &o, n), 0);
        fill(p, n, -0.5f, 0.5f);
        assert_int_equal(tr_cuda_load(g, p, NULL, &og), 0);
        for (int s = 0; s < 3; s++) {
            fill(gr, n, -0.1f, 0.1f);
            assert_int_equal(tr_cuda_set_grads(g, gr), 0);
            tr_optim_step(&oc, p, gr, 0.01f);
            assert_int_equal(tr_cuda_optim_step(g, &og, 0.01f), 0);
        }
        assert_true(og.t == oc.t);
        float *sc = oc.state;
        oc.state = NULL;   /* og.state receives the device's copy */
        assert_int_equal(tr_cuda_store(g, pg, NULL, &og), 0);
        printf("optimizer %s momentum %.1f nesterov %d\n", cases[k].opt, cases[k].momentum, cases[k].nesterov);
        assert_true(same_bits("params", -1, pg, p, n));
        if (oc.n_state) assert_true(same_bits("state", -1, og.state, sc, oc.n_state));
        free(sc);
        tr_optim_free(&og);
    }
    /* clipping: same norm, same scale */
    fill(gr, n, -1.0f, 1.0f);
    assert_int_equal(tr_cuda_set_grads(g, gr), 0);
    double ng = 0, nc = tr_grad_clip(gr, n, 0.5);
    assert_int_equal(tr_cuda_clip(g, 0.5, &ng), 0);
    assert_float_equal(ng, nc, 1e-9 * nc);
    assert_int_equal(tr_cuda_get(g, gg, NULL, 0), 0);
    assert_true(close_norm("clipped grads", -1, gg, gr, n, 1e-6));
    free(p); free(gr); free(pg); free(gg);
    tr_cuda_free(g);
    tr_model_free(m);
}

/* ---- one step through the backend table --------------------------------------- */

static void ignore_grad(void *ctx, size_t off, size_t cnt)
{
    (void)ctx; (void)off; (void)cnt;
}

static void test_step_matches_cpu(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    o.hidden[0] = 96; o.hidden[1] = 48; o.n_hidden = 2;
    char err[256];
    int B = 64;
    tr_model *m = tr_model_from_options(&o, B, err, sizeof err);
    assert_non_null(m);
    tr_backend be;
    assert_int_equal(tr_backend_select(&be, TR_DEV_CUDA, "cuda", m, err, sizeof err), 0);
    assert_string_equal(be.ops->name, "cuda");
    float *x = fmalloc((size_t)B * 784), *gg = fmalloc(m->n_params), *lg = fmalloc((size_t)B * 10);
    fill(x, (size_t)B * 784, -1.0f, 1.0f);
    memcpy(m->act[0], x, (size_t)B * 784 * sizeof(float));
    int32_t y[64];
    for (int i = 0; i < B; i++) y[i] = (i * 7) % 10;
    double lg_loss;
    int lg_hits, hits;
    assert_int_equal(be.ops->load(&be, m->params, NULL, NULL), 0);
    assert_int_equal(tr_backend_step(&be, x, y, B, B, NULL, NULL, NULL, &lg_loss, &lg_hits), 0);
    assert_int_equal(tr_cuda_get((tr_cuda *)be.dev, gg, lg, B), 0);
    tr_layer_ctx c = {.train = 1};
    double loss = tr_model_step(m, y, B, B, &c, NULL, NULL, &hits);
    assert_float_equal(lg_loss, loss, 1e-4 + 1e-4 * fabs(loss));
    assert_int_equal(lg_hits, hits);
    int bad = 0;
    for (int i = 0; i < B * 10; i++)
        if (fabsf(lg[i] - m->act[m->n_layers][i]) > 1e-4f + 1e-3f * fabsf(m->act[m->n_layers][i])) bad++;
    for (size_t i = 0; i < m->n_params; i++)
        if (fabsf(gg[i] - m->grads[i]) > 1e-4f + 1e-3f * fabsf(m->grads[i]) && bad++ < 5)
            fprintf(stderr, "grad %zu: cuda %g cpu %g\n", i, gg[i], m->grads[i]);
    assert_int_equal(bad, 0);
    /* the gradient callback reads host gradients: refused on the device */
    assert_int_equal(tr_backend_step(&be, x, y, B, B, NULL, ignore_grad, NULL, &lg_loss, &lg_hits), HF_EUNSUP);
    free(x); free(gg); free(lg);
    tr_backend_close(&be);
    tr_model_free(m);
}

/* ---- whole models, a few training steps ------------------------------------------ */

/* tr_evaluate on the GPU (tr_backend_infer) against the CPU, both with the CPU's
 * trained parameters and BN statistics, over a dataset whose size is not a
 * multiple of the batch (a short last batch); dropout must be off and BN
 * must use its running statistics on both. The device gradient must be
 * left as it was. */
static void eval_compare(tr_model *m, tr_backend *be)
{
    tr_cuda *g = (tr_cuda *)be->dev;
    tr_backend cpu;
    tr_backend_cpu(&cpu, m);
    tr_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n = 1003;
    ds.c = m->in_shape.c; ds.h = m->in_shape.h; ds.w = m->in_shape.w;
    size_t per = (size_t)ds.c * ds.h * ds.w;
    ds.images = malloc((size_t)ds.n * per);
    ds.labels = malloc((size_t)ds.n * sizeof *ds.labels);
    assert_true(ds.images && ds.labels);
    for (size_t i = 0; i < (size_t)ds.n * per; i++) ds.images[i] = (uint8_t)frand(0, 255.99f);
    for (int i = 0; i < ds.n; i++) ds.labels[i] = (int32_t)(frand(0, 10) * 0.999f);
    ds.n_classes = 10;
    ds.view = 1;
    ds.mean = 0.5f; ds.std = 0.25f;
    float *g0 = fmalloc(m->n_params), *g1 = fmalloc(m->n_params);
    assert_int_equal(tr_cuda_get(g, g0, NULL, 0), 0);
    assert_int_equal(be->ops->load(be, m->params, m->bufs, NULL), 0);
    double lc, ac, lg, ag;
    tr_evaluate(&cpu, &ds, &lc, &ac);
    tr_evaluate(be, &ds, &lg, &ag);
    printf("evaluation of %d rows: loss cpu %.7f gpu %.7f, accuracy cpu %.4f gpu %.4f\n", ds.n, lc, lg, ac, ag);
    assert_float_equal(lg, lc, 1e-5 * fabs(lc));
    assert_true(fabs(ag - ac) <= 1.0 / ds.n + 1e-12);   /* an argmax may flip on a near tie */
    assert_int_equal(tr_cuda_get(g, g1, NULL, 0), 0);
    assert_memory_equal(g0, g1, m->n_params * sizeof(float));
    free(g0); free(g1);
    free(ds.images); free(ds.labels);
}

static void train_compare(tr_options *o, int B, int steps)
{
    char err[256];
    tr_model *m = tr_model_from_options(o, B, err, sizeof err);
    assert_non_null(m);
    tr_backend be;
    int rc = tr_backend_select(&be, TR_DEV_CUDA, "cuda", m, err, sizeof err);
    if (rc) fprintf(stderr, "cuda backend: %s\n", err);
    assert_int_equal(rc, 0);
    tr_optim oc, og;
    assert_int_equal(tr_optim_init(&oc, o, m->n_params), 0);
    assert_int_equal(tr_optim_init(&og, o, m->n_params), 0);
    assert_int_equal(tr_backend_load(&be, &og), 0);
    size_t nx = (size_t)B * tr_shape_size(m->in_shape);
    float *x = fmalloc(nx);
    int32_t *y = calloc((size_t)B, sizeof *y);
    assert_non_null(y);
    int bad = 0;
    for (int s = 0; s < steps; s++) {
        fill(x, nx, 0.0f, 1.0f);
        for (int i = 0; i < B; i++) y[i] = (int32_t)(frand(0, 10) * 0.999f);
        tr_layer_ctx c = {.train = 1, .seed = o->seed, .step = s, .row_base = (int64_t)s * B};
        memcpy(m->act[0], x, nx * sizeof(float));
        int hc, hg;
        double lc = tr_model_step(m, y, B, B, &c, NULL, NULL, &hc), lg;
        if (o->clip_norm > 0) tr_grad_clip(m->grads, m->n_params, o->clip_norm);
        tr_optim_step(&oc, m->params, m->grads, (float)o->lr);
        assert_int_equal(tr_backend_step(&be, x, y, B, B, &c, NULL, NULL, &lg, &hg), 0);
        if (o->clip_norm > 0) assert_int_equal(tr_backend_clip(&be, o->clip_norm, NULL), 0);
        assert_int_equal(tr_backend_optim_step(&be, &og, 0, (float)o->lr), 0);
        printf("%s step %d: loss cpu %.7f gpu %.7f, hits %d/%d\n", o->model, s, lc, lg, hc, hg);
        if (fabs(lg - lc) > 1e-4 * fabs(lc)) bad++;
    }
    float *pg = fmalloc(m->n_params), *bg = fmalloc(m->n_bufs);
    assert_int_equal(be.ops->store(&be, pg, bg, &og), 0);
    for (int i = 0; i < m->n_layers; i++) {
        tr_layer *l = &m->layers[i];
        if (l->param_count) {
            bad += !close_norm("params after training", i, pg + l->param_off, m->params + l->param_off,
                               l->param_count, 1e-3);
            if (oc.n_state)
                bad += !close_norm("momentum after training", i, og.state + l->param_off,
                                   oc.state + l->param_off, l->param_count, 1e-3);
        }
        if (l->buf_count)
            bad += !close_norm("BN buffers after training", i, bg + l->buf_off, m->bufs + l->buf_off,
                               l->buf_count, 1e-3);
    }
    assert_int_equal(bad, 0);
    eval_compare(m, &be);
    free(pg); free(bg); free(x); free(y);
    tr_optim_free(&oc);
    tr_optim_free(&og);
    tr_backend_close(&be);
    tr_model_free(m);
}

static void test_mlp_training_matches_cpu(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    o.hidden[0] = 128; o.hidden[1] = 64; o.n_hidden = 2;
    o.batch_norm = 1;
    o.dropout = 0.2;
    snprintf(o.optimizer, sizeof o.optimizer, "sgd");
    o.momentum = 0.9;
    o.nesterov = 1;
    o.lr = 0.05;
    train_compare(&o, 64, 5);
}

static void test_cnn_training_matches_cpu(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    snprintf(o.model, sizeof o.model, "cnn");
    o.channels[0] = 8; o.channels[1] = 16; o.n_channels = 2;
    o.fc = 32;
    o.batch_norm = 1;
    o.dropout = 0.25;
    snprintf(o.optimizer, sizeof o.optimizer, "sgd");
    o.momentum = 0.9;
    o.weight_decay = 5e-4;
    o.clip_norm = 1.0;
    o.lr = 0.02;
    train_compare(&o, 32, 5);
}

int main(void)
{
    g_have_gpu = tr_cuda_probe(g_why, sizeof g_why);
    const struct CMUnitTest always[] = {
        cmocka_unit_test(test_device_select),
        cmocka_unit_test(test_cuda_new),
    };
    if (cmocka_run_group_tests_name("device selection", always, NULL, NULL)) return 1;
    if (!g_have_gpu) {
        printf("skipped: no usable CUDA GPU (%s); only the device-selection checks ran\n", g_why);
        return 77;
    }
    printf("GPU: %s\n", g_why);
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_layers_match_cpu),
        cmocka_unit_test(test_optim_bit_identical),
        cmocka_unit_test(test_step_matches_cpu),
        cmocka_unit_test(test_mlp_training_matches_cpu),
        cmocka_unit_test(test_cnn_training_matches_cpu),
    };
    return cmocka_run_group_tests_name("CUDA vs CPU", gpu, NULL, NULL);
}

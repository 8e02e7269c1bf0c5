/*
 * test_trainer_layers.c — every layer's backward against central finite
 * differences of its forward (table-driven), softmax cross-entropy, and
 * the model's gradient hand-off contract (callback order and coverage).
 *
 * Loss used for a layer: L = sum_i y_i * r_i with fixed random r, so
 * dL/dy = r. Tolerance: |analytic - numeric| <= 5e-3 + 2e-2 |numeric|
 * with eps = 1e-2 in float32 (inputs are kept away from ReLU kinks and
 * max-pool ties, where the derivative is undefined).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "trainer/layer.h"
#include "trainer/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gc_case {
    const char   *name;
    tr_layer_spec spec;
    tr_shape      in;
    int           B;
    int           train;
} gc_case;

static const gc_case cases[] = {
    {"dense", {.kind = TR_DENSE, .out = 5}, {7, 1, 1}, 3, 1},
    {"dense-from-image", {.kind = TR_DENSE, .out = 4}, {2, 3, 3}, 2, 1},
    {"conv2d-pad1", {.kind = TR_CONV2D, .out = 3, .k = 3, .pad = 1}, {2, 5, 5}, 2, 1},
    {"conv2d-pad0", {.kind = TR_CONV2D, .out = 2, .k = 2, .pad = 0}, {3, 4, 5}, 3, 1},
    {"maxpool", {.kind = TR_MAXPOOL, .k = 2}, {2, 4, 6}, 2, 1},
    {"relu", {.kind = TR_RELU}, {3, 2, 2}, 2, 1},
    {"dropout", {.kind = TR_DROPOUT, .p = 0.4f}, {10, 1, 1}, 4, 1},
    {"dropout-eval", {.kind = TR_DROPOUT, .p = 0.4f}, {10, 1, 1}, 4, 0},
    {"batchnorm-dense", {.kind = TR_BATCHNORM}, {4, 1, 1}, 5, 1},
    {"batchnorm-conv", {.kind = TR_BATCHNORM}, {3, 3, 3}, 2, 1},
    {"flatten", {.kind = TR_FLATTEN}, {2, 3, 2}, 2, 1},
};

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 65535.0f * 2.0f - 1.0f;
}

typedef struct lay {
    tr_layer l;
    float *p, *g, *bufs, *x, *y, *dy, *dx, *r, *scratch;
    size_t nin, nout;
    tr_layer_ctx c;
    int B;
} lay;

static void lay_new(lay *L, const gc_case *k)
{
    memset(L, 0, sizeof *L);
    assert_int_equal(tr_layer_setup(&L->l, &k->spec, k->in), 0);
    L->B = k->B;
    L->nin = tr_shape_size(L->l.in) * k->B;
    L->nout = tr_shape_size(L->l.out) * k->B;
    L->p = calloc(L->l.param_count + 1, 4);
    L->g = calloc(L->l.param_count + 1, 4);
    L->bufs = calloc(L->l.buf_count + 1, 4);
    L->x = calloc(L->nin, 4);
    L->dx = calloc(L->nin, 4);
    L->y = calloc(L->nout, 4);
    L->dy = calloc(L->nout, 4);
    L->r = calloc(L->nout, 4);
    L->scratch = calloc(tr_layer_scratch_floats(&L->l, k->B) + 1, 4);
    L->l.col = L->scratch;
    L->l.argmax = (int32_t *)L->scratch;
    L->l.xhat = L->scratch;
    L->l.mask = (uint8_t *)L->scratch;
    tr_layer_init(&L->l, L->p, L->bufs, 42);
    unsigned s = 7;
    for (size_t i = 0; i < L->l.param_count; i++) L->p[i] += 0.3f * frand(&s);   /* non-trivial gamma/beta/bias */
    for (size_t i = 0; i < L->nin; i++) {
        float v = frand(&s);
        if (k->spec.kind == TR_MAXPOOL) {   /* distinct values 0.05 apart: no ties within eps */
            L->x[i] = 0.05f * (float)((i * 7919u) % L->nin) - 1.0f;
            continue;
        }
        /* away from 0 (ReLU kink) and, by distinct magnitudes, from max-pool ties */
        L->x[i] = (v >= 0 ? 0.1f : -0.1f) + v + 0.013f * (float)(i % 17);
    }
    for (size_t i = 0; i < L->nout; i++) L->r[i] = frand(&s);
    L->c = (tr_layer_ctx){.train = k->train, .seed = 99, .step = 3, .index = 1};
}

static void lay_free(lay *L)
{
    free(L->p); free(L->g); free(L->bufs); free(L->x); free(L->dx);
    free(L->y); free(L->dy); free(L->r); free(L->scratch);
}

static double lay_loss(lay *L)
{
    tr_layer_forward(&L->l, &L->c, L->p, L->bufs, L->x, L->y, L->B);
    double s = 0;
    for (size_t i = 0; i < L->nout; i++) s += (double)L->y[i] * L->r[i];
    return s;
}

static int close_enough(double a, double n)
{
    return fabs(a - n) <= 5e-3 + 2e-2 * fabs(n);
}

static void check_one(const gc_case *k)
{
    lay L;
    lay_new(&L, k);
    lay_loss(&L);
    memcpy(L.dy, L.r, L.nout * 4);
    tr_layer_backward(&L.l, &L.c, L.p, L.x, L.y, L.dy, L.dx, L.g, L.B);
    float *dx = malloc(L.nin * 4), *g = malloc((L.l.param_count + 1) * 4);
    memcpy(dx, L.dx, L.nin * 4);
    memcpy(g, L.g, L.l.param_count * 4);
    const float eps = 1e-2f;
    int bad = 0;
    for (size_t i = 0; i < L.nin; i++) {
        float keep = L.x[i];
        L.x[i] = keep + eps; double lp = lay_loss(&L);
        L.x[i] = keep - eps; double lm = lay_loss(&L);
        L.x[i] = keep;
        double num = (lp - lm) / (2 * eps);
        if (!close_enough(dx[i], num)) {
            if (bad++ < 5) fprintf(stderr, "%s: dx[%zu] analytic %g numeric %g\n", k->name, i, dx[i], num);
        }
    }
    for (size_t i = 0; i < L.l.param_count; i++) {
        float keep = L.p[i];
        L.p[i] = keep + eps; double lp = lay_loss(&L);
        L.p[i] = keep - eps; double lm = lay_loss(&L);
        L.p[i] = keep;
        double num = (lp - lm) / (2 * eps);
        if (!close_enough(g[i], num)) {
            if (bad++ < 10) fprintf(stderr, "%s: dparam[%zu] analytic %g numeric %g\n", k->name, i, g[i], num);
        }
    }
    if (bad) fprintf(stderr, "%s: %d mismatches\n", k->name, bad);
    assert_int_equal(bad, 0);
    free(dx);
    free(g);
    lay_free(&L);
}

static void test_gradcheck_all_layers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_one(&cases[i]);
}

static void test_dense_forward_values(void **state)
{
    (void)state;
    /* y = x W^T + b on a hand-computed case */
    tr_layer_spec s = {.kind = TR_DENSE, .out = 2};
    tr_layer l;
    assert_int_equal(tr_layer_setup(&l, &s, (tr_shape){3, 1, 1}), 0);
    assert_int_equal(l.param_count, 8);
    float p[8] = {1, 2, 3, 4, 5, 6, 0.5f, -1}, x[3] = {1, 0, -1}, y[2];
    tr_layer_ctx c = {.train = 1};
    tr_layer_forward(&l, &c, p, NULL, x, y, 1);
    assert_float_equal(y[0], 1 - 3 + 0.5f, 1e-6);
    assert_float_equal(y[1], 4 - 6 - 1, 1e-6);
}

static void test_dropout_statistics(void **state)
{
    (void)state;
    /* keep rate close to 1-p, kept values scaled by 1/(1-p), same mask for same (seed, step, row) */
    tr_layer_spec s = {.kind = TR_DROPOUT, .p = 0.25f};
    tr_layer l;
    assert_int_equal(tr_layer_setup(&l, &s, (tr_shape){1000, 1, 1}), 0);
    uint8_t mask[4000];
    l.col = (float *)mask;
    l.mask = mask;
    float *x = malloc(4000 * 4), *y1 = malloc(4000 * 4), *y2 = malloc(4000 * 4);
    for (int i = 0; i < 4000; i++) x[i] = 1.0f;
    tr_layer_ctx c = {.train = 1, .seed = 5, .step = 9};
    tr_layer_forward(&l, &c, NULL, NULL, x, y1, 4);
    tr_layer_forward(&l, &c, NULL, NULL, x, y2, 4);
    assert_memory_equal(y1, y2, 4000 * 4);
    int kept = 0;
    for (int i = 0; i < 4000; i++) {
        if (y1[i] != 0.0f) { kept++; assert_float_equal(y1[i], 1.0f / 0.75f, 1e-6); }
    }
    assert_in_range(kept, 2850, 3150);
    c.step = 10;
    tr_layer_forward(&l, &c, NULL, NULL, x, y2, 4);
    assert_memory_not_equal(y1, y2, 4000 * 4);
    free(x); free(y1); free(y2);
}

static void test_softmax_xent(void **state)
{
    (void)state;
    float z[6] = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f}, d[6];
    int32_t y[2] = {1, 0};
    int hits;
    double loss = tr_softmax_xent(z, y, 2, 3, d, 2, &hits);
    double l0 = log(exp(1.0) + exp(2.0) + exp(0.5)) - 2.0, l1 = log(exp(-1.0) + exp(0.0) + exp(3.0)) + 1.0;
    assert_float_equal(loss, (l0 + l1) / 2, 1e-6);
    assert_int_equal(hits, 1);
    /* gradient by finite differences */
    for (int i = 0; i < 6; i++) {
        float keep = z[i], eps = 1e-3f;
        z[i] = keep + eps; double lp = tr_softmax_xent(z, y, 2, 3, NULL, 2, NULL);
        z[i] = keep - eps; double lm = tr_softmax_xent(z, y, 2, 3, NULL, 2, NULL);
        z[i] = keep;
        assert_float_equal(d[i], (lp - lm) / (2 * eps), 1e-3);
    }
}

typedef struct cb_log { size_t off[TR_MAX_LAYERS], cnt[TR_MAX_LAYERS]; int n; } cb_log;

static void on_grad(void *ctx, size_t off, size_t cnt)
{
    cb_log *g = ctx;
    g->off[g->n] = off;
    g->cnt[g->n] = cnt;
    g->n++;
}

static void test_model_grad_callback_and_check(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    snprintf(o.model, sizeof o.model, "cnn");
    o.channels[0] = 2; o.channels[1] = 3; o.n_channels = 2; o.fc = 8; o.batch_norm = 1;
    char err[256];
    tr_model *m = tr_model_from_options(&o, 4, err, sizeof err);
    assert_non_null(m);
    unsigned s = 3;
    for (size_t i = 0; i < 4 * 784; i++) m->act[0][i] = frand(&s);
    int32_t y[4] = {1, 3, 5, 7};
    tr_layer_ctx c = {.train = 1, .seed = 1};
    cb_log g = {.n = 0};
    tr_model_step(m, y, 4, 4, &c, on_grad, &g, NULL);
    /* last layer first, contiguous, covering every parameter exactly once */
    size_t end = m->n_params;
    for (int i = 0; i < g.n; i++) {
        assert_int_equal(g.off[i] + g.cnt[i], end);
        end = g.off[i];
    }
    assert_int_equal(end, 0);
    /* whole-model gradient of a few parameters of each layer vs finite differences */
    float *grads = malloc(m->n_params * 4);
    memcpy(grads, m->grads, m->n_params * 4);
    int bad = 0;
    for (int li = 0; li < m->n_layers; li++) {
        tr_layer *l = &m->layers[li];
        for (size_t j = 0; j < l->param_count; j += 1 + l->param_count / 5) {
            size_t i = l->param_off + j;
            float keep = m->params[i], eps = 3e-4f;   /* BN makes layer-0 weights strongly curved: small eps */
            m->params[i] = keep + eps;
            tr_model_forward(m, 0, m->n_layers, 4, &c);
            double lp = tr_softmax_xent(m->act[m->n_layers], y, 4, 10, NULL, 4, NULL);
            m->params[i] = keep - eps;
            tr_model_forward(m, 0, m->n_layers, 4, &c);
            double lm = tr_softmax_xent(m->act[m->n_layers], y, 4, 10, NULL, 4, NULL);
            m->params[i] = keep;
            double num = (lp - lm) / (2 * eps);
            if (fabs(grads[i] - num) > 2e-3 + 5e-2 * fabs(num)) {
                if (bad++ < 5) fprintf(stderr, "layer %d (%s) param %zu: %g vs %g\n", li, tr_layer_name(l->kind), j,
                                       grads[i], num);
            }
        }
    }
    assert_int_equal(bad, 0);
    free(grads);
    tr_model_free(m);
}

static void test_model_range_equals_whole(void **state)
{
    (void)state;
    /* forward [0,k) then [k,L) equals forward [0,L): the pipeline contract */
    tr_options o;
    tr_options_defaults(&o);
    char err[256];
    tr_model *a = tr_model_from_options(&o, 3, err, sizeof err), *b = tr_model_from_options(&o, 3, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    unsigned s = 11;
    for (size_t i = 0; i < 3 * 784; i++) a->act[0][i] = b->act[0][i] = frand(&s);
    tr_layer_ctx c = {.train = 1};
    tr_model_forward(a, 0, a->n_layers, 3, &c);
    tr_model_forward(b, 0, 2, 3, &c);
    /* a second stage receives act[2] over the wire: pass it through a copy */
    size_t n2 = tr_shape_size(b->layers[2].in) * 3;
    float *wire = malloc(n2 * 4);
    memcpy(wire, b->act[2], n2 * 4);
    memset(b->act[2], 0, n2 * 4);
    memcpy(b->act[2], wire, n2 * 4);
    free(wire);
    tr_model_forward(b, 2, b->n_layers, 3, &c);
    assert_memory_equal(a->act[a->n_layers], b->act[b->n_layers], 3 * 10 * 4);
    tr_model_free(a);
    tr_model_free(b);
}

static void test_bad_specs(void **state)
{
    (void)state;
    tr_layer l;
    tr_layer_spec s1 = {.kind = TR_CONV2D, .out = 4, .k = 7, .pad = 0};
    assert_int_not_equal(tr_layer_setup(&l, &s1, (tr_shape){1, 5, 5}), 0);
    tr_layer_spec s2 = {.kind = TR_DROPOUT, .p = 1.0f};
    assert_int_not_equal(tr_layer_setup(&l, &s2, (tr_shape){4, 1, 1}), 0);
    tr_layer_spec s3 = {.kind = TR_DENSE, .out = 0};
    assert_int_not_equal(tr_layer_setup(&l, &s3, (tr_shape){4, 1, 1}), 0);
    char err[256];
    tr_layer_spec conv = {.kind = TR_CONV2D, .out = 2, .k = 3, .pad = 1};
    assert_null(tr_model_new((tr_shape){1, 8, 8}, &conv, 1, 2, 1, err, sizeof err));   /* not a vector at the end */
    assert_non_null(strstr(err, "vector"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_all_layers),
        cmocka_unit_test(test_dense_forward_values),
        cmocka_unit_test(test_dropout_statistics),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_model_grad_callback_and_check),
        cmocka_unit_test(test_model_range_equals_whole),
        cmocka_unit_test(test_bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

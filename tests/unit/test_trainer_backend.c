/*
 * test_trainer_backend.c — the compute-backend table (backend.h) on the
 * CPU, and the shared dropout hash (dropout_hash.h):
 *   - a step through the backend driver (tr_backend_step) is bit for bit
 *     the reference written out by hand with layer.c's kernels (forward,
 *     softmax cross-entropy, backward with no input gradient below the
 *     first layer with parameters), on a CNN with every layer kind;
 *   - the gradient callback: last layer first, only layers with
 *     parameters, each slice once;
 *   - inference (tr_backend_infer) is the eval-mode forward and loss;
 *   - the optimizer step over a slice (pipeline stages) is tr_optim_step
 *     on that slice, and a slice past the end is refused;
 *   - selection: TR_DEV_CPU opens "cpu"; without a usable GPU, "auto"
 *     falls back to the CPU and "cuda" fails naming why;
 *   - the hash's values are pinned (a changed constant would silently
 *     change every model's initial weights and every mask), and the mask
 *     the CPU dropout layer draws is tr_dropout_keep's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "trainer/backend.h"
#include "trainer/device.h"
#include "trainer/dropout_hash.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_rng = 4242u;

static float frand(void)
{
    g_rng = g_rng * 1103515245u + 12345u;
    return (float)((g_rng >> 8) & 0xFFFFFF) / 16777216.0f;
}

static const tr_layer_spec cnn[] = {
    {.kind = TR_CONV2D, .out = 4, .k = 3, .pad = 1},   /* (B, 1, 8, 8) -> (B, 4, 8, 8) */
    {.kind = TR_BATCHNORM},
    {.kind = TR_RELU},
    {.kind = TR_MAXPOOL, .k = 2},                      /* -> (B, 4, 4, 4) */
    {.kind = TR_FLATTEN},
    {.kind = TR_DROPOUT, .p = 0.3f},
    {.kind = TR_DENSE, .out = 12},
    {.kind = TR_RELU},
    {.kind = TR_DENSE, .out = 10},
};
enum { NL = sizeof cnn / sizeof cnn[0], B = 6 };

static tr_model *two_models(tr_model **twin)
{
    char err[256];
    tr_model *m = tr_model_new((tr_shape){1, 8, 8}, cnn, NL, B, 5, err, sizeof err);
    *twin = tr_model_new((tr_shape){1, 8, 8}, cnn, NL, B, 5, err, sizeof err);
    assert_non_null(m);
    assert_non_null(*twin);
    for (size_t i = 0; i < (size_t)B * 64; i++) m->act[0][i] = (*twin)->act[0][i] = frand();
    return m;
}

/* The reference step, written out with the layer kernels. */
static double reference_step(tr_model *m, const int32_t *y, const tr_layer_ctx *c, int *hits)
{
    tr_layer_ctx lc = *c;
    int L = m->n_layers;
    for (int i = 0; i < L; i++) {
        tr_layer *l = &m->layers[i];
        lc.index = i;
        tr_layer_forward(l, &lc, m->params + l->param_off, m->bufs + l->buf_off, m->act[i], m->act[i + 1], B);
    }
    double loss = tr_softmax_xent(m->act[L], y, B, m->n_classes, m->dact[L], B, hits);
    for (int i = L - 1; i >= 0; i--) {
        tr_layer *l = &m->layers[i];
        lc.index = i;
        tr_layer_backward(l, &lc, m->params + l->param_off, m->act[i], m->act[i + 1], m->dact[i + 1],
                          i > 0 ? m->dact[i] : NULL, m->grads + l->param_off, B);
    }
    return loss;
}

typedef struct seen { int n; size_t off[NL], cnt[NL]; } seen;

static void on_grad(void *ctx, size_t off, size_t cnt)
{
    seen *s = ctx;
    assert_true(s->n < NL);
    s->off[s->n] = off;
    s->cnt[s->n] = cnt;
    s->n++;
}

static void test_step_is_the_reference(void **state)
{
    (void)state;
    tr_model *ref, *m = two_models(&ref);
    int32_t y[B];
    for (int i = 0; i < B; i++) y[i] = (i * 3) % 10;
    tr_layer_ctx c = {.train = 1, .seed = 9, .step = 4, .row_base = 12};
    tr_backend be;
    tr_backend_cpu(&be, m);
    assert_string_equal(be.ops->name, "cpu");
    for (int s = 0; s < 2; s++) {
        seen got = {0};
        double loss = -1;
        int hits = -1, hr = -2;
        assert_int_equal(tr_backend_step(&be, m->act[0], y, B, B, &c, on_grad, &got, &loss, &hits), 0);
        double lr = reference_step(ref, y, &c, &hr);
        assert_memory_equal(&loss, &lr, sizeof loss);
        assert_int_equal(hits, hr);
        assert_memory_equal(m->grads, ref->grads, m->n_params * sizeof(float));
        assert_memory_equal(m->bufs, ref->bufs, m->n_bufs * sizeof(float));
        assert_memory_equal(m->act[NL], ref->act[NL], (size_t)B * 10 * sizeof(float));
        /* the callback: layers 8, 6, 1, 0 (dense, dense, BN, conv), each slice once */
        static const int want[] = {8, 6, 1, 0};
        assert_int_equal(got.n, 4);
        for (int k = 0; k < 4; k++) {
            assert_int_equal(got.off[k], m->layers[want[k]].param_off);
            assert_int_equal(got.cnt[k], m->layers[want[k]].param_count);
        }
        c.step++;
    }
    tr_backend_close(&be);
    tr_model_free(m);
    tr_model_free(ref);
}

static void test_infer_is_eval_forward(void **state)
{
    (void)state;
    tr_model *ref, *m = two_models(&ref);
    int32_t y[B];
    for (int i = 0; i < B; i++) y[i] = i % 10;
    tr_backend be;
    tr_backend_cpu(&be, m);
    double loss;
    int hits;
    assert_int_equal(tr_backend_infer(&be, m->act[0], y, B, &loss, &hits), 0);
    tr_model_infer(ref, B);
    int hr;
    double lr = tr_softmax_xent(ref->act[NL], y, B, ref->n_classes, NULL, B, &hr);
    assert_memory_equal(&loss, &lr, sizeof loss);
    assert_int_equal(hits, hr);
    assert_memory_equal(m->act[NL], ref->act[NL], (size_t)B * 10 * sizeof(float));
    assert_int_equal(tr_backend_infer(&be, m->act[0], y, B + 1, &loss, &hits), HF_EINVAL);
    tr_model_free(m);
    tr_model_free(ref);
}

static void test_optim_step_on_a_slice(void **state)
{
    (void)state;
    tr_model *ref, *m = two_models(&ref);
    tr_options o;
    tr_options_defaults(&o);
    o.weight_decay = 0.01;
    size_t off = m->layers[6].param_off, n = m->layers[6].param_count;
    for (size_t i = 0; i < m->n_params; i++) m->grads[i] = ref->grads[i] = frand() - 0.5f;
    tr_optim a, b;
    assert_int_equal(tr_optim_init(&a, &o, n), 0);
    assert_int_equal(tr_optim_init(&b, &o, n), 0);
    tr_backend be;
    tr_backend_cpu(&be, m);
    for (int s = 0; s < 3; s++) {
        assert_int_equal(tr_backend_optim_step(&be, &a, off, 0.01f), 0);
        tr_optim_step(&b, ref->params + off, ref->grads + off, 0.01f);
    }
    assert_memory_equal(m->params, ref->params, m->n_params * sizeof(float));
    assert_memory_equal(a.state, b.state, a.n_state * sizeof(float));
    assert_int_equal(tr_backend_optim_step(&be, &a, m->n_params - n + 1, 0.01f), HF_EINVAL);
    tr_optim_free(&a);
    tr_optim_free(&b);
    tr_model_free(m);
    tr_model_free(ref);
}

static void test_select(void **state)
{
    (void)state;
    tr_model *ref, *m = two_models(&ref);
    char err[256] = "", why[256];
    tr_backend be;
    assert_int_equal(tr_backend_select(&be, TR_DEV_CPU, "cpu", m, err, sizeof err), 0);
    assert_string_equal(be.ops->name, "cpu");
    assert_true(be.m == m);
    tr_backend_close(&be);
    if (tr_cuda_probe(why, sizeof why)) {
        printf("a GPU is usable (%s): the fallback cases are for test_trainer_cuda's machines\n", why);
    } else {
        assert_int_equal(tr_backend_select(&be, TR_DEV_CUDA, "auto", m, err, sizeof err), 0);
        assert_string_equal(be.ops->name, "cpu");
        tr_backend_close(&be);
        assert_int_not_equal(tr_backend_select(&be, TR_DEV_CUDA, "cuda", m, err, sizeof err), 0);
        assert_non_null(strstr(err, "no usable CUDA GPU"));
    }
    tr_model_free(m);
    tr_model_free(ref);
}

static void test_hash_pinned_and_shared(void **state)
{
    (void)state;
    assert_true(tr_hash64_inline(1, 2, 3, 4) == 17011030238951156634ull);
    assert_true(tr_hash64_inline(0, 0, 0, 0) == 5349656008589660885ull);
    assert_true(tr_hash64(1, 2, 3, 4) == 17011030238951156634ull);
    unsigned bits = 0;
    uint64_t rs = tr_dropout_row_seed(7, 3, 4, 100);
    for (int i = 0; i < 32; i++) bits |= (unsigned)tr_dropout_keep(rs, (size_t)i, 0.5f) << i;
    assert_int_equal(bits, 1974084998u);
    /* the CPU layer's mask is the header's */
    tr_layer_spec sp = {.kind = TR_DROPOUT, .p = 0.4f};
    tr_layer l;
    assert_int_equal(tr_layer_setup(&l, &sp, (tr_shape){16, 1, 1}), 0);
    uint8_t mask[3 * 16];
    float x[3 * 16], y[3 * 16];
    for (int i = 0; i < 48; i++) x[i] = 1.0f;
    l.col = (float *)mask;
    tr_layer_ctx c = {.train = 1, .seed = 11, .step = 5, .index = 2, .row_base = 40};
    tr_layer_forward(&l, &c, NULL, NULL, x, y, 3);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 16; i++)
            assert_int_equal(mask[r * 16 + i], tr_dropout_keep(tr_dropout_row_seed(11, 5, 2, 40 + r), (size_t)i, 0.4f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_is_the_reference),
        cmocka_unit_test(test_infer_is_eval_forward),
        cmocka_unit_test(test_optim_step_on_a_slice),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_hash_pinned_and_shared),
    };
    return cmocka_run_group_tests_name("compute backend", tests, NULL, NULL);
}

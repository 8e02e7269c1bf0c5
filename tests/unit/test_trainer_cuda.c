/*
 * test_trainer_cuda.c — the CUDA backend against the CPU reference.
 *
 * For an MLP (flatten, dense, relu, dense, relu, dense) on a batch of 64
 * random inputs: logits, loss, hits and every parameter gradient from
 * tr_cuda_step must match tr_model_step within 1e-4 absolute + 1e-3
 * relative (FP32 sgemm on both sides; summation order differs). Without a
 * usable GPU (or a CUDA build) the test says why and exits 77 (skipped).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "trainer/device.h"
#include "trainer/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_cuda_matches_cpu(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    o.hidden[0] = 96; o.hidden[1] = 48; o.n_hidden = 2;
    char err[256];
    int B = 64;
    tr_model *m = tr_model_from_options(&o, B, err, sizeof err);
    assert_non_null(m);
    tr_cuda *g = tr_cuda_new(m, err, sizeof err);
    if (!g) fprintf(stderr, "tr_cuda_new: %s\n", err);
    assert_non_null(g);
    unsigned s = 5;
    for (int i = 0; i < B * 784; i++) { s = s * 1103515245u + 12345u; m->act[0][i] = (float)((s >> 9) & 0xFFFF) / 32768.0f - 1.0f; }
    int32_t y[64];
    for (int i = 0; i < B; i++) y[i] = (i * 7) % 10;
    float *x = malloc((size_t)B * 784 * 4), *gg = malloc(m->n_params * 4), *lg = malloc((size_t)B * 10 * 4);
    memcpy(x, m->act[0], (size_t)B * 784 * 4);
    double lg_loss;
    int lg_hits;
    assert_int_equal(tr_cuda_step(g, m->params, x, y, B, B, gg, lg, &lg_loss, &lg_hits), 0);
    tr_layer_ctx c = {.train = 1};
    int hits;
    double loss = tr_model_step(m, y, B, B, &c, NULL, NULL, &hits);
    assert_float_equal(lg_loss, loss, 1e-4 + 1e-4 * fabs(loss));
    assert_int_equal(lg_hits, hits);
    int bad = 0;
    for (int i = 0; i < B * 10; i++)
        if (fabsf(lg[i] - m->act[m->n_layers][i]) > 1e-4f + 1e-3f * fabsf(m->act[m->n_layers][i])) bad++;
    for (size_t i = 0; i < m->n_params; i++)
        if (fabsf(gg[i] - m->grads[i]) > 1e-4f + 1e-3f * fabsf(m->grads[i])) {
            if (bad++ < 5) fprintf(stderr, "grad %zu: cuda %g cpu %g\n", i, gg[i], m->grads[i]);
        }
    assert_int_equal(bad, 0);
    free(x); free(gg); free(lg);
    tr_cuda_free(g);
    tr_model_free(m);
}

static void test_cuda_rejects_unsupported(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    snprintf(o.model, sizeof o.model, "cnn");
    char err[256];
    tr_model *m = tr_model_from_options(&o, 4, err, sizeof err);
    assert_non_null(m);
    assert_null(tr_cuda_new(m, err, sizeof err));
    assert_non_null(strstr(err, "conv2d"));
    tr_model_free(m);
}

int main(void)
{
    char why[256];
    if (!tr_cuda_probe(why, sizeof why)) {
        printf("skipped: no usable CUDA GPU (%s)\n", why);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_matches_cpu),
        cmocka_unit_test(test_cuda_rejects_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

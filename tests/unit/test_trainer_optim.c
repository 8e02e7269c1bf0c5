/*
 * test_trainer_optim.c — optimizer updates against the formulas written out
 * in double here (PyTorch's definitions), LR schedules, clipping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "trainer/optim.h"

#include <math.h>
#include <string.h>

static void opts(tr_options *o, const char *name)
{
    tr_options_defaults(o);
    snprintf(o->optimizer, sizeof o->optimizer, "%s", name);
}

/* Reference: three steps with changing gradients, one element at a time. */
typedef struct ref_case { const char *opt; double mu; int nesterov; double wd; } ref_case;

static void run_ref(const ref_case *rc)
{
    tr_options o;
    opts(&o, rc->opt);
    o.momentum = rc->mu;
    o.nesterov = rc->nesterov;
    o.weight_decay = rc->wd;
    /* 7 elements: the SIMD body (4 lanes) and the scalar tail both run */
    enum { N = 7 };
    tr_optim op;
    assert_int_equal(tr_optim_init(&op, &o, N), 0);
    float p[N];
    double P[N], V[N] = {0}, M[N] = {0}, S[N] = {0};
    for (int i = 0; i < N; i++) P[i] = p[i] = 0.5f * (float)(i - 3);
    double lr = 0.1, b1 = o.beta1, b2 = o.beta2, eps = o.eps;
    for (int t = 1; t <= 3; t++) {
        float gs[N];
        for (int i = 0; i < N; i++) gs[i] = 0.1f * (float)(i + 1) * (t % 2 ? 1.0f : -0.5f) + 0.05f * (float)t;
        tr_optim_step(&op, p, gs, (float)lr);
        for (int i = 0; i < N; i++) {
            double g = gs[i];
            if (!strcmp(rc->opt, "sgd")) {
                g += rc->wd * P[i];
                if (rc->mu > 0) {
                    V[i] = t == 1 ? g : rc->mu * V[i] + g;
                    P[i] -= lr * (rc->nesterov ? g + rc->mu * V[i] : V[i]);
                } else {
                    P[i] -= lr * g;
                }
            } else {
                if (!strcmp(rc->opt, "adamw")) P[i] -= lr * rc->wd * P[i];
                else g += rc->wd * P[i];
                M[i] = b1 * M[i] + (1 - b1) * g;
                S[i] = b2 * S[i] + (1 - b2) * g * g;
                double mh = M[i] / (1 - pow(b1, t)), vh = S[i] / (1 - pow(b2, t));
                P[i] -= lr * mh / (sqrt(vh) + eps);
            }
            assert_float_equal(p[i], P[i], 1e-5);
        }
    }
    assert_int_equal(op.t, 3);
    tr_optim_free(&op);
}

static void test_optimizers_match_reference(void **state)
{
    (void)state;
    static const ref_case cases[] = {
        {"sgd", 0.0, 0, 0.0}, {"sgd", 0.0, 0, 0.01}, {"sgd", 0.9, 0, 0.0}, {"sgd", 0.9, 1, 0.0},
        {"sgd", 0.9, 1, 0.05}, {"adam", 0, 0, 0.0}, {"adam", 0, 0, 0.01}, {"adamw", 0, 0, 0.01},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_ref(&cases[i]);
}

static void test_state_sizes(void **state)
{
    (void)state;
    tr_options o;
    tr_optim op;
    opts(&o, "sgd");
    o.momentum = 0;
    assert_int_equal(tr_optim_init(&op, &o, 10), 0);
    assert_int_equal(op.n_state, 0);
    tr_optim_free(&op);
    opts(&o, "adamw");
    assert_int_equal(tr_optim_init(&op, &o, 10), 0);
    assert_int_equal(op.n_state, 20);
    tr_optim_free(&op);
    opts(&o, "rmsprop");
    assert_int_equal(tr_optim_init(&op, &o, 10), HF_EINVAL);
}

static void test_schedules(void **state)
{
    (void)state;
    tr_options o;
    tr_options_defaults(&o);
    o.lr = 0.1;
    o.epochs = 10;
    /* constant */
    assert_float_equal(tr_lr_at(&o, 0, 100), 0.1, 1e-12);
    assert_float_equal(tr_lr_at(&o, 999, 100), 0.1, 1e-12);
    /* warm-up: linear over 2 epochs, reaching lr at step 199 */
    o.warmup_epochs = 2;
    assert_float_equal(tr_lr_at(&o, 0, 100), 0.1 * 1 / 200.0, 1e-12);
    assert_float_equal(tr_lr_at(&o, 99, 100), 0.1 * 100 / 200.0, 1e-12);
    assert_float_equal(tr_lr_at(&o, 199, 100), 0.1, 1e-12);
    /* cosine after warm-up: half way is lr/2, the end is min_lr */
    snprintf(o.lr_schedule, sizeof o.lr_schedule, "cosine");
    o.min_lr = 0.001;
    assert_float_equal(tr_lr_at(&o, 600, 100), 0.001 + 0.099 * 0.5, 1e-9);
    assert_float_equal(tr_lr_at(&o, 1000, 100), 0.001, 1e-9);
    assert_float_equal(tr_lr_at(&o, 5000, 100), 0.001, 1e-9);
    /* step decay */
    o.warmup_epochs = 0;
    snprintf(o.lr_schedule, sizeof o.lr_schedule, "step");
    o.step_size = 3;
    o.step_gamma = 0.5;
    assert_float_equal(tr_lr_at(&o, 299, 100), 0.1, 1e-12);
    assert_float_equal(tr_lr_at(&o, 300, 100), 0.05, 1e-12);
    assert_float_equal(tr_lr_at(&o, 650, 100), 0.025, 1e-12);
}

static void test_clip(void **state)
{
    (void)state;
    float g[2] = {3, 4};
    assert_float_equal(tr_grad_clip(g, 2, 0), 5.0, 1e-9);   /* off */
    assert_float_equal(g[0], 3, 0);
    assert_float_equal(tr_grad_clip(g, 2, 10), 5.0, 1e-9);  /* already small */
    assert_float_equal(g[1], 4, 0);
    assert_float_equal(tr_grad_clip(g, 2, 1), 5.0, 1e-9);
    assert_float_equal(tr_grad_norm(g, 2), 1.0, 1e-5);
    assert_float_equal(g[0] / g[1], 0.75, 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimizers_match_reference),
        cmocka_unit_test(test_state_sizes),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_clip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

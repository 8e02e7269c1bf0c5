/*
 * test_scheduler_search_bbob.c — the BBOB functions and problems of the
 * held-out search benchmark (bench/search/bbob.c; docs/search.md,
 * "Held-out benchmark: BBOB"): f(x_opt) = f_opt for every function,
 * dimension and instance, no sampled point below f_opt, orthonormal
 * rotations, instances determined by their seed, and every problem of the
 * suite parsing as a search space with regret 0 at its optimum. It is in
 * the scheduler's tests because the suite's spaces go through
 * search_space_parse, which the bench drives the searchers with.
 *
 * bbob.c is included, not linked: unit tests link their module's library
 * only, and the benchmark's functions belong to no module.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bench/search/bbob.c"
#include "hf_err.h"
#include "scheduler/search/search_space.h"

#include <jansson.h>
#include <stdlib.h>

static const int test_dims[] = {2, 3, 5, 10};

/* The optimum is exact to 1e-9 except f20 (Schwefel: the document's
 * constant 4.189828872724339 is rounded) and the functions whose terms are
 * not exactly 0 at x_opt in floating point (rotations applied to x). */
static double tol_of(int fid)
{
    return fid == 20 ? 1e-8 : fid == 9 || fid == 19 ? 1e-9 : 1e-12;
}

static void test_optimum(void **state)
{
    (void)state;
    bbob_problem p;
    uint64_t s = 42;
    for (int fid = 1; fid <= 24; fid++)
        for (int di = 0; di < 4; di++)
            for (int inst = 1; inst <= 4; inst++) {
                assert_int_equal(bbob_init(&p, fid, test_dims[di], inst), 0);
                double f = bbob_eval(&p, p.xopt);
                if (fabs(f - p.fopt) > tol_of(fid) * fmax(1, fabs(p.fopt)))
                    fail_msg("f%d d%d i%d: f(xopt) - fopt = %g", fid, test_dims[di], inst, f - p.fopt);
                assert_true(fabs(p.fopt) <= 1000);
                for (int i = 0; i < p.dim; i++) assert_true(fabs(p.xopt[i]) <= 5);
                /* no random point of the domain is better than the optimum */
                double x[BBOB_MAX_DIM];
                for (int k = 0; k < 200; k++) {
                    for (int i = 0; i < p.dim; i++) x[i] = -5 + 10 * rnd_u(&s);
                    if (bbob_eval(&p, x) < p.fopt - 1e-8)
                        fail_msg("f%d d%d i%d: a point below fopt", fid, test_dims[di], inst);
                }
            }
}

static void test_values(void **state)
{
    (void)state;
    bbob_problem p;
    double x[BBOB_MAX_DIM];
    /* Sphere: one unit away from x_opt in each coordinate gives D. */
    assert_int_equal(bbob_init(&p, 1, 5, 1), 0);
    for (int i = 0; i < 5; i++) x[i] = p.xopt[i] + 1;
    assert_true(fabs(bbob_eval(&p, x) - p.fopt - 5) < 1e-12);
    /* Linear slope: the optimum is at the boundary and constant beyond it. */
    assert_int_equal(bbob_init(&p, 5, 3, 2), 0);
    for (int i = 0; i < 3; i++) { assert_true(fabs(p.xopt[i]) == 5); x[i] = 2 * p.xopt[i]; }
    assert_true(fabs(bbob_eval(&p, x) - p.fopt) < 1e-12);
    /* T_osz keeps the sign and 0; T_osz(1) = 1. */
    assert_true(t_osz1(0) == 0 && fabs(t_osz1(1) - 1) < 1e-15 && t_osz1(-2) < 0);
    /* Out of range */
    assert_int_equal(bbob_init(&p, 0, 2, 1), -1);
    assert_int_equal(bbob_init(&p, 25, 2, 1), -1);
    assert_int_equal(bbob_init(&p, 1, 1, 1), -1);
    assert_int_equal(bbob_init(&p, 1, BBOB_MAX_DIM + 1, 1), -1);
}

static void test_rotations_and_determinism(void **state)
{
    (void)state;
    bbob_problem *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    assert_non_null(p); assert_non_null(q);
    for (int di = 0; di < 4; di++) {
        int D = test_dims[di];
        assert_int_equal(bbob_init(p, 15, D, 3), 0);
        for (int m = 0; m < 2; m++) {
            const double *M = m ? p->Q : p->R;
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) {
                    double dot = 0;
                    for (int k = 0; k < D; k++) dot += M[i * D + k] * M[j * D + k];
                    assert_true(fabs(dot - (i == j)) < 1e-12);
                }
        }
        assert_int_equal(bbob_init(q, 15, D, 3), 0);
        assert_memory_equal(p, q, sizeof *p);
        assert_int_equal(bbob_init(q, 15, D, 4), 0);
        assert_true(memcmp(p->xopt, q->xopt, sizeof p->xopt) != 0);
        assert_true(memcmp(p->R, q->R, sizeof p->R) != 0);
    }
    free(p); free(q);
}

/* The point of case c at its optimum, as bbob_case_regret takes it. */
static void optimum_point(const bbob_case *c, double *v)
{
    for (int j = 0; j < c->nparam; j++) v[j] = NAN;
    if (c->kind == BBOB_COND) {
        v[0] = 0;
        for (int i = 0; i < c->dim; i++) v[1 + i] = c->a.xopt[i];
        return;
    }
    for (int i = 0; i < c->dim; i++) {
        v[i] = c->a.xopt[i];
        if (c->kind != BBOB_MIXED || i < c->n_int) continue;
        if (i < c->n_int + c->n_cat) {
            for (int k = 0; k < BBOB_CAT_LEVELS; k++)
                if (cat_levels[c->cat_perm[i][k]] == c->a.xopt[i]) v[i] = k;
        } else if (i < c->n_int + c->n_cat + c->n_log) {
            v[i] = pow(10, c->a.xopt[i] + 2);
        }
    }
}

static void test_suite(void **state)
{
    (void)state;
    bbob_case *c = malloc(sizeof *c);
    char buf[8192];
    double v[BBOB_MAX_PARAMS];
    int held = 0, tune = 0, names = 0;
    assert_non_null(c);
    assert_int_equal(bbob_suite_case(-1, c), -1);
    assert_int_equal(bbob_suite_case(bbob_suite_count(), c), -1);
    for (int k = 0; k < bbob_suite_count(); k++) {
        assert_int_equal(bbob_suite_case(k, c), 0);
        /* the split rule: even function ids, instances 3-4, are held out */
        assert_int_equal(c->heldout, c->fid % 2 == 0);
        assert_true(c->heldout ? c->instance == 3 || c->instance == 4 : c->instance == 1 || c->instance == 2);
        held += c->heldout; tune += !c->heldout;
        assert_true(bbob_case_space(c, buf, sizeof buf) > 0);
        json_error_t je;
        json_t *o = json_loads(buf, 0, &je);
        if (!o) fail_msg("%s: %s: %s", c->name, buf, je.text);
        search_space *sp = NULL;
        hf_jerr e;
        hf_jerr_clear(&e);
        if (search_space_parse(o, &sp, &e)) fail_msg("%s: %s (%s)", c->name, e.msg, e.field);
        assert_int_equal((int)sp->n, c->nparam);
        for (int j = 0; j < c->nparam; j++) {   /* the space lists parameters in v[]'s order */
            char nm[16];
            assert_int_equal(bbob_case_param(c, j, nm, sizeof nm), 0);
            assert_string_equal(sp->p[j].name, nm);
        }
        search_space_free(sp);
        json_decref(o);
        optimum_point(c, v);
        double r = bbob_case_regret(c, v);
        if (!(fabs(r) <= 1e-8 * fmax(1, fabs(c->a.fopt)))) fail_msg("%s: regret at the optimum %g", c->name, r);
        assert_true(c->budget >= 80 && c->budget <= 200);
        names += strstr(c->name, c->heldout ? "-i3" : "-i1") != NULL || strstr(c->name, c->heldout ? "-i4" : "-i2");
    }
    assert_int_equal(names, bbob_suite_count());
    assert_true(held >= 100 && tune >= 100);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimum),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_rotations_and_determinism),
        cmocka_unit_test(test_suite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

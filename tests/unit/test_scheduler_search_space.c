/*
 * test_scheduler_search_space.c — the "hyperparameters" parser (every kind,
 * conditional parameters, field-path errors), sampling, the unit-cube
 * encoding, the grid with conditions, the RNG helpers and PBT perturbation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"
#include "tests/unit/search_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static search_space *parse_ok(const char *s)
{
    json_t *o = load(s);
    search_space *sp = NULL;
    hf_jerr e;
    hf_jerr_clear(&e);
    int rc = search_space_parse(o, &sp, &e);
    if (rc) fail_msg("parse failed: %s: %s (%s)", s, e.msg, e.field);
    json_decref(o);
    return sp;
}

/* Table of rejected spaces: the field path each must name. */
static void test_parse_errors(void **state)
{
    (void)state;
    static const struct { const char *json, *field; } cases[] = {
        {"[1,2]", "hyperparameters"},
        {"{\"lr\": null}", "hyperparameters.lr"},
        {"{\"lr\": {\"min\": 1}}", "hyperparameters.lr.type"},
        {"{\"lr\": {\"type\": \"gaussian\"}}", "hyperparameters.lr.type"},
        {"{\"lr\": {\"type\": 3}}", "hyperparameters.lr.type"},
        {"{\"lr\": {\"type\": \"uniform\", \"max\": 1}}", "hyperparameters.lr.min"},
        {"{\"lr\": {\"type\": \"uniform\", \"min\": 0}}", "hyperparameters.lr.max"},
        {"{\"lr\": {\"type\": \"uniform\", \"min\": 1, \"max\": 1}}", "hyperparameters.lr.max"},
        {"{\"lr\": {\"type\": \"uniform\", \"min\": \"a\", \"max\": 1}}", "hyperparameters.lr.min"},
        {"{\"lr\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"mni\": 0}}", "hyperparameters.lr.mni"},
        {"{\"lr\": {\"type\": \"log\", \"min\": 0, \"max\": 1}}", "hyperparameters.lr.min"},
        {"{\"lr\": {\"type\": \"log\", \"min\": -1, \"max\": 1}}", "hyperparameters.lr.min"},
        {"{\"lr\": {\"type\": \"log\", \"min\": 0.1, \"max\": 1, \"log\": true}}", "hyperparameters.lr.log"},
        {"{\"h\": {\"type\": \"int\", \"min\": 1.5, \"max\": 4}}", "hyperparameters.h.min"},
        {"{\"h\": {\"type\": \"int\", \"min\": 5, \"max\": 4}}", "hyperparameters.h.max"},
        {"{\"h\": {\"type\": \"int\", \"min\": 0, \"max\": 4, \"log\": true}}", "hyperparameters.h.min"},
        {"{\"h\": {\"type\": \"int\", \"min\": 1, \"max\": 4, \"log\": 1}}", "hyperparameters.h.log"},
        {"{\"h\": {\"type\": \"int\", \"min\": 1, \"max\": 4, \"count\": 0}}", "hyperparameters.h.count"},
        {"{\"o\": {\"type\": \"categorical\"}}", "hyperparameters.o.values"},
        {"{\"o\": {\"type\": \"categorical\", \"values\": []}}", "hyperparameters.o.values"},
        {"{\"o\": {\"type\": \"categorical\", \"values\": \"sgd\"}}", "hyperparameters.o.values"},
        {"{\"o\": {\"type\": \"categorical\", \"values\": [\"a\", {}]}}", "hyperparameters.o.values[1]"},
        {"{\"o\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\", \"a\"]}}", "hyperparameters.o.values[2]"},
        {"{\"o\": {\"type\": \"categorical\", \"values\": [1], \"count\": 2}}", "hyperparameters.o.count"},
        {"{\"c\": {\"type\": \"const\"}}", "hyperparameters.c.value"},
        {"{\"bad name\": 1}", "hyperparameters.bad name"},
        {"{\"\": 1}", "hyperparameters"},
        {"{\"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": 3}}",
         "hyperparameters.m.condition"},
        {"{\"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": {\"param\": \"opt\", \"values\": [\"sgd\"]}}}",
         "hyperparameters.m.condition.param"},
        {"{\"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]},"
         " \"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": {\"param\": \"opt\", \"values\": [\"rmsprop\"]}}}",
         "hyperparameters.m.condition.values[0]"},
        {"{\"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\"]},"
         " \"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": {\"param\": \"opt\", \"values\": []}}}",
         "hyperparameters.m.condition.values"},
        {"{\"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\"]},"
         " \"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": {\"param\": \"opt\", \"values\": [\"sgd\"], \"x\": 1}}}",
         "hyperparameters.m.condition.x"},
        {"{\"lr\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
         " \"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": {\"param\": \"lr\", \"values\": [0.5]}}}",
         "hyperparameters.m.condition.param"},
        {"{\"m\": {\"type\": \"categorical\", \"values\": [1], \"condition\": {\"param\": \"m\", \"values\": [1]}}}",
         "hyperparameters.m.condition.param"},
        {"{\"a\": {\"type\": \"categorical\", \"values\": [1, 2], \"condition\": {\"param\": \"b\", \"values\": [1]}},"
         " \"b\": {\"type\": \"categorical\", \"values\": [1, 2], \"condition\": {\"param\": \"a\", \"values\": [1]}}}",
         "hyperparameters.a.condition.param"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *o = load(cases[i].json);
        search_space *sp = (search_space *)0x1;
        hf_jerr e;
        hf_jerr_clear(&e);
        int rc = search_space_parse(o, &sp, &e);
        if (rc != HF_EINVAL || strcmp(e.field, cases[i].field) != 0)
            fail_msg("case %zu %s: rc %d field \"%s\" (%s), wanted \"%s\"", i, cases[i].json, rc,
                     e.field, e.msg, cases[i].field);
        assert_null(sp);
        assert_true(e.msg[0] != '\0');
        json_decref(o);
    }
}

static void test_parse_kinds(void **state)
{
    (void)state;
    search_space *sp = parse_ok(
        "{\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 0.3},"
        " \"d\": {\"type\": \"double\", \"min\": 0, \"max\": 0.5},"
        " \"h\": {\"type\": \"int\", \"min\": 64, \"max\": 512, \"log\": true},"
        " \"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\", 3, true]},"
        " \"c\": {\"type\": \"const\", \"value\": [1, 2]},"
        " \"batch_size\": 128}");
    assert_int_equal(sp->n, 6);
    assert_string_equal(sp->p[0].name, "lr");
    assert_int_equal(sp->p[0].kind, SPACE_LOG);
    assert_int_equal(sp->p[1].kind, SPACE_UNIFORM);
    assert_int_equal(sp->p[2].kind, SPACE_INT);
    assert_true(sp->p[2].int_log);
    assert_int_equal(sp->p[3].kind, SPACE_CATEGORICAL);
    assert_int_equal(sp->p[4].kind, SPACE_CONST);
    assert_int_equal(sp->p[5].kind, SPACE_CONST);
    assert_int_equal(json_integer_value(sp->p[5].values), 128);
    assert_int_equal(search_space_find(sp, "opt"), 3);
    assert_int_equal(search_space_find(sp, "nope"), -1);
    search_space_free(sp);
    search_space_free(NULL);
}

/* A child declared before its parent is moved after it. */
static void test_conditional_order_and_sampling(void **state)
{
    (void)state;
    search_space *sp = parse_ok(
        "{\"momentum\": {\"type\": \"uniform\", \"min\": 0, \"max\": 0.99,"
        "    \"condition\": {\"param\": \"optimizer\", \"values\": [\"sgd\"]}},"
        " \"optimizer\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]},"
        " \"beta2\": {\"type\": \"log\", \"min\": 0.9, \"max\": 0.9999,"
        "    \"condition\": {\"param\": \"optimizer\", \"values\": [\"adam\"]}},"
        " \"nesterov\": {\"type\": \"categorical\", \"values\": [true, false],"
        "    \"condition\": {\"param\": \"optimizer\", \"values\": [\"sgd\"]}},"
        " \"dampening\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1,"
        "    \"condition\": {\"param\": \"nesterov\", \"values\": [false]}}}");
    assert_int_equal(sp->n, 5);
    assert_string_equal(sp->p[0].name, "optimizer");
    for (size_t i = 0; i < sp->n; i++)
        if (sp->p[i].cond_parent >= 0) assert_true((size_t)sp->p[i].cond_parent < i);
    int n_sgd = 0, n_adam = 0, n_damp = 0;
    for (uint64_t k = 0; k < 400; k++) {
        uint64_t rng = search_rng_derive(7, k);
        json_t *hp = search_space_sample(sp, &rng);
        const char *opt = json_string_value(json_object_get(hp, "optimizer"));
        assert_non_null(opt);
        if (strcmp(opt, "sgd") == 0) {
            n_sgd++;
            assert_non_null(json_object_get(hp, "momentum"));
            assert_non_null(json_object_get(hp, "nesterov"));
            assert_null(json_object_get(hp, "beta2"));
            if (json_is_false(json_object_get(hp, "nesterov"))) {
                n_damp++;
                assert_non_null(json_object_get(hp, "dampening"));
            } else {
                assert_null(json_object_get(hp, "dampening"));
            }
        } else {
            n_adam++;
            double b2 = json_real_value(json_object_get(hp, "beta2"));
            assert_true(b2 >= 0.9 && b2 <= 0.9999);
            assert_null(json_object_get(hp, "momentum"));
            assert_null(json_object_get(hp, "nesterov"));
            assert_null(json_object_get(hp, "dampening"));
        }
        /* Same (seed, n) -> same point. */
        uint64_t rng2 = search_rng_derive(7, k);
        json_t *hp2 = search_space_sample(sp, &rng2);
        assert_true(json_equal(hp, hp2));
        json_decref(hp);
        json_decref(hp2);
    }
    assert_true(n_sgd > 150 && n_adam > 150);
    assert_true(n_damp > 50 && n_damp < n_sgd);
    search_space_free(sp);
}

static void test_sampling_ranges(void **state)
{
    (void)state;
    search_space *sp = parse_ok(
        "{\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 1},"
        " \"h\": {\"type\": \"int\", \"min\": 1, \"max\": 4},"
        " \"hl\": {\"type\": \"int\", \"min\": 1, \"max\": 1000, \"log\": true},"
        " \"u\": {\"type\": \"uniform\", \"min\": -2, \"max\": 2}}");
    int hist[5] = {0}, lr_small = 0, hl_small = 0;
    double usum = 0;
    const int N = 20000;
    uint64_t rng = 12345;
    for (int k = 0; k < N; k++) {
        json_t *hp = search_space_sample(sp, &rng);
        double lr = json_real_value(json_object_get(hp, "lr"));
        json_int_t h = json_integer_value(json_object_get(hp, "h"));
        json_int_t hl = json_integer_value(json_object_get(hp, "hl"));
        double u = json_real_value(json_object_get(hp, "u"));
        assert_true(json_is_integer(json_object_get(hp, "h")));
        assert_true(lr >= 1e-4 && lr <= 1);
        assert_true(h >= 1 && h <= 4);
        assert_true(hl >= 1 && hl <= 1000);
        assert_true(u >= -2 && u <= 2);
        hist[h]++;
        if (lr < 1e-2) lr_small++;     /* half the log range */
        if (hl <= 31) hl_small++;      /* about half the log range */
        usum += u;
        json_decref(hp);
    }
    for (int h = 1; h <= 4; h++) assert_true(abs(hist[h] - N / 4) < N / 20);
    assert_true(fabs((double)lr_small / N - 0.5) < 0.03);
    assert_true(fabs((double)hl_small / N - 0.5) < 0.05);
    assert_true(fabs(usum / N) < 0.05);
    search_space_free(sp);
}

static void test_unit_roundtrip(void **state)
{
    (void)state;
    search_space *sp = parse_ok(
        "{\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 1},"
        " \"h\": {\"type\": \"int\", \"min\": 10, \"max\": 20},"
        " \"opt\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\", \"c\", \"d\"]},"
        " \"u\": {\"type\": \"uniform\", \"min\": 2, \"max\": 4}, \"k\": 5}");
    json_t *v = json_real(1e-2);
    assert_true(fabs(search_space_to_unit(&sp->p[0], v) - 0.5) < 1e-12);
    json_decref(v);
    v = search_space_from_unit(&sp->p[0], 0.25);
    assert_true(fabs(json_real_value(v) - 1e-3) < 1e-12);
    json_decref(v);
    for (int x = 10; x <= 20; x++) {
        json_t *iv = json_integer(x);
        json_t *back = search_space_from_unit(&sp->p[1], search_space_to_unit(&sp->p[1], iv));
        assert_int_equal(json_integer_value(back), x);
        json_decref(iv);
        json_decref(back);
    }
    v = json_string("c");
    assert_true(fabs(search_space_to_unit(&sp->p[2], v) - 0.625) < 1e-12);
    json_t *back = search_space_from_unit(&sp->p[2], 0.625);
    assert_true(json_equal(back, v));
    json_decref(back);
    json_decref(v);
    v = search_space_from_unit(&sp->p[2], 1.0);     /* edge maps to the last */
    assert_string_equal(json_string_value(v), "d");
    json_decref(v);
    v = search_space_from_unit(&sp->p[3], NAN);     /* garbage clamps */
    assert_true(json_real_value(v) == 2.0);
    json_decref(v);
    v = search_space_from_unit(&sp->p[4], 0.9);
    assert_int_equal(json_integer_value(v), 5);
    json_decref(v);
    search_space_free(sp);
}

/* Large log-scale integers: exp(log(v)) is off by one unit near 1e15, so
 * a value that went through to_unit must still come back as itself where
 * the scale separates it from its neighbours (up to ~2^40), and else as a
 * value at the same position (found by fuzzing, corpus regress-int-log-1e15). */
static void test_unit_roundtrip_large_ints(void **state)
{
    (void)state;
    search_space *sp = parse_ok("{\"y\": {\"type\": \"int\", \"min\": 1, \"max\": 1033333333333330, \"log\": true},"
                                " \"z\": {\"type\": \"int\", \"min\": -4000000000000, \"max\": 4000000000000}}");
    static const int64_t ys[] = {1, 2, 3, 999, 1000, 1001, 123456789, 1099511627775, 1099511627776,
                                 1033333333333330, 1033333333333329, 987654321012345, 139835554970101,
                                 141952299045001, 143010041099060};
    for (size_t i = 0; i < sizeof ys / sizeof ys[0]; i++) {
        json_t *v = json_integer(ys[i]);
        double u = search_space_to_unit(&sp->p[0], v);
        json_t *back = search_space_from_unit(&sp->p[0], u);
        if (ys[i] <= ((int64_t)1 << 40)) assert_int_equal(json_integer_value(back), ys[i]);
        assert_true(search_space_to_unit(&sp->p[0], back) == u);
        assert_true(json_integer_value(back) >= 1 && json_integer_value(back) <= 1033333333333330);
        json_decref(back);
        json_decref(v);
    }
    for (int64_t x = -4000000000000; x <= 4000000000000; x += 399999999999) {
        json_t *v = json_integer(x);
        json_t *back = search_space_from_unit(&sp->p[1], search_space_to_unit(&sp->p[1], v));
        assert_int_equal(json_integer_value(back), x);
        json_decref(back);
        json_decref(v);
    }
    search_space_free(sp);
}

static void test_grid(void **state)
{
    (void)state;
    search_space *sp = parse_ok(
        "{\"lr\": {\"type\": \"log\", \"min\": 0.001, \"max\": 0.1, \"count\": 3},"
        " \"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]},"
        " \"h\": {\"type\": \"int\", \"min\": 1, \"max\": 3}, \"b\": 64}");
    assert_int_equal(search_space_grid_size(sp, 0), 3 * 2 * 3);
    assert_int_equal(search_space_grid_size(sp, 17), 0);
    assert_int_equal(search_space_grid_size(sp, 18), 18);
    json_t *seen = json_array();
    for (uint64_t k = 0; k < 18; k++) {
        json_t *hp = search_space_grid_point(sp, k);
        assert_non_null(hp);
        assert_int_equal(json_integer_value(json_object_get(hp, "b")), 64);
        for (size_t j = 0; j < json_array_size(seen); j++)
            assert_false(json_equal(json_array_get(seen, j), hp));
        json_array_append_new(seen, hp);
    }
    assert_null(search_space_grid_point(sp, 18));
    json_t *p0 = json_array_get(seen, 0), *p17 = json_array_get(seen, 17);
    assert_true(fabs(json_real_value(json_object_get(p0, "lr")) - 0.001) < 1e-12);
    assert_true(fabs(json_real_value(json_object_get(p17, "lr")) - 0.1) < 1e-12);
    assert_true(fabs(json_real_value(json_object_get(json_array_get(seen, 6), "lr")) - 0.01) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(p0, "h")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(seen, 1), "h")), 2);
    json_decref(seen);
    search_space_free(sp);

    /* Conditional: sgd has 3 momenta, adam 2 betas -> 5 points, none repeated. */
    sp = parse_ok(
        "{\"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]},"
        " \"m\": {\"type\": \"uniform\", \"min\": 0, \"max\": 0.9, \"count\": 3,"
        "   \"condition\": {\"param\": \"opt\", \"values\": [\"sgd\"]}},"
        " \"beta\": {\"type\": \"uniform\", \"min\": 0.9, \"max\": 0.99, \"count\": 2,"
        "   \"condition\": {\"param\": \"opt\", \"values\": [\"adam\"]}}}");
    assert_int_equal(search_space_grid_size(sp, 0), 5);
    int sgd = 0;
    for (uint64_t k = 0; k < 5; k++) {
        json_t *hp = search_space_grid_point(sp, k);
        const char *o = json_string_value(json_object_get(hp, "opt"));
        if (strcmp(o, "sgd") == 0) {
            sgd++;
            assert_non_null(json_object_get(hp, "m"));
            assert_null(json_object_get(hp, "beta"));
        } else {
            assert_null(json_object_get(hp, "m"));
            assert_non_null(json_object_get(hp, "beta"));
        }
        json_decref(hp);
    }
    assert_int_equal(sgd, 3);
    search_space_free(sp);

    /* Default counts: 5 on a continuous axis, a small int range in full. */
    sp = parse_ok("{\"u\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                  " \"i\": {\"type\": \"int\", \"min\": 0, \"max\": 100}}");
    assert_int_equal(search_space_grid_size(sp, 0), 25);
    search_space_free(sp);
}

static void test_rng(void **state)
{
    (void)state;
    uint64_t a = 1, b = 1;
    for (int i = 0; i < 10; i++) assert_true(search_rng_next(&a) == search_rng_next(&b));
    assert_true(search_rng_derive(1, 0) != search_rng_derive(1, 1));
    assert_true(search_rng_derive(1, 0) != search_rng_derive(2, 0));
    assert_true(search_rng_derive(5, 9) == search_rng_derive(5, 9));
    double s = 0, s2 = 0;
    uint64_t r = 99;
    const int N = 50000;
    for (int i = 0; i < N; i++) {
        double u = search_rng_uniform(&r);
        assert_true(u >= 0 && u < 1);
        double z = search_rng_normal(&r);
        s += z; s2 += z * z;
    }
    assert_true(fabs(s / N) < 0.03);
    assert_true(fabs(s2 / N - 1) < 0.05);
}

static void test_perturb(void **state)
{
    (void)state;
    search_space *sp = parse_ok(
        "{\"lr\": {\"type\": \"log\", \"min\": 1e-4, \"max\": 1},"
        " \"h\": {\"type\": \"int\", \"min\": 1, \"max\": 8},"
        " \"opt\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\"]}}");
    json_t *hp = load("{\"lr\": 0.01, \"h\": 2, \"opt\": \"a\"}");
    uint64_t rng = 3;
    int up = 0, down = 0;
    for (int k = 0; k < 200; k++) {
        json_t *q = search_space_perturb(sp, hp, 0.0, &rng);
        double lr = json_real_value(json_object_get(q, "lr"));
        if (fabs(lr - 0.012) < 1e-12) up++;
        else if (fabs(lr - 0.008) < 1e-12) down++;
        else fail_msg("lr %g is not 0.01 * 0.8 or * 1.2", lr);
        json_int_t h = json_integer_value(json_object_get(q, "h"));
        assert_true(h == 1 || h == 3);  /* 2*0.8 and 2*1.2 round to 2: moved by 1 */
        assert_string_equal(json_string_value(json_object_get(q, "opt")), "a");
        json_decref(q);
    }
    assert_true(up > 60 && down > 60);
    json_decref(hp);
    search_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_kinds),
        cmocka_unit_test(test_conditional_order_and_sampling),
        cmocka_unit_test(test_sampling_ranges),
        cmocka_unit_test(test_unit_roundtrip),
        cmocka_unit_test(test_unit_roundtrip_large_ints),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_perturb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

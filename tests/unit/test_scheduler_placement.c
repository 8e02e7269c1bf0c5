/*
 * test_scheduler_placement.c — gang placement: all-or-nothing, packing on
 * few agents, GPU assignment, exclusion; and LTTB downsampling (pure
 * functions of the dispatcher's toolbox).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/api/downsample.h"
#include "scheduler/core/placement.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static place_agent cpu(int64_t id, int slots, int used)
{
    place_agent a;
    memset(&a, 0, sizeof a);
    a.id = id;
    a.slots = slots;
    a.slots_used = used;
    return a;
}

static place_agent gpu(int64_t id, int ngpus)
{
    place_agent a = cpu(id, ngpus, 0);
    a.ngpus = ngpus;
    for (int i = 0; i < ngpus; i++) a.gpu_index[i] = i;
    return a;
}

/* The target: a 2-worker x 2-slot trial is placed only when 4
 * slots are free, and then every worker gets its slots. */
static void test_gang_needs_four(void **state)
{
    (void)state;
    place_rank out[2];
    place_agent a[2] = {cpu(1, 2, 1), cpu(2, 2, 0)};   /* 3 free slots, but only 1 worker fits */
    assert_int_equal(placement_gang(a, 2, 2, 2, out), HF_ENOTFOUND);
    assert_int_equal(a[0].slots_used, 1);              /* nothing taken */
    assert_int_equal(a[1].slots_used, 0);
    a[0].slots_used = 0;                               /* now 4 free over two agents */
    assert_int_equal(placement_gang(a, 2, 2, 2, out), 0);
    assert_int_equal(a[0].slots_used + a[1].slots_used, 4);
    assert_int_not_equal(out[0].agent, out[1].agent);
    /* Full: the next gang does not fit at all. */
    assert_int_equal(placement_gang(a, 2, 1, 1, out), HF_ENOTFOUND);
    placement_release(a, 2, 2, 2, out);
    assert_int_equal(a[0].slots_used + a[1].slots_used, 0);
}

static void test_best_fit_single_agent(void **state)
{
    (void)state;
    place_rank out[4];
    place_agent a[3] = {cpu(1, 8, 0), cpu(2, 4, 2), cpu(3, 4, 0)};
    /* One worker of 2 slots: the tightest agent that fits (agent 2, 2 free). */
    assert_int_equal(placement_gang(a, 3, 1, 2, out), 0);
    assert_int_equal(out[0].agent, 1);
    /* 4 workers x 2 slots: all on the 8-slot agent rather than spread. */
    assert_int_equal(placement_gang(a, 3, 4, 2, out), 0);
    for (int r = 0; r < 4; r++) assert_int_equal(out[r].agent, 0);
}

static void test_gpus_packed(void **state)
{
    (void)state;
    place_rank out[3];
    place_agent a[2] = {gpu(1, 2), gpu(2, 4)};
    /* 3 workers x 1 GPU: fit on the 4-GPU agent alone. */
    assert_int_equal(placement_gang(a, 2, 3, 1, out), 0);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(out[r].agent, 1);
        assert_int_equal(out[r].ngpu, 1);
        assert_int_equal(out[r].gpu[0], r);
    }
    assert_int_equal(__builtin_popcountll(a[1].gpu_used), 3);
    /* 2 x 2 GPUs: agent 1 has 2 free, agent 2 has 1: no fit. */
    assert_int_equal(placement_gang(a, 2, 2, 2, out), HF_ENOTFOUND);
    placement_release(a, 2, 3, 1, out);
    assert_int_equal(a[1].gpu_used, 0);
}

static void test_excluded_and_bad_sizes(void **state)
{
    (void)state;
    place_rank out[1];
    place_agent a[2] = {cpu(1, 4, 0), cpu(2, 4, 0)};
    a[0].excluded = 1;
    assert_int_equal(placement_gang(a, 2, 1, 1, out), 0);
    assert_int_equal(out[0].agent, 1);
    assert_int_equal(placement_gang(a, 2, 0, 1, out), HF_EINVAL);
    assert_int_equal(placement_gang(a, 2, 1, 0, out), HF_EINVAL);
    assert_int_equal(placement_gang(a, 0, 1, 1, out), HF_ENOTFOUND);
}

/* Locality: a trial starting from a checkpoint goes to an agent that
 * holds it when one has room for the whole gang (best fit among them),
 * else placement is as usual (-1). */
static void test_prefer_holder(void **state)
{
    (void)state;
    place_agent a[4] = {cpu(1, 4, 0), cpu(2, 2, 1), cpu(3, 8, 0), cpu(4, 2, 2)};
    int none[4] = {0, 0, 0, 0}, h13[4] = {1, 0, 1, 0}, h2[4] = {0, 1, 0, 0}, h4[4] = {0, 0, 0, 1};
    assert_int_equal(placement_prefer(a, 4, none, 1, 1), -1);
    assert_int_equal(placement_prefer(a, 4, h13, 1, 1), 0);      /* best fit of the holders: 4 free < 8 */
    assert_int_equal(placement_prefer(a, 4, h13, 6, 1), 2);      /* only agent 3 takes 6 */
    assert_int_equal(placement_prefer(a, 4, h2, 1, 1), 1);
    assert_int_equal(placement_prefer(a, 4, h2, 2, 1), -1);      /* the holder has 1 free slot */
    assert_int_equal(placement_prefer(a, 4, h4, 1, 1), -1);      /* the holder is full */
    a[0].excluded = 1;
    assert_int_equal(placement_prefer(a, 4, h13, 1, 1), 2);      /* an excluded holder is skipped */
    assert_int_equal(placement_prefer(a, 4, h13, 1, 0), -1);     /* bad sizes */
}

static void test_lttb(void **state)
{
    (void)state;
    size_t n = 100000, m = 500;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    size_t *idx = malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++) { x[i] = (double)i; y[i] = sin((double)i / 1000.0); }
    y[54321] = 50.0;   /* a spike must survive */
    size_t k = downsample_lttb(x, y, n, m, idx);
    assert_int_equal(k, m);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[k - 1], n - 1);
    int spike = 0;
    for (size_t i = 1; i < k; i++) {
        assert_true(idx[i] > idx[i - 1]);
        if (idx[i] == 54321) spike = 1;
    }
    assert_true(spike);
    /* Fewer points than asked: all of them. */
    assert_int_equal(downsample_lttb(x, y, 10, 500, idx), 10);
    free(x); free(y); free(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gang_needs_four),
        cmocka_unit_test(test_best_fit_single_agent),
        cmocka_unit_test(test_gpus_packed),
        cmocka_unit_test(test_excluded_and_bad_sizes),
        cmocka_unit_test(test_prefer_holder),
        cmocka_unit_test(test_lttb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

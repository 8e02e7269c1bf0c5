/*
 * test_common_pool.c — hf_pool on real threads: every worker carries the
 * pool's name, the queue bound refuses (HF_ETOOBIG) or blocks, keys
 * answer hf_pool_has and refuse duplicates, a draining stop runs every
 * queued job, a cancelling stop drops the queued ones (drop called once
 * each) and ends a running job's wait at once, and submits after a stop
 * are refused. Run under ASan, nothing leaks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "thread_fixture.h"

#include "hf_err.h"
#include "hf_pool.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the jobs of one test share. gate: jobs that wait on it block until
 * it opens (or the pool cancels). */
typedef struct {
    atomic_int ran, dropped, cut, started;
    atomic_int gate;
} tally;

static void job_count(hf_pool *p, void *arg)
{
    (void)p;
    atomic_fetch_add(&((tally *)arg)->ran, 1);
}

static void job_gated(hf_pool *p, void *arg)
{
    tally *t = arg;
    atomic_fetch_add(&t->started, 1);
    while (!atomic_load(&t->gate))
        if (hf_pool_wait(p, 5)) {
            atomic_fetch_add(&t->cut, 1);
            return;
        }
    atomic_fetch_add(&t->ran, 1);
}

static void job_drop(hf_pool *p, void *arg)
{
    (void)p;
    atomic_fetch_add(&((tally *)arg)->dropped, 1);
}

static void wait_started(tally *t, int n)
{
    int64_t t0 = hf_mono_ms();
    while (atomic_load(&t->started) < n && hf_mono_ms() - t0 < 2000) hf_sleep_ms(1);
    assert_int_equal(atomic_load(&t->started), n);
}

static void test_names_and_args(void **state)
{
    (void)state;
    assert_null(hf_pool_new("hf-tpool", 0, 4));
    assert_null(hf_pool_new("hf-tpool", 2, 0));
    assert_null(hf_pool_new("a name too long!", 2, 4));
    hf_pool *p = hf_pool_new("hf-tpool", 3, 4);
    assert_non_null(p);
    assert_int_equal(unit_threads_named("hf-tpool"), 3);
    assert_int_equal(hf_pool_submit(p, NULL, NULL, NULL, NULL, 0), HF_EINVAL);
    hf_pool_free(p);
    assert_int_equal(unit_threads_settle("hf-tpool", 0), 0);
    hf_pool_free(NULL);
    hf_pool_stop(NULL, HF_POOL_DRAIN);
}

static void test_queue_bound_and_keys(void **state)
{
    (void)state;
    tally t = {0};
    hf_pool *p = hf_pool_new("hf-tbound", 1, 2);
    assert_non_null(p);
    assert_int_equal(hf_pool_submit(p, "run", job_gated, job_drop, &t, 0), 0);
    wait_started(&t, 1);   /* the one thread is busy: the queue is empty */
    assert_int_equal(hf_pool_submit(p, "a", job_count, job_drop, &t, 0), 0);
    assert_int_equal(hf_pool_submit(p, "b", job_count, job_drop, &t, 0), 0);
    assert_int_equal(hf_pool_submit(p, "c", job_count, job_drop, &t, 0), HF_ETOOBIG);
    assert_int_equal(hf_pool_pending(p), 3);
    assert_true(hf_pool_has(p, "run"));
    assert_true(hf_pool_has(p, "a"));
    assert_false(hf_pool_has(p, "c"));
    assert_false(hf_pool_has(p, NULL));
    assert_int_equal(hf_pool_submit(p, "run", job_count, job_drop, &t, HF_POOL_UNIQUE), HF_EEXIST);
    assert_int_equal(hf_pool_submit(p, "a", job_count, job_drop, &t, HF_POOL_UNIQUE), HF_EEXIST);
    assert_int_equal(hf_pool_idle_wait(p, 30), HF_ETIMEOUT);
    atomic_store(&t.gate, 1);
    assert_int_equal(hf_pool_idle_wait(p, 2000), 0);
    assert_int_equal(atomic_load(&t.ran), 3);
    assert_false(hf_pool_has(p, "run"));
    assert_int_equal(hf_pool_submit(p, "run", job_count, job_drop, &t, HF_POOL_UNIQUE), 0);
    hf_pool_stop(p, HF_POOL_DRAIN);
    assert_int_equal(atomic_load(&t.ran), 4);
    assert_int_equal(atomic_load(&t.dropped), 0);
    assert_int_equal(hf_pool_submit(p, "late", job_count, job_drop, &t, 0), HF_ESTATE);
    hf_pool_free(p);
}

typedef struct {
    hf_pool   *p;
    tally     *t;
    int        rc;
    atomic_int done;
} submitter;

static void blocked_submit(hf_thread *th, void *arg)
{
    (void)th;
    submitter *s = arg;
    s->rc = hf_pool_submit(s->p, "blocked", job_count, job_drop, s->t, HF_POOL_BLOCK);
    atomic_store(&s->done, 1);
}

static void test_blocking_submit(void **state)
{
    (void)state;
    tally t = {0};
    hf_pool *p = hf_pool_new("hf-tblock", 1, 1);
    assert_non_null(p);
    assert_int_equal(hf_pool_submit(p, NULL, job_gated, job_drop, &t, 0), 0);
    wait_started(&t, 1);
    assert_int_equal(hf_pool_submit(p, NULL, job_count, job_drop, &t, 0), 0);   /* the queue is full */
    submitter s = {.p = p, .t = &t, .rc = 99};
    hf_thread *th = NULL;   /* a caller's thread, as an HTTP server's would be */
    assert_int_equal(hf_thread_start(&th, "hf-tsubmit", blocked_submit, &s), 0);
    hf_sleep_ms(50);
    assert_int_equal(atomic_load(&s.done), 0);   /* waiting for room */
    atomic_store(&t.gate, 1);
    hf_thread_join(th);
    assert_int_equal(s.rc, 0);
    assert_int_equal(hf_pool_idle_wait(p, 2000), 0);
    assert_int_equal(atomic_load(&t.ran), 3);
    hf_pool_free(p);
}

static void test_blocked_submit_refused_at_stop(void **state)
{
    (void)state;
    tally t = {0};
    hf_pool *p = hf_pool_new("hf-tblock2", 1, 1);
    assert_non_null(p);
    assert_int_equal(hf_pool_submit(p, NULL, job_gated, job_drop, &t, 0), 0);
    wait_started(&t, 1);
    assert_int_equal(hf_pool_submit(p, NULL, job_count, job_drop, &t, 0), 0);
    submitter s = {.p = p, .t = &t, .rc = 99};
    hf_thread *th = NULL;
    assert_int_equal(hf_thread_start(&th, "hf-tsubmit", blocked_submit, &s), 0);
    hf_sleep_ms(30);
    hf_pool_stop(p, HF_POOL_CANCEL);
    hf_thread_join(th);
    assert_int_equal(s.rc, HF_ESTATE);
    assert_int_equal(atomic_load(&t.cut), 1);
    assert_int_equal(atomic_load(&t.dropped), 1);
    assert_int_equal(atomic_load(&t.ran), 0);
    hf_pool_free(p);
}

static void test_cancel_with_jobs_pending(void **state)
{
    (void)state;
    tally t = {0};
    hf_pool *p = hf_pool_new("hf-tcancel", 2, 16);
    assert_non_null(p);
    for (int i = 0; i < 2; i++) assert_int_equal(hf_pool_submit(p, NULL, job_gated, job_drop, &t, 0), 0);
    wait_started(&t, 2);
    for (int i = 0; i < 10; i++) assert_int_equal(hf_pool_submit(p, NULL, job_count, job_drop, &t, 0), 0);
    int64_t t0 = hf_mono_ms();
    hf_pool_free(p);   /* cancels: the two running end their wait, ten are dropped */
    assert_true(hf_mono_ms() - t0 < 500);
    assert_int_equal(atomic_load(&t.cut), 2);
    assert_int_equal(atomic_load(&t.dropped), 10);
    assert_int_equal(atomic_load(&t.ran), 0);
    assert_int_equal(unit_threads_settle("hf-tcancel", 0), 0);
}

static void test_drain_runs_all(void **state)
{
    (void)state;
    tally t = {0};
    hf_pool *p = hf_pool_new("hf-tdrain", 2, 64);
    assert_non_null(p);
    for (int i = 0; i < 50; i++) assert_int_equal(hf_pool_submit(p, NULL, job_count, NULL, &t, 0), 0);
    hf_pool_stop(p, HF_POOL_DRAIN);
    assert_int_equal(atomic_load(&t.ran), 50);
    hf_pool_stop(p, HF_POOL_CANCEL);   /* idempotent */
    hf_pool_free(p);
    assert_int_equal(atomic_load(&t.dropped), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_args),
        cmocka_unit_test(test_queue_bound_and_keys),
        cmocka_unit_test(test_blocking_submit),
        cmocka_unit_test(test_blocked_submit_refused_at_stop),
        cmocka_unit_test(test_cancel_with_jobs_pending),
        cmocka_unit_test(test_drain_runs_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

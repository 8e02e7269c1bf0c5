/*
 * test_common_thread.c — hf_thread (named threads with a stop flag) on
 * real threads: the name is in /proc/self/task/TID/comm once start
 * returns, bad names are refused, a waiting loop stops within
 * milliseconds whatever its period, kicks wake it without stopping it
 * and are not lost, and a thread that ends on its own is joined.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "thread_fixture.h"

#include "hf_err.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    atomic_int passes;
    atomic_int kicks_seen;
    atomic_int done;
} loop_state;

/* A timer loop with a long period: counts its passes. */
static void slow_loop(hf_thread *t, void *arg)
{
    loop_state *ls = arg;
    while (!hf_thread_wait(t, 60000)) atomic_fetch_add(&ls->passes, 1);
    atomic_store(&ls->done, 1);
}

static void fast_loop(hf_thread *t, void *arg)
{
    loop_state *ls = arg;
    while (!hf_thread_wait(t, 50)) atomic_fetch_add(&ls->passes, 1);
    atomic_store(&ls->done, 1);
}

static void test_name_visible(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = NULL;
    assert_int_equal(unit_threads_settle("hf-test-name", 0), 0);
    assert_int_equal(hf_thread_start(&t, "hf-test-name", slow_loop, &ls), 0);
    assert_string_equal(hf_thread_name(t), "hf-test-name");
    assert_int_equal(unit_threads_named("hf-test-name"), 1);   /* no sleep: named before start returns */
    hf_thread_stop_join(t);
    assert_int_equal(atomic_load(&ls.done), 1);
    assert_int_equal(unit_threads_settle("hf-test-name", 0), 0);
}

static void test_bad_names(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = (hf_thread *)&ls;
    assert_int_equal(hf_thread_start(&t, NULL, slow_loop, &ls), HF_EINVAL);
    assert_null(t);
    assert_int_equal(hf_thread_start(&t, "", slow_loop, &ls), HF_EINVAL);
    assert_int_equal(hf_thread_start(&t, "sixteen-chars-xx", slow_loop, &ls), HF_EINVAL);
    assert_int_equal(hf_thread_start(&t, "has space", slow_loop, &ls), HF_EINVAL);
    assert_int_equal(hf_thread_start(&t, "name", NULL, &ls), HF_EINVAL);
    assert_int_equal(hf_thread_start(&t, "fifteen-chars-x", slow_loop, &ls), 0);   /* the limit itself */
    assert_int_equal(unit_threads_named("fifteen-chars-x"), 1);
    hf_thread_stop_join(t);
    hf_thread_stop_join(NULL);
    hf_thread_join(NULL);
    hf_thread_ask_stop(NULL);
}

static void test_stop_latency(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = NULL;
    assert_int_equal(hf_thread_start(&t, "hf-test-stop", slow_loop, &ls), 0);
    hf_sleep_ms(20);   /* let it sleep in its 60 s wait */
    assert_false(hf_thread_stopping(t));
    int64_t t0 = hf_mono_ms();
    hf_thread_stop_join(t);
    int64_t took = hf_mono_ms() - t0;
    assert_true(took < 200);
    assert_int_equal(atomic_load(&ls.passes), 0);
    assert_int_equal(atomic_load(&ls.done), 1);
}

static void test_period(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = NULL;
    assert_int_equal(hf_thread_start(&t, "hf-test-period", fast_loop, &ls), 0);
    hf_sleep_ms(330);
    hf_thread_stop_join(t);
    int n = atomic_load(&ls.passes);
    assert_true(n >= 4 && n <= 7);   /* 50 ms period: 6 in 330 ms, give or take */
}

static void kick_loop(hf_thread *t, void *arg)
{
    loop_state *ls = arg;
    while (!hf_thread_wait(t, 60000)) atomic_fetch_add(&ls->kicks_seen, 1);
}

static void test_kick(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = NULL;
    assert_int_equal(hf_thread_start(&t, "hf-test-kick", kick_loop, &ls), 0);
    for (int i = 1; i <= 3; i++) {
        int64_t t0 = hf_mono_ms();
        hf_thread_kick(t);
        while (atomic_load(&ls.kicks_seen) < i && hf_mono_ms() - t0 < 2000) hf_sleep_ms(1);
        assert_int_equal(atomic_load(&ls.kicks_seen), i);
        assert_false(hf_thread_stopping(t));
    }
    hf_thread_stop_join(t);
    assert_int_equal(atomic_load(&ls.kicks_seen), 3);
}

/* Waits called by the thread itself: a kick given while it was busy is
 * seen by the next wait at once. */
static void self_kick(hf_thread *t, void *arg)
{
    loop_state *ls = arg;
    hf_thread_kick(t);
    int64_t t0 = hf_mono_ms();
    int stop = hf_thread_wait(t, 5000);
    if (!stop && hf_mono_ms() - t0 < 1000) atomic_store(&ls->kicks_seen, 1);
    if (hf_thread_wait(t, 0) == 0) atomic_fetch_add(&ls->passes, 1);   /* 0 ms: no sleep */
    atomic_store(&ls->done, 1);
}

static void test_kick_not_lost(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = NULL;
    assert_int_equal(hf_thread_start(&t, "hf-test-self", self_kick, &ls), 0);
    hf_thread_join(t);
    assert_int_equal(atomic_load(&ls.kicks_seen), 1);
    assert_int_equal(atomic_load(&ls.passes), 1);
    assert_int_equal(atomic_load(&ls.done), 1);
}

static void runs_to_end(hf_thread *t, void *arg)
{
    loop_state *ls = arg;
    hf_sleep_ms(30);
    if (!hf_thread_stopping(t)) atomic_store(&ls->done, 1);
}

static void test_join_own_end(void **state)
{
    (void)state;
    loop_state ls = {0};
    hf_thread *t = NULL;
    assert_int_equal(hf_thread_start_stack(&t, "hf-test-end", 256 * 1024, runs_to_end, &ls), 0);
    hf_thread_join(t);
    assert_int_equal(atomic_load(&ls.done), 1);   /* stop was never asked */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_visible),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_stop_latency),
        cmocka_unit_test(test_period),
        cmocka_unit_test(test_kick),
        cmocka_unit_test(test_kick_not_lost),
        cmocka_unit_test(test_join_own_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

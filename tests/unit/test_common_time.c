/*
 * test_common_time.c — hf_deadline: the absolute time ms from now on a
 * clock, normalized (tv_nsec below one second) across second boundaries,
 * and usable with pthread_cond_timedwait on both clocks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_time.h"

#include <pthread.h>
#include <stdint.h>

static int64_t ts_ms(struct timespec t) { return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000; }

static void test_deadline_arithmetic(void **state)
{
    (void)state;
    static const int64_t ms[] = {0, 1, 999, 1000, 1001, 2500, 86400000};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        struct timespec before, after;
        clock_gettime(CLOCK_MONOTONIC, &before);
        struct timespec d = hf_deadline(CLOCK_MONOTONIC, ms[i]);
        clock_gettime(CLOCK_MONOTONIC, &after);
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        assert_true(ts_ms(d) >= ts_ms(before) + ms[i]);
        assert_true(ts_ms(d) <= ts_ms(after) + ms[i]);
    }
}

static void test_deadline_waits(void **state)
{
    (void)state;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;   /* CLOCK_REALTIME */
    pthread_mutex_lock(&mu);
    int64_t t0 = hf_mono_ms();
    struct timespec d = hf_deadline(CLOCK_REALTIME, 120);
    while (pthread_cond_timedwait(&cv, &mu, &d) == 0) {}
    int64_t waited = hf_mono_ms() - t0;
    pthread_mutex_unlock(&mu);
    assert_true(waited >= 110);
    assert_true(waited < 2000);

    pthread_condattr_t at;
    pthread_condattr_init(&at);
    pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    pthread_cond_t mcv;
    pthread_cond_init(&mcv, &at);
    pthread_mutex_lock(&mu);
    t0 = hf_mono_ms();
    d = hf_deadline(CLOCK_MONOTONIC, 120);
    while (pthread_cond_timedwait(&mcv, &mu, &d) == 0) {}
    waited = hf_mono_ms() - t0;
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&mcv);
    pthread_condattr_destroy(&at);
    assert_true(waited >= 110);
    assert_true(waited < 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_arithmetic),
        cmocka_unit_test(test_deadline_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * hf_assert.c — the failure path of HF_ASSERT / HF_ALWAYS (hf_assert.h):
 * abort with file:line in abort mode, else log and count.
 *
 * The mode is the build's (-DHF_ASSERT_ABORT) unless HF_ASSERT=abort|count
 * is set in the environment, read once; hf_assert_set_abort overrides
 * both. State is two atomics: safe from any thread, no lock, no
 * allocation (an assertion may fail on an out-of-memory path).
 */
#include "hf_assert.h"
#include "hf_log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HF_ASSERT_ABORT
#define HF_ASSERT_DEFAULT 1
#else
#define HF_ASSERT_DEFAULT 0
#endif

static atomic_uint_fast64_t failures;
static atomic_int mode = -1;   /* -1: not decided yet; 0 count; 1 abort */

int hf_assert_aborts(void)
{
    int m = atomic_load(&mode);
    if (m >= 0) return m;
    const char *e = getenv("HF_ASSERT");
    m = e && !strcmp(e, "abort") ? 1 : e && !strcmp(e, "count") ? 0 : HF_ASSERT_DEFAULT;
    int want = -1;
    atomic_compare_exchange_strong(&mode, &want, m);
    return atomic_load(&mode);
}

int hf_assert_set_abort(int on)
{
    int prev = hf_assert_aborts();
    atomic_store(&mode, on ? 1 : 0);
    return prev;
}

uint64_t hf_assert_failures(void) { return atomic_load(&failures); }

void hf_assert_fail(const char *cond, const char *file, int line, const char *func)
{
    atomic_fetch_add(&failures, 1);
    if (hf_assert_aborts()) {
        fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", file, line, func, cond);
        fflush(stderr);
        abort();
    }
    hf_error("%s:%d: %s: assertion failed: %s (counted, going on)", file, line, func, cond);
}

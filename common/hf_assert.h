/*
 * hf_assert.h — invariants as code (docs/scheduler.md "Self-checks"):
 * HF_ASSERT(cond) states something that must hold; when it does not, the
 * program has a bug, not a bad input.
 *
 * Two modes, decided per build and overridable per process:
 *
 *   abort  (builds with -DHF_ASSERT_ABORT: `make SANITIZE=...`, which CI
 *          runs the whole suite under) — print "file:line: function:
 *          assertion failed: cond" to stderr and abort(), so a broken
 *          invariant fails the test that reached it, with a core/backtrace.
 *   count  (release) — log the same line at error level, add one to a
 *          process-wide counter (hf_assert_failures(), exported on
 *          /metrics), and go on: a server does not die for one bad record
 *          (docs/scheduler.md "Self-checks"), but the failure is visible.
 *
 * The environment variable HF_ASSERT=abort|count overrides the build's
 * mode at the first failure (e.g. to run a release binary strictly).
 *
 * HF_ALWAYS(cond) is the expression form, as SQLite's ALWAYS: it asserts
 * cond and evaluates to its truth, so a release build can refuse what a
 * debug build aborts on:  if (!HF_ALWAYS(ok)) return HF_ESTATE;
 *
 * Conditions must have no side effects a correct program relies on: they
 * are always evaluated (in both modes), exactly once.
 */
#ifndef HF_ASSERT_H
#define HF_ASSERT_H

#include <stdint.h>

/* Report a failed assertion (aborts in abort mode). */
void hf_assert_fail(const char *cond, const char *file, int line, const char *func);

/* Failed assertions counted so far in this process (count mode; in abort
 * mode the process ends at the first). Thread-safe. */
uint64_t hf_assert_failures(void);

/* Is this process in abort mode? Expensive O(n) checks run only then. */
int hf_assert_aborts(void);

/* Set the mode: 1 = abort, 0 = count; RET the previous one. For tests
 * that provoke a failure on purpose and check it is counted. */
int hf_assert_set_abort(int on);

#define HF_ASSERT(cond) \
    do { if (!(cond)) hf_assert_fail(#cond, __FILE__, __LINE__, __func__); } while (0)
#define HF_ALWAYS(cond) ((cond) ? 1 : (hf_assert_fail(#cond, __FILE__, __LINE__, __func__), 0))

#endif

/*
 * test_scheduler_states.c — the scheduler core checks itself
 * (docs/scheduler.md "State machine", "Self-checks"): the real core on a
 * real store, driven below its public calls through sched_int.h.
 *
 *   - every (from, to) pair of trial states, table-driven: a legal one
 *     (docs/scheduler.md's table, repeated here as the expectation, so a
 *     change of either is seen) succeeds, moves the state and the
 *     experiment's counts and writes one events row; an illegal one is
 *     refused with HF_ESTATE, changes nothing (state, counts, ended_at,
 *     no events row) and counts one assertion failure.
 *   - the same for every pair of experiment states (the same state is a
 *     no-op that succeeds and writes nothing).
 *   - HF_ASSERT itself: the build's mode (abort under -DHF_ASSERT_ABORT,
 *     as sanitizer builds are), count mode counts and goes on, HF_ALWAYS is the
 *     condition's value; the lock's owner is recorded per thread, and a
 *     state change made without the lock is refused and counted.
 *   - abort mode: sched_check_invariants aborts (SIGABRT, in a child) on a
 *     model whose counts disagree with its trials, and passes on a sound one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_assert.h"
#include "hf_err.h"
#include "scheduler/core/sched_int.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <pthread.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "states"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

/* The legal transitions as docs/scheduler.md "State machine" lists them. */
static const char *const trial_legal[] = {
    "QUEUED>ASSIGNED", "QUEUED>FAILED", "QUEUED>CANCELED", "QUEUED>PAUSED",
    "ASSIGNED>RUNNING", "ASSIGNED>QUEUED", "ASSIGNED>PAUSED", "ASSIGNED>COMPLETED", "ASSIGNED>FAILED",
    "ASSIGNED>STOPPED", "ASSIGNED>CANCELED",
    "RUNNING>QUEUED", "RUNNING>PAUSED", "RUNNING>COMPLETED", "RUNNING>FAILED", "RUNNING>STOPPED", "RUNNING>CANCELED",
    "COMPLETED>QUEUED", "FAILED>QUEUED", "FAILED>PAUSED", "STOPPED>QUEUED",
    "PAUSED>QUEUED", "PAUSED>CANCELED",
};
static const char *const exp_legal[] = {
    "ACTIVE>PAUSED", "ACTIVE>COMPLETED", "ACTIVE>FAILED", "ACTIVE>CANCELED",
    "PAUSED>ACTIVE", "PAUSED>FAILED", "PAUSED>CANCELED",
    "COMPLETED>ACTIVE", "FAILED>ACTIVE",
};

static int listed(const char *const *v, size_t n, const char *from, const char *to)
{
    char key[64];
    snprintf(key, sizeof key, "%s>%s", from, to);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i], key)) return 1;
    return 0;
}

#define N(a) (sizeof (a) / sizeof (a)[0])

/* A core with one experiment and one trial (placed on agent a1). */
static void open_one(const char *name, store **st, sched **c, trial **t)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    unit_open_core(path, NULL, st, c);
    unit_register(*c, "a1", 1);
    unit_submit(*c, "{\"name\": \"s\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                    "\"searcher\": {\"name\": \"random\", \"max_trials\": 1, \"seed\": 1},"
                    "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
                    "\"trial\": {\"command\": [\"true\"]}}");
    assert_int_equal((*c)->ntrials, 1);
    *t = (*c)->trials[0];
}

static int64_t events_rows(store *st) { return unit_one_int(store_db(st), "SELECT COUNT(*) FROM events"); }

/* Put t in state st behind the state machine's back (counts kept right). */
static void force_trial(trial *t, int st)
{
    t->exp->counts[t->state]--;
    t->state = st;
    t->exp->counts[st]++;
}

static void test_trial_transitions(void **state)
{
    (void)state;
    store *st = NULL;
    sched *c = NULL;
    trial *t = NULL;
    open_one("trial", &st, &c, &t);
    int prev = hf_assert_set_abort(0);   /* illegal pairs are provoked on purpose: count them */
    int nlegal = 0;
    sched_lock(c);
    for (int from = 0; from < T__N; from++)
        for (int to = 0; to < T__N; to++) {
            const char *fn = sched_trial_state_names[from], *tn = sched_trial_state_names[to];
            int legal = listed(trial_legal, N(trial_legal), fn, tn);
            txn_begin(c);
            force_trial(t, from);
            int64_t counts[T__N], ended = t->ended_at = 12345, ev = events_rows(st);
            uint64_t fails = hf_assert_failures();
            memcpy(counts, t->exp->counts, sizeof counts);
            assert_int_equal(trial_transition_ok(from, to), legal);
            int rc = trial_set_state(c, t, to, "test");
            if (legal) {
                nlegal++;
                assert_int_equal(rc, 0);
                assert_int_equal(t->state, to);
                assert_int_equal(t->exp->counts[from], counts[from] - 1);
                assert_int_equal(t->exp->counts[to], counts[to] + 1);
                assert_int_equal(events_rows(st), ev + 1);
                assert_int_equal(hf_assert_failures(), fails);
            } else {
                if (rc != HF_ESTATE) fail_msg("%s -> %s: rc %d, want HF_ESTATE", fn, tn, rc);
                assert_int_equal(t->state, from);
                assert_memory_equal(t->exp->counts, counts, sizeof counts);
                assert_int_equal(t->ended_at, ended);
                assert_int_equal(events_rows(st), ev);
                assert_int_equal(hf_assert_failures(), fails + 1);
            }
            txn_abort(c);
        }
    force_trial(t, T_QUEUED);
    sched_unlock(c);
    assert_int_equal(nlegal, (int)N(trial_legal));   /* every listed pair exists */
    hf_assert_set_abort(prev);
    sched_free(c);
    store_close(st);
}

static void test_experiment_transitions(void **state)
{
    (void)state;
    store *st = NULL;
    sched *c = NULL;
    trial *t = NULL;
    open_one("exp", &st, &c, &t);
    experiment *x = t->exp;
    int prev = hf_assert_set_abort(0);
    int nlegal = 0;
    sched_lock(c);
    for (int from = 0; from < E__N; from++)
        for (int to = 0; to < E__N; to++) {
            const char *fn = exp_state_names[from], *tn = exp_state_names[to];
            int legal = listed(exp_legal, N(exp_legal), fn, tn);
            txn_begin(c);
            x->state = from;
            x->ended_at = 777;
            int64_t ev = events_rows(st);
            uint64_t fails = hf_assert_failures();
            assert_int_equal(exp_transition_ok(from, to), legal);
            int rc = exp_set_state(c, x, to, "test");
            if (from == to) {                       /* a no-op */
                assert_int_equal(rc, 0);
                assert_int_equal(x->ended_at, 777);
                assert_int_equal(events_rows(st), ev);
            } else if (legal) {
                nlegal++;
                assert_int_equal(rc, 0);
                assert_int_equal(x->state, to);
                assert_int_equal(events_rows(st), ev + 1);
                assert_int_equal(hf_assert_failures(), fails);
            } else {
                if (rc != HF_ESTATE) fail_msg("%s -> %s: rc %d, want HF_ESTATE", fn, tn, rc);
                assert_int_equal(x->state, from);
                assert_int_equal(x->ended_at, 777);
                assert_int_equal(events_rows(st), ev);
                assert_int_equal(hf_assert_failures(), fails + 1);
            }
            txn_abort(c);
        }
    x->state = E_ACTIVE;
    x->ended_at = 0;
    sched_unlock(c);
    assert_int_equal(nlegal, (int)N(exp_legal));
    hf_assert_set_abort(prev);
    sched_free(c);
    store_close(st);
}

static void *held_elsewhere(void *arg) { return (void *)(intptr_t)sched_lock_held(arg); }

static void test_assert_and_lock(void **state)
{
    (void)state;
    store *st = NULL;
    sched *c = NULL;
    trial *t = NULL;
    open_one("lock", &st, &c, &t);
    /* The build's mode: abort in sanitizer builds, count in release. */
    if (!getenv("HF_ASSERT")) {
#ifdef HF_ASSERT_ABORT
        assert_true(hf_assert_aborts());
#else
        assert_false(hf_assert_aborts());
#endif
    }
    int prev = hf_assert_set_abort(0);
    uint64_t f0 = hf_assert_failures();
    HF_ASSERT(1 + 1 == 2);
    assert_int_equal(hf_assert_failures(), f0);
    HF_ASSERT(1 + 1 == 3);
    assert_int_equal(hf_assert_failures(), f0 + 1);
    assert_int_equal(HF_ALWAYS(2 > 1), 1);
    assert_int_equal(HF_ALWAYS(2 < 1), 0);
    assert_int_equal(hf_assert_failures(), f0 + 2);

    /* The owner is this thread, not another one. */
    assert_false(sched_lock_held(c));
    sched_lock(c);
    assert_true(sched_lock_held(c));
    pthread_t th;
    void *other = (void *)1;
    assert_int_equal(pthread_create(&th, NULL, held_elsewhere, c), 0);
    pthread_join(th, &other);
    assert_null(other);
    sched_unlock(c);
    assert_false(sched_lock_held(c));

    /* A state change without the lock: the lock check and the table both
     * fail (QUEUED -> QUEUED is no transition); nothing changes. */
    int was = t->state;
    uint64_t f1 = hf_assert_failures();
    assert_int_equal(trial_set_state(c, t, was, "unlocked"), HF_ESTATE);
    assert_int_equal(hf_assert_failures(), f1 + 2);
    assert_int_equal(t->state, was);
    hf_assert_set_abort(prev);
    sched_free(c);
    store_close(st);
}

/* In a child in abort mode: check c's invariants after breaking one
 * (break_counts) or not. RET the child's wait status. */
static int check_in_child(sched *c, int break_counts)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hf_assert_set_abort(1);
        sched_lock(c);
        if (break_counts) c->exps[0]->counts[T_COMPLETED]++;
        sched_check_invariants(c);
        _exit(0);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    return ws;
}

static void test_invariants_abort(void **state)
{
    (void)state;
    store *st = NULL;
    sched *c = NULL;
    trial *t = NULL;
    open_one("inv", &st, &c, &t);
    int ws = check_in_child(c, 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    ws = check_in_child(c, 1);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT);
    sched_free(c);
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trial_transitions),
        cmocka_unit_test(test_experiment_transitions),
        cmocka_unit_test(test_assert_and_lock),
        cmocka_unit_test(test_invariants_abort),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

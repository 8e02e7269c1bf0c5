/*
 * test_scheduler_backfill.c — fair share with gangs: a gang that does not
 * fit gets a backfill reservation, so smaller trials behind it only use
 * slots that do not delay it (the real core on a real store; the agents
 * are played by calling the heartbeat entry point directly).
 *
 * Farm: agents a1 and a2 with 2 slots each. Experiment S (1-slot trials,
 * 4 at a time) fills the farm first; then experiment G asks for one worker
 * of 2 slots. Without a reservation every slot S frees goes straight back
 * to S and G starves; with it the first slot freed on a1 stays empty, a
 * slot freed on a2 (not reserved) is backfilled by S, and G starts on a1
 * as soon as a1's second slot frees. placement_reserve itself is checked
 * on GPU and multi-agent gangs.
 *
 * First fit at submission: the dispatch pass keeps its last single-agent
 * choice and skips full agents (dispatch.c, pass_fit and pass_scan in
 * sched_int.h); the ranks it places must be exactly those of a plain scan
 * of every agent for each trial in turn: the first agent with room for the
 * whole gang, else placement_gang's span over all (farms of uneven agents,
 * gangs of 1 and of 2 workers, the 2-worker ones spanning agents once no
 * agent has 2 free slots).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/core/placement.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "backfill"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

typedef struct run { int64_t trial, attempt, agent; } run;
static run runs[64];
static int nruns;

/* Heartbeat agent aid with events (a JSON array text); remember and return
 * the number of assignments of the reply, and the experiment of the first. */
static int hb(sched *c, int64_t aid, const char *events, int64_t *first_exp)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"running\": [], \"events\": %s}", events);
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr e;
    assert_int_equal(sched_agent_heartbeat(c, aid, b, &out, &e), 0);
    json_t *as = json_object_get(out, "assign");
    for (size_t i = 0; i < json_array_size(as); i++) {
        json_t *a = json_array_get(as, i);
        assert_true(nruns < 64);
        runs[nruns++] = (run){json_integer_value(json_object_get(a, "trial_id")),
                              json_integer_value(json_object_get(a, "attempt")), aid};
        if (i == 0 && first_exp) *first_exp = json_integer_value(json_object_get(a, "experiment_id"));
    }
    int n = (int)json_array_size(as);
    json_decref(out);
    json_decref(b);
    return n;
}

static void event(char *buf, size_t len, const run *r, const char *type)
{
    snprintf(buf, len, "[{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"%s\", \"time\": 1, \"pid\": 100, "
                       "\"exit_code\": 0}]", (long long)r->trial, (long long)r->attempt, type);
}

/* The k-th run (in assignment order) placed on agent aid. */
static run *run_on(int64_t aid, int k)
{
    for (int i = 0; i < nruns; i++)
        if (runs[i].agent == aid && k-- == 0) return &runs[i];
    return NULL;
}


static int64_t count_state(sched *c, int64_t exp, const char *state)
{
    json_t *out = NULL;
    assert_int_equal(sched_experiment_trials(c, exp, &out), 0);
    int64_t n = 0;
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(out, "trials"), i, t)
        n += strcmp(json_string_value(json_object_get(t, "state")), state) == 0;
    json_decref(out);
    return n;
}

static void test_gang_not_starved(void **state)
{
    (void)state;
    char path[320], ev[512];
    snprintf(path, sizeof path, "%s/core.db", dir);
    store *s = NULL;
    sched *c = NULL;
    unit_open_core(path, NULL, &s, &c);
    nruns = 0;

    int64_t a1 = unit_register(c, "a1", 2), a2 = unit_register(c, "a2", 2);
    int64_t xs = unit_submit(c, "{\"name\": \"small\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                           "\"searcher\": {\"name\": \"random\", \"max_trials\": 40, \"max_concurrent_trials\": 4},"
                           "\"hyperparameters\": {\"x\": 1}, \"trial\": {\"command\": [\"true\"]}}");
    assert_int_equal(hb(c, a1, "[]", NULL) + hb(c, a2, "[]", NULL), 4);
    for (int i = 0; i < nruns; i++) {
        event(ev, sizeof ev, &runs[i], "started");
        hb(c, runs[i].agent, ev, NULL);
    }
    assert_int_equal(count_state(c, xs, "RUNNING"), 4);

    int64_t xg = unit_submit(c, "{\"name\": \"gang\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                           "\"searcher\": {\"name\": \"random\", \"max_trials\": 1},"
                           "\"hyperparameters\": {\"x\": 1}, \"trial\": {\"command\": [\"true\"],"
                           "\"resources\": {\"workers\": 1, \"slots_per_worker\": 2}}}");
    /* G's trial is created only once it can be placed; until then it
     * exists only as a reservation. */
    assert_int_equal(count_state(c, xg, "QUEUED"), 0);

    /* A trial of S on a1 ends: a1 has 1 free slot, reserved for G (the
     * agent with the most free slots now). S must not take it. */
    run *r = run_on(a1, 0);
    assert_non_null(r);
    event(ev, sizeof ev, r, "exited");
    assert_int_equal(hb(c, a1, ev, NULL), 0);
    assert_int_equal(count_state(c, xs, "RUNNING"), 3);
    assert_int_equal(count_state(c, xg, "QUEUED"), 0);

    /* A trial of S on a2 ends: a2 is not reserved, S backfills it. */
    run *r2 = run_on(a2, 0);
    assert_non_null(r2);
    event(ev, sizeof ev, r2, "exited");
    int64_t ex = 0;
    assert_int_equal(hb(c, a2, ev, &ex), 1);
    assert_int_equal(ex, xs);
    assert_int_equal(count_state(c, xg, "QUEUED"), 0);

    /* a1's second S trial ends: G fits on a1 now and is placed there. */
    run *r3 = run_on(a1, 1);
    assert_non_null(r3);
    event(ev, sizeof ev, r3, "exited");
    ex = 0;
    assert_int_equal(hb(c, a1, ev, &ex), 1);
    assert_int_equal(ex, xg);
    assert_int_equal(count_state(c, xg, "ASSIGNED"), 1);

    sched_free(c);
    store_close(s);
}

static place_agent cpu(int64_t id, int slots, int used)
{
    place_agent a;
    memset(&a, 0, sizeof a);
    a.id = id;
    a.slots = slots;
    a.slots_used = used;
    return a;
}

static void test_reserve_plan(void **state)
{
    (void)state;
    int res[4];
    /* One agent can take the gang when idle: the one with most free now. */
    place_agent a[3] = {cpu(1, 4, 4), cpu(2, 4, 1), cpu(3, 8, 7)};
    assert_int_equal(placement_reserve(a, 3, 2, 2, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 4);
    assert_int_equal(res[2], 0);
    /* Spanning: 3 workers x 2 slots over 2-slot agents, most free first. */
    place_agent b[4] = {cpu(1, 2, 2), cpu(2, 2, 1), cpu(3, 2, 0), cpu(4, 2, 2)};
    assert_int_equal(placement_reserve(b, 4, 3, 2, res), 0);
    assert_int_equal(res[2], 2);   /* free now */
    assert_int_equal(res[0] + res[1] + res[3], 4);
    assert_int_equal(res[1], 2);   /* half free: next */
    /* Never fits, even idle: nothing reserved. */
    assert_int_equal(placement_reserve(b, 4, 5, 2, res), HF_ENOTFOUND);
    /* GPUs bound capacity: a 4-slot agent with 2 GPUs takes one 2-GPU worker. */
    place_agent g = cpu(9, 4, 0);
    g.ngpus = 2;
    g.gpu_index[0] = 0;
    g.gpu_index[1] = 1;
    g.gpu_used = 3;
    place_agent gg[2] = {g, cpu(10, 2, 2)};
    gg[1].ngpus = 2;
    gg[1].gpu_index[0] = 0;
    gg[1].gpu_index[1] = 1;
    assert_int_equal(placement_reserve(gg, 2, 2, 2, res), 0);
    assert_int_equal(res[0], 2);
    assert_int_equal(res[1], 2);
    assert_int_equal(placement_reserve(gg, 2, 1, 0, res), HF_EINVAL);
}

/* Agents of the given slots; one experiment of gangs of W workers of 1
 * slot, as many trials as fit. Each trial's ranks are the first fit's over
 * all agents (else placement_gang's span), trial after trial. */
static void check_first_fit(const char *name, const int *slots, int n, int W)
{
    char path[320], nm[16], exp[512];
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    store *s = NULL;
    sched *c = NULL;
    unit_open_core(path, NULL, &s, &c);
    place_agent model[16];
    int64_t ids[16], total = 0;
    assert_true(n <= 16);
    for (int i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "b%d", i);
        ids[i] = unit_register(c, nm, slots[i]);
        model[i] = cpu(ids[i], slots[i], 0);
        total += slots[i];
    }
    snprintf(exp, sizeof exp, "{\"name\": \"fit\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
             "\"searcher\": {\"name\": \"random\", \"max_trials\": %lld, \"max_concurrent_trials\": %lld},"
             "\"hyperparameters\": {\"x\": 1}, \"trial\": {\"command\": [\"true\"],"
             "\"resources\": {\"workers\": %d, \"slots_per_worker\": 1}}}",
             (long long)(total / W), (long long)(total / W), W);
    int64_t x = unit_submit(c, exp);
    json_t *out = NULL;
    assert_int_equal(sched_experiment_trials(c, x, &out), 0);
    json_t *ts = json_object_get(out, "trials");
    assert_int_equal(json_array_size(ts), total / W);
    for (size_t k = 0; k < json_array_size(ts); k++) {     /* creation order = placement order */
        json_t *t = json_array_get(ts, k), *ranks = json_object_get(t, "ranks");
        place_rank want[4];
        int first = 0;
        while (first < n && placement_capacity(&model[first], 1) < W) first++;
        if (first < n) {
            assert_int_equal(placement_gang(&model[first], 1, W, 1, want), 0);
            for (int r = 0; r < W; r++) want[r].agent = first;
        } else {
            assert_int_equal(placement_gang(model, n, W, 1, want), 0);
        }
        assert_string_equal(json_string_value(json_object_get(t, "state")), "ASSIGNED");
        assert_int_equal(json_array_size(ranks), W);
        for (int r = 0; r < W; r++) {
            int64_t got = json_integer_value(json_object_get(json_array_get(ranks, (size_t)r), "agent_id"));
            if (got != ids[want[r].agent])
                fail_msg("%s: trial %zu rank %d on agent %lld, first fit is %lld", name, k, r, (long long)got,
                         (long long)ids[want[r].agent]);
        }
    }
    json_decref(out);
    sched_free(c);
    store_close(s);
}

static void test_first_fit_at_submission(void **state)
{
    (void)state;
    const int uneven[] = {5, 8, 3, 6, 2, 8, 1}, odd[] = {3, 1, 5, 1, 2, 4, 2, 3};
    check_first_fit("fit1", uneven, 7, 1);
    check_first_fit("fit2", odd, 8, 2);
    check_first_fit("fit2b", uneven, 7, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gang_not_starved),
        cmocka_unit_test(test_reserve_plan),
        cmocka_unit_test(test_first_fit_at_submission),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_scheduler_dispatch.c — trials are created only when they can run:
 * the dispatcher asks a searcher for a new trial only when that trial could
 * be placed now, and an ASHA promotion takes a freed slot before any new
 * trial (the real core on a real store; the agents are played by calling
 * the heartbeat entry point directly, as in test_scheduler_backfill.c).
 *
 *   - 1 agent with 2 slots, a TPE and an ASHA experiment with max_trials 20
 *     and no max_concurrent_trials: at most 2 trials exist before any
 *     report, however many heartbeats and ticks pass; none on a farm
 *     without free slots; the default max_concurrent_trials is reported.
 *   - ASHA (eta 2, rungs 1 and 2 epochs): when the second rung-0 result
 *     arrives, the freed slot goes to the promotion of the better trial
 *     (same trial id, attempt 2, budget 2), not to a new trial; the
 *     promotion goes back to its own agent when that has room.
 *   - trial.launcher "mpirun": rank 0's assignment carries the placement
 *     ("hosts"), the others "hold"; kills reach holders only after rank 0
 *     exited; rank 0's exit code decides the outcome; slots come back.
 *   - an agent declared LOST that comes back still running its old attempt
 *     gets a "stale attempt" kill and no new trial on the slot that process
 *     holds until it stops listing it; that attempt's metrics are answered
 *     in "rejected" (not stored), not silently acknowledged.
 *   - after every heartbeat, each experiment's cached trial table
 *     (sched_experiment_trials_text) is byte for byte what serializing a
 *     freshly built one gives (no stale view after any change).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "dispatch"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

/* The cached trial table of every experiment equals a fresh build. */
static void check_views(sched *c)
{
    json_t *l = NULL;
    assert_int_equal(sched_experiment_list(c, 0, &l), 0);
    json_t *xs = json_object_get(l, "experiments");
    for (size_t i = 0; i < json_array_size(xs); i++) {
        int64_t id = json_integer_value(json_object_get(json_array_get(xs, i), "id"));
        json_t *fresh = NULL;
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(sched_experiment_trials(c, id, &fresh), 0);
        assert_int_equal(sched_experiment_trials_text(c, id, &text, &len), 0);
        char *want = json_dumps(fresh, JSON_COMPACT | JSON_REAL_PRECISION(15));
        assert_non_null(want);
        assert_int_equal(len, strlen(text));
        assert_string_equal(text, want);
        free(want);
        free(text);
        json_decref(fresh);
    }
    assert_int_equal(sched_experiment_trials_text(c, 999999, &(char *){NULL}, &(size_t){0}), HF_ENOTFOUND);
    json_decref(l);
}

typedef struct run { int64_t trial, attempt, agent, budget; } run;
static run runs[64];
static int nruns;

/* Heartbeat agent aid with events and metrics (JSON array texts); record
 * the reply's assignments, RET how many there were. */
static int hb(sched *c, int64_t aid, const char *events, const char *metrics)
{
    char body[4096];
    snprintf(body, sizeof body, "{\"running\": [], \"events\": %s, \"metrics\": %s}", events, metrics);
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr e;
    assert_int_equal(sched_agent_heartbeat(c, aid, b, &out, &e), 0);
    json_t *as = json_object_get(out, "assign");
    for (size_t i = 0; i < json_array_size(as); i++) {
        json_t *a = json_array_get(as, i);
        int64_t me = json_integer_value(json_object_get(a, "budget"));   /* HYPERFARM_MAX_EPOCHS */
        assert_true(nruns < 64);
        runs[nruns++] = (run){json_integer_value(json_object_get(a, "trial_id")),
                              json_integer_value(json_object_get(a, "attempt")), aid, me};
    }
    int n = (int)json_array_size(as);
    json_decref(out);
    json_decref(b);
    check_views(c);
    return n;
}

/* r started, reported objective v at epoch ep, and exited 0. */
static int finish(sched *c, const run *r, int ep, double v)
{
    char ev[512], met[512];
    snprintf(ev, sizeof ev,
             "[{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"started\", \"time\": 1, \"pid\": 100},"
             " {\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"exited\", \"time\": 2, \"pid\": 100,"
             " \"exit_code\": 0}]", (long long)r->trial, (long long)r->attempt, (long long)r->trial,
             (long long)r->attempt);
    snprintf(met, sizeof met, "[{\"trial_id\": %lld, \"attempt\": %lld, \"step\": %d, \"epoch\": %d,"
             " \"values\": {\"m\": %g}}]", (long long)r->trial, (long long)r->attempt, ep * 10, ep, v);
    return hb(c, r->agent, ev, met);
}


static int64_t ntrials(sched *c, int64_t exp)
{
    json_t *out = NULL;
    assert_int_equal(sched_experiment_trials(c, exp, &out), 0);
    int64_t n = (int64_t)json_array_size(json_object_get(out, "trials"));
    json_decref(out);
    return n;
}

static int64_t exp_int(sched *c, int64_t exp, const char *key)
{
    json_t *out = NULL;
    assert_int_equal(sched_experiment_get(c, exp, &out), 0);
    int64_t v = json_integer_value(json_object_get(out, key));
    json_decref(out);
    return v;
}

static void open_core(const char *name, store **s, sched **c)
{
    char path[320];
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    unit_open_core(path, NULL, s, c);
    nruns = 0;
}

#define SPACE "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}," \
              "\"trial\": {\"command\": [\"true\"]}}"

/* Metrics alone (no state change) must refresh the cached views: latest
 * falls while best and objective stay, the trial stays RUNNING. */
static void test_cached_views_follow_metrics(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    open_core("views", &s, &c);
    unit_submit(c, "{\"name\": \"v\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
              "\"searcher\": {\"name\": \"random\", \"max_trials\": 3, \"seed\": 1}," SPACE);
    int64_t a1 = unit_register(c, "a1", 1);
    hb(c, a1, "[]", "[]");
    assert_int_equal(nruns, 1);
    char ev[256], met[256];
    snprintf(ev, sizeof ev, "[{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"started\", \"time\": 1,"
             " \"pid\": 100}]", (long long)runs[0].trial, (long long)runs[0].attempt);
    hb(c, a1, ev, "[]");
    for (int ep = 1; ep <= 3; ep++) {   /* check_views() runs after each */
        snprintf(met, sizeof met, "[{\"trial_id\": %lld, \"attempt\": %lld, \"epoch\": %d,"
                 " \"values\": {\"m\": %g}}]", (long long)runs[0].trial, (long long)runs[0].attempt, ep, 1.0 - 0.25 * ep);
        hb(c, a1, "[]", met);
    }
    json_t *tv = NULL;
    assert_int_equal(sched_trial_get(c, runs[0].trial, &tv), 0);
    assert_string_equal(json_string_value(json_object_get(tv, "state")), "RUNNING");
    assert_true(json_number_value(json_object_get(json_object_get(tv, "latest"), "m")) == 0.25);
    json_decref(tv);
    sched_free(c);
    store_close(s);
}

static void test_created_only_when_placeable(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    open_core("placeable", &s, &c);

    /* No agent yet: nothing can be placed, so nothing is created. */
    int64_t xt = unit_submit(c, "{\"name\": \"tpe\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                           "\"searcher\": {\"name\": \"tpe\", \"max_trials\": 20, \"seed\": 1}," SPACE);
    assert_int_equal(ntrials(c, xt), 0);
    assert_int_equal(exp_int(c, xt, "max_concurrent_trials"), 16);   /* the adaptive default */

    int64_t a1 = unit_register(c, "a1", 2);
    for (int i = 0; i < 5; i++) {
        hb(c, a1, "[]", "[]");
        sched_tick(c);
    }
    assert_int_equal(ntrials(c, xt), 2);
    assert_int_equal(nruns, 2);

    /* A second (ASHA) experiment on the full farm: no slot, no trial. */
    int64_t xa = unit_submit(c, "{\"name\": \"asha\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                           "\"searcher\": {\"name\": \"asha\", \"max_trials\": 20, \"max_epochs\": 4, \"seed\": 1},"
                           SPACE);
    for (int i = 0; i < 5; i++) {
        hb(c, a1, "[]", "[]");
        sched_tick(c);
    }
    assert_int_equal(ntrials(c, xa), 0);
    assert_int_equal(ntrials(c, xt), 2);

    /* A 2-slot agent joins: ASHA gets both (fair share), no more. */
    int64_t a2 = unit_register(c, "a2", 2);
    for (int i = 0; i < 5; i++) {
        hb(c, a2, "[]", "[]");
        sched_tick(c);
    }
    assert_int_equal(ntrials(c, xa), 2);
    assert_int_equal(ntrials(c, xt), 2);
    assert_int_equal(nruns, 4);

    /* Random keeps max_trials as its default (parallelism costs it nothing). */
    int64_t xr = unit_submit(c, "{\"name\": \"rnd\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                           "\"searcher\": {\"name\": \"random\", \"max_trials\": 40, \"seed\": 1}," SPACE);
    assert_int_equal(exp_int(c, xr, "max_concurrent_trials"), 40);
    assert_int_equal(ntrials(c, xr), 0);

    sched_free(c);
    store_close(s);
}

/* One heartbeat with a full body; RET the reply (caller frees). */
static json_t *hb_body(sched *c, int64_t aid, const char *body)
{
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr e;
    assert_int_equal(sched_agent_heartbeat(c, aid, b, &out, &e), 0);
    json_decref(b);
    return out;
}

static void test_stale_attempt_keeps_slot(void **state)
{
    (void)state;
    char path[320], body[1024];
    store *s = NULL;
    sched *c = NULL;
    sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.agent_timeout_ms = 200;
    snprintf(path, sizeof path, "%s/stale.db", dir);
    unit_open_core(path, &cfg, &s, &c);
    nruns = 0;

    int64_t a1 = unit_register(c, "a1", 1);
    unit_submit(c, "{\"name\": \"r\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
              "\"searcher\": {\"name\": \"random\", \"max_trials\": 3, \"seed\": 1}," SPACE);
    assert_int_equal(hb(c, a1, "[]", "[]"), 1);
    int64_t t = runs[0].trial;
    snprintf(body, sizeof body, "{\"running\": [{\"trial_id\": %lld, \"attempt\": 1, \"pid\": 7}], \"events\":"
             " [{\"trial_id\": %lld, \"attempt\": 1, \"type\": \"started\", \"time\": 1, \"pid\": 7}]}",
             (long long)t, (long long)t);
    json_decref(hb_body(c, a1, body));

    /* Silence past the timeout: LOST, the attempt fails and is requeued. */
    usleep(300 * 1000);
    sched_tick(c);

    /* Back, still running attempt 1 (a partition): kill it, place nothing
     * on its slot, and say its metrics were not stored. */
    snprintf(body, sizeof body, "{\"running\": [{\"trial_id\": %lld, \"attempt\": 1, \"pid\": 7}], \"metrics\":"
             " [{\"trial_id\": %lld, \"attempt\": 1, \"step\": 1, \"values\": {\"m\": 0.5, \"n\": 1}}]}",
             (long long)t, (long long)t);
    for (int i = 0; i < 3; i++) {
        json_t *out = hb_body(c, a1, body);
        sched_tick(c);
        assert_int_equal(json_array_size(json_object_get(out, "assign")), 0);
        if (i == 0) {
            json_t *k = json_array_get(json_object_get(out, "kill"), 0);
            assert_non_null(k);
            assert_int_equal(json_integer_value(json_object_get(k, "trial_id")), t);
            assert_string_equal(json_string_value(json_object_get(k, "reason")), "stale attempt");
        }
        json_t *rej = json_object_get(out, "rejected");
        assert_int_equal(json_integer_value(json_object_get(rej, "metrics")), 1);
        json_decref(out);
    }
    json_t *tv = NULL;
    assert_int_equal(sched_trial_get(c, t, &tv), 0);
    assert_null(json_object_get(json_object_get(tv, "latest"), "m"));   /* nothing of it was stored */
    json_decref(tv);

    /* The stale process is gone: the slot is free again. */
    json_t *out = hb_body(c, a1, "{\"running\": []}");
    assert_int_equal(json_array_size(json_object_get(out, "assign")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(out, "rejected"), "metrics")), 0);
    json_decref(out);

    sched_free(c);
    store_close(s);
}

/* report_gap_ms, the least gap between an agent's heartbeats for prompt
 * reports, scales with the farm as the interval does: alive agents x 1000
 * / heartbeat_rate, at least 20 ms (docs/protocol.md). */
static void test_report_gap_scales(void **state)
{
    (void)state;
    char path[320], name[16];
    store *s = NULL;
    sched *c = NULL;
    sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.heartbeat_rate = 10;            /* heartbeats a second for the whole farm */
    cfg.agent_timeout_ms = 60000;
    snprintf(path, sizeof path, "%s/gap.db", dir);
    unit_open_core(path, &cfg, &s, &c);
    int64_t a1 = unit_register(c, "a1", 1);
    json_t *out = hb_body(c, a1, "{\"running\": []}");
    assert_int_equal(json_integer_value(json_object_get(out, "report_gap_ms")), 20);   /* before a tick */
    json_decref(out);
    sched_tick(c);
    out = hb_body(c, a1, "{\"running\": []}");
    assert_int_equal(json_integer_value(json_object_get(out, "report_gap_ms")), 100);  /* 1 x 1000 / 10 */
    json_decref(out);
    for (int i = 2; i <= 8; i++) {
        snprintf(name, sizeof name, "a%d", i);
        unit_register(c, name, 1);
    }
    sched_tick(c);
    out = hb_body(c, a1, "{\"running\": []}");
    assert_int_equal(json_integer_value(json_object_get(out, "report_gap_ms")), 800);  /* 8 x 1000 / 10 */
    json_decref(out);
    sched_free(c);
    store_close(s);

    sched_config_defaults(&cfg);        /* the default 1000/s: a small farm gets the floor */
    snprintf(path, sizeof path, "%s/gap2.db", dir);
    unit_open_core(path, &cfg, &s, &c);
    a1 = unit_register(c, "a1", 1);
    sched_tick(c);
    out = hb_body(c, a1, "{\"running\": []}");
    assert_int_equal(json_integer_value(json_object_get(out, "report_gap_ms")), 20);
    json_decref(out);
    sched_free(c);
    store_close(s);
}

static void test_promotion_before_new_trial(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    open_core("promote", &s, &c);
    int64_t a1 = unit_register(c, "a1", 2);
    int64_t x = unit_submit(c, "{\"name\": \"asha\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                          "\"searcher\": {\"name\": \"asha\", \"max_trials\": 20, \"max_epochs\": 2,"
                          " \"min_epochs\": 1, \"reduction_factor\": 2, \"seed\": 3}," SPACE);
    hb(c, a1, "[]", "[]");
    assert_int_equal(nruns, 2);
    assert_int_equal(ntrials(c, x), 2);
    run t1 = runs[0], t2 = runs[1];
    assert_int_equal(t1.budget, 1);

    /* t1 ends rung 0 (1 epoch) alone: nothing to promote, a new trial t3. */
    assert_int_equal(finish(c, &t1, 1, 0.9), 1);
    assert_int_equal(ntrials(c, x), 3);
    run t3 = runs[2];
    assert_true(t3.trial != t1.trial && t3.trial != t2.trial);

    /* t2 ends rung 0 worse: t1 is the top 1 of 2 and is promoted into the
     * freed slot (attempt 2, budget 2); no new trial is created. */
    assert_int_equal(finish(c, &t2, 1, 0.5), 1);
    run p = runs[3];
    assert_int_equal(p.trial, t1.trial);
    assert_int_equal(p.attempt, 2);
    assert_int_equal(p.budget, 2);
    assert_int_equal(ntrials(c, x), 3);

    /* t3 ends rung 0 best: the next promotion is t3 (top 1 of 3), again
     * before any new trial. */
    assert_int_equal(finish(c, &t3, 1, 0.95), 1);
    run p3 = runs[4];
    assert_int_equal(p3.trial, t3.trial);
    assert_int_equal(p3.budget, 2);
    assert_int_equal(ntrials(c, x), 3);

    /* The promoted t1 finishes its top rung: now a new trial. */
    assert_int_equal(finish(c, &p, 2, 0.91), 1);
    assert_int_equal(ntrials(c, x), 4);
    assert_int_equal(runs[5].budget, 1);

    sched_free(c);
    store_close(s);
}

/* A promotion goes back to the agent of its trial's last attempt when it
 * has room, though another agent comes first in order: the checkpoint the
 * rung's report came with is on disk there, and its upload to the store
 * (none here) may not have landed yet (dispatch.c, trial_place). */
static void test_promotion_returns_to_its_agent(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    open_core("return", &s, &c);
    int64_t a1 = unit_register(c, "a1", 1), a2 = unit_register(c, "a2", 1);
    unit_submit(c, "{\"name\": \"asha\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                   "\"searcher\": {\"name\": \"asha\", \"max_trials\": 2, \"max_concurrent_trials\": 2,"
                   " \"max_epochs\": 2, \"min_epochs\": 1, \"reduction_factor\": 2, \"seed\": 3}," SPACE);
    assert_int_equal(hb(c, a1, "[]", "[]"), 1);
    assert_int_equal(hb(c, a2, "[]", "[]"), 1);
    run on1 = runs[0], on2 = runs[1];
    assert_int_equal(on1.agent, a1);
    assert_int_equal(on2.agent, a2);
    /* a1's trial ends rung 0 worse: nothing to promote yet, no new trial
     * (max_trials), a1 stays free. a2's ends better: promoted into a2's
     * own freed slot, not into a1 (first in order). */
    assert_int_equal(finish(c, &on1, 1, 0.5), 0);
    assert_int_equal(finish(c, &on2, 1, 0.9), 1);
    assert_int_equal(runs[2].trial, on2.trial);
    assert_int_equal(runs[2].attempt, 2);
    assert_int_equal(runs[2].agent, a2);
    assert_int_equal(hb(c, a1, "[]", "[]"), 0);
    sched_free(c);
    store_close(s);
}

/* Heartbeat aid with events (JSON text); RET the reply (caller frees). */
static json_t *hb_reply(sched *c, int64_t aid, const char *events)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"running\": [], \"events\": %s}", events);
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr e;
    assert_int_equal(sched_agent_heartbeat(c, aid, b, &out, &e), 0);
    json_decref(b);
    return out;
}

static void ev(char *buf, size_t len, int64_t trial, int rank, const char *type, int code)
{
    snprintf(buf, len, "[{\"trial_id\": %lld, \"attempt\": 1, \"rank\": %d, \"type\": \"%s\", \"time\": 1,"
             " \"pid\": 100, \"exit_code\": %d}]", (long long)trial, rank, type, code);
}

static const char *trial_state(sched *c, int64_t tid, int64_t *exit_code)
{
    static char st[16];
    json_t *out = NULL;
    assert_int_equal(sched_trial_get(c, tid, &out), 0);
    snprintf(st, sizeof st, "%s", json_string_value(json_object_get(out, "state")));
    if (exit_code) *exit_code = json_integer_value(json_object_get(out, "exit_code"));
    json_decref(out);
    return st;
}

/* trial.launcher "mpirun": rank 0's assignment lists the placement as
 * hosts, the other rank holds; a kill reaches the holder only after rank
 * 0 (mpirun) exited; rank 0's exit code is the outcome. */
static void test_mpirun_launcher(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    open_core("launcher", &s, &c);
    json_t *b = json_loads("{\"name\": \"h1\", \"slots\": 1, \"host\": \"10.0.0.1\"}", 0, NULL), *out = NULL;
    hf_jerr je;
    assert_int_equal(sched_agent_register(c, b, "127.0.0.1", &out, &je), 0);
    int64_t a1 = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    json_decref(b);
    b = json_loads("{\"name\": \"h2\", \"slots\": 1, \"host\": \"10.0.0.2\"}", 0, NULL);
    assert_int_equal(sched_agent_register(c, b, "127.0.0.1", &out, &je), 0);
    int64_t a2 = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    json_decref(b);

    json_t *bad = json_loads("{\"name\": \"x\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                             "\"searcher\": {\"name\": \"random\", \"max_trials\": 1}, \"hyperparameters\": {},"
                             "\"trial\": {\"command\": [\"true\"], \"launcher\": \"srun\"}}", 0, NULL);
    int64_t bid = 0;
    assert_int_equal(sched_experiment_submit(c, bad, &bid, &je), HF_EINVAL);
    assert_string_equal(je.field, "trial.launcher");
    json_decref(bad);

    const char *exp = "{\"name\": \"mpi\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                      "\"searcher\": {\"name\": \"random\", \"max_trials\": 2, \"max_concurrent_trials\": 1},"
                      "\"hyperparameters\": {},"
                      "\"trial\": {\"command\": [\"mpirun\", \"--hostfile\", \"{hostfile}\", \"x\"],"
                      "\"launcher\": \"mpirun\", \"resources\": {\"workers\": 2, \"slots_per_worker\": 1}}}";
    int64_t x = unit_submit(c, exp);
    assert_int_equal(ntrials(c, x), 1);
    json_t *r1 = hb_reply(c, a1, "[]"), *r2 = hb_reply(c, a2, "[]");
    json_t *as1 = json_array_get(json_object_get(r1, "assign"), 0), *as2 = json_array_get(json_object_get(r2, "assign"), 0);
    assert_non_null(as1);
    assert_non_null(as2);
    json_t *r0 = json_integer_value(json_object_get(as1, "rank")) == 0 ? as1 : as2;
    json_t *rh = r0 == as1 ? as2 : as1;
    int64_t agent0 = r0 == as1 ? a1 : a2, agenth = r0 == as1 ? a2 : a1;
    int64_t tid = json_integer_value(json_object_get(r0, "trial_id"));
    assert_string_equal(json_string_value(json_object_get(r0, "launcher")), "mpirun");
    assert_string_equal(json_string_value(json_object_get(rh, "launcher")), "mpirun");
    assert_null(json_object_get(r0, "hold"));
    assert_true(json_is_true(json_object_get(rh, "hold")));
    assert_null(json_object_get(rh, "hosts"));
    char *hosts = json_dumps(json_object_get(r0, "hosts"), JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(hosts, agent0 == a1 ? "[{\"host\":\"10.0.0.1\",\"slots\":1},{\"host\":\"10.0.0.2\",\"slots\":1}]"
                                            : "[{\"host\":\"10.0.0.2\",\"slots\":1},{\"host\":\"10.0.0.1\",\"slots\":1}]");
    free(hosts);
    json_decref(r1);
    json_decref(r2);

    /* Both start; a user kill goes to mpirun only, the holder keeps its slot. */
    char e[512];
    ev(e, sizeof e, tid, 0, "started", 0);
    json_decref(hb_reply(c, agent0, e));
    ev(e, sizeof e, tid, 1, "started", 0);
    json_decref(hb_reply(c, agenth, e));
    assert_string_equal(trial_state(c, tid, NULL), "RUNNING");
    assert_int_equal(sched_trial_kill(c, tid, &out, &je), 0);
    json_decref(out);
    json_t *k0 = hb_reply(c, agent0, "[]"), *kh = hb_reply(c, agenth, "[]");
    assert_int_equal(json_array_size(json_object_get(k0, "kill")), 1);
    assert_int_equal(json_array_size(json_object_get(kh, "kill")), 0);
    json_decref(k0);
    json_decref(kh);
    /* mpirun exits (SIGTERM): now the holder is told to go. */
    ev(e, sizeof e, tid, 0, "exited", 143);
    json_decref(hb_reply(c, agent0, e));
    assert_string_equal(trial_state(c, tid, NULL), "RUNNING");
    kh = hb_reply(c, agenth, "[]");
    assert_int_equal(json_array_size(json_object_get(kh, "kill")), 1);
    json_decref(kh);
    ev(e, sizeof e, tid, 1, "exited", 143);
    json_t *next = hb_reply(c, agenth, e);
    assert_string_equal(trial_state(c, tid, NULL), "CANCELED");

    /* The second trial: mpirun exits 0, the holder is released with a kill
     * and its SIGTERM exit does not spoil the outcome: COMPLETED, code 0. */
    /* (the holder's agent got its part in the reply to its exit) */
    json_t *other = hb_reply(c, agenth == a1 ? a2 : a1, "[]");
    json_t *all = json_array();
    json_array_extend(all, json_object_get(next, "assign"));
    json_array_extend(all, json_object_get(other, "assign"));
    assert_int_equal(json_array_size(all), 2);
    json_t *first = json_array_get(all, 0);
    int first_on_h = json_array_size(json_object_get(next, "assign")) > 0;
    int64_t first_agent = first_on_h ? agenth : (agenth == a1 ? a2 : a1);
    agent0 = json_integer_value(json_object_get(first, "rank")) == 0 ? first_agent : (first_agent == a1 ? a2 : a1);
    agenth = agent0 == a1 ? a2 : a1;
    int64_t t2 = json_integer_value(json_object_get(first, "trial_id"));
    assert_true(t2 != tid);
    json_decref(all);
    json_decref(other);
    json_decref(next);
    ev(e, sizeof e, t2, 0, "started", 0);
    json_decref(hb_reply(c, agent0, e));
    ev(e, sizeof e, t2, 1, "started", 0);
    json_decref(hb_reply(c, agenth, e));
    ev(e, sizeof e, t2, 0, "exited", 0);
    json_decref(hb_reply(c, agent0, e));
    kh = hb_reply(c, agenth, "[]");
    assert_int_equal(json_array_size(json_object_get(kh, "kill")), 1);
    json_decref(kh);
    ev(e, sizeof e, t2, 1, "exited", 143);
    json_decref(hb_reply(c, agenth, e));
    int64_t code = -1;
    assert_string_equal(trial_state(c, t2, &code), "COMPLETED");
    assert_int_equal(code, 0);
    assert_int_equal(sched_agent_list(c, &out), 0);
    json_t *ag;
    size_t i;
    json_array_foreach(json_object_get(out, "agents"), i, ag)
        assert_int_equal(json_integer_value(json_object_get(ag, "slots_used")), 0);
    json_decref(out);
    sched_free(c);
    store_close(s);
}

/* Operator events posted from outside the core (the replication log's
 * degraded/fenced hook, docs/scheduler.md "Standby and failover") become
 * events rows at the next tick, with the time they were posted, no
 * experiment or trial; beyond SCHED_POSTED_MAX waiting the oldest are
 * dropped and counted, never blocking the poster. */
static void test_posted_events(void **state)
{
    (void)state;
    store *s;
    sched *c;
    open_core("posted", &s, &c);
    sqlite3 *db = store_db(s);
    const char *q = "SELECT count(*) FROM events WHERE type LIKE 'OP_%'";
    sched_post_event(c, "OP_ONE", "the first");
    sched_post_event(c, "OP_TWO", NULL);
    assert_int_equal(unit_one_int(db, q), 0);          /* not before the tick */
    sched_tick(c);
    assert_int_equal(unit_one_int(db, q), 2);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type = 'OP_ONE' AND detail = 'the first' "
                                      "AND experiment_id IS NULL AND trial_id IS NULL AND user_name IS NULL"), 1);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type = 'OP_TWO' AND detail IS NULL"), 1);
    /* ordered as posted */
    assert_true(unit_one_int(db, "SELECT id FROM events WHERE type = 'OP_ONE'") <
                unit_one_int(db, "SELECT id FROM events WHERE type = 'OP_TWO'"));
    sched_tick(c);
    assert_int_equal(unit_one_int(db, q), 2);          /* written once */
    /* overflow: the oldest go, the newest SCHED_POSTED_MAX stay */
    char ty[32];
    for (int i = 0; i < 40; i++) {
        snprintf(ty, sizeof ty, "OP_N%02d", i);
        sched_post_event(c, ty, "x");
    }
    assert_int_equal(sched_posted_dropped(c), 8);
    sched_tick(c);
    assert_int_equal(unit_one_int(db, q), 2 + 32);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type IN ('OP_N00', 'OP_N07')"), 0);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type IN ('OP_N08', 'OP_N39')"), 2);
    /* a long type and detail are cut, not overflowed */
    char big[600];
    memset(big, 'D', sizeof big - 1);
    big[sizeof big - 1] = 0;
    sched_post_event(c, "OP_A_TYPE_NAME_LONGER_THAN_THIRTY_ONE_BYTES", big);
    sched_tick(c);
    assert_int_equal(unit_one_int(db, "SELECT length(type) FROM events WHERE type LIKE 'OP_A_TYPE%'"), 31);
    assert_int_equal(unit_one_int(db, "SELECT length(detail) FROM events WHERE type LIKE 'OP_A_TYPE%'"), 223);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_views_follow_metrics),
        cmocka_unit_test(test_created_only_when_placeable),
        cmocka_unit_test(test_promotion_before_new_trial),
        cmocka_unit_test(test_promotion_returns_to_its_agent),
        cmocka_unit_test(test_mpirun_launcher),
        cmocka_unit_test(test_posted_events),
        cmocka_unit_test(test_report_gap_scales),
        cmocka_unit_test(test_stale_attempt_keeps_slot),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

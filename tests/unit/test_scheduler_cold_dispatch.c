/*
 * test_scheduler_cold_dispatch.c — cold dispatch (docs/scheduler.md, "Cold
 * dispatch"): an experiment submitted to idle agents that keep a long-poll
 * open reaches all of them through the doorbell and the push, in a bounded
 * number of passes and messages and without a heartbeat round trip first
 * (the real core on a real store; the doorbell and the long-poll's
 * sched_agent_take_assign are played by direct calls, as the HTTP layer
 * makes them).
 *
 *   - 20 idle agents × 4 slots, one experiment of 80 trials, a kick set
 *     (as cron.c sets it): the submission places the first DISPATCH_CHUNK
 *     trials, rings their agents after its commit and kicks once; one
 *     sched_dispatch_more places the rest (2 passes in all). Every agent
 *     is rung once, and one take per agent hands it its 4 assignments
 *     (0 heartbeats); a second take hands nothing; the first heartbeat of
 *     each agent reports them started and all 80 trials are RUNNING; no
 *     heartbeat reply sends any of them again.
 *   - without a kick (a core without cron.c, as before) one pass places
 *     everything at the submission.
 *   - a push whose long-poll answer is lost: a heartbeat that does not
 *     list it as running gets it again, but only SCHED_PUSH_RESEND_MS after
 *     the push (earlier it may still be on its way); sched_agent_pending is
 *     false for a pushed assignment (nothing left to fetch).
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

#define NAG 20
#define SLOTS 4

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "cold"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

/* The doorbell and the kick, counted. */
static int64_t rung[4096];
static int nrung, nkick;

static void ring(void *ctx, int64_t agent_id)
{
    (void)ctx;
    if (nrung < 4096) rung[nrung++] = agent_id;
}

static void kick(void *ctx) { (void)ctx; nkick++; }

static int rings_of(int64_t aid)
{
    int n = 0;
    for (int i = 0; i < nrung; i++) n += rung[i] == aid;
    return n;
}

static const char *const EXP =
    "{\"name\": \"cold\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
    "\"searcher\": {\"name\": \"random\", \"max_trials\": 80, \"max_concurrent_trials\": 80, \"seed\": 1},"
    "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
    "\"trial\": {\"command\": [\"true\"], \"max_restarts\": 0}}";

static void open_core(const char *name, store **s, sched **c, int with_kick, int64_t *aids)
{
    char path[320], nm[32];
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    unit_open_core(path, NULL, s, c);
    nrung = nkick = 0;
    sched_set_doorbell(*c, ring, NULL);
    if (with_kick) sched_set_kick(*c, kick, NULL);
    for (int i = 0; i < NAG; i++) {
        snprintf(nm, sizeof nm, "a%02d", i);
        aids[i] = unit_register(*c, nm, SLOTS);
    }
    nrung = 0;
}

/* A heartbeat of aid with the given running and events texts. RET the
 * reply's assignments (count). */
static int hb(sched *c, int64_t aid, const char *running, const char *events)
{
    char body[8192];
    snprintf(body, sizeof body, "{\"running\": %s, \"events\": %s, \"metrics\": []}", running, events);
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr e;
    assert_int_equal(sched_agent_heartbeat(c, aid, b, &out, &e), 0);
    int n = (int)json_array_size(json_object_get(out, "assign"));
    json_decref(out);
    json_decref(b);
    return n;
}

/* "started" events and the running list for the assignments in as. */
static void started_of(const json_t *as, char *ev, size_t evlen, char *run, size_t runlen)
{
    size_t eo = 0, ro = 0;
    eo += (size_t)snprintf(ev + eo, evlen - eo, "[");
    ro += (size_t)snprintf(run + ro, runlen - ro, "[");
    for (size_t i = 0; i < json_array_size(as); i++) {
        const json_t *a = json_array_get(as, i);
        long long t = json_integer_value(json_object_get(a, "trial_id")),
                  att = json_integer_value(json_object_get(a, "attempt"));
        eo += (size_t)snprintf(ev + eo, evlen - eo, "%s{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"started\","
                               " \"time\": 1, \"pid\": %lld}", i ? "," : "", t, att, 1000 + t);
        ro += (size_t)snprintf(run + ro, runlen - ro, "%s{\"trial_id\": %lld, \"attempt\": %lld, \"pid\": %lld}",
                               i ? "," : "", t, att, 1000 + t);
    }
    snprintf(ev + eo, evlen - eo, "]");
    snprintf(run + ro, runlen - ro, "]");
}

static int64_t count_state(sched *c, int64_t exp, const char *state)
{
    json_t *out = NULL;
    assert_int_equal(sched_experiment_trials(c, exp, &out), 0);
    json_t *ts = json_object_get(out, "trials");
    int64_t n = 0;
    for (size_t i = 0; i < json_array_size(ts); i++)
        n += strcmp(json_string_value(json_object_get(json_array_get(ts, i), "state")), state) == 0;
    json_decref(out);
    return n;
}

static void test_burst_reaches_every_agent(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    int64_t aids[NAG];
    open_core("burst", &s, &c, 1, aids);
    int64_t x = unit_submit(c, EXP);
    /* The submission's pass stopped at the chunk: its agents are rung,
     * the kick asks for the rest. */
    assert_int_equal(nkick, 1);
    assert_int_equal(count_state(c, x, "ASSIGNED"), 64);
    assert_int_equal(nrung, 64 / SLOTS);
    sched_dispatch_more(c);
    assert_int_equal(count_state(c, x, "ASSIGNED"), 80);
    assert_int_equal(nkick, 1);   /* the last pass finished the burst */
    sched_dispatch_more(c);       /* nothing left: no transaction, no ring */
    assert_int_equal(nrung, NAG);
    for (int i = 0; i < NAG; i++) {
        assert_int_equal(rings_of(aids[i]), 1);
        int pending = 0;
        assert_int_equal(sched_agent_pending(c, aids[i], &pending), 0);
        assert_int_equal(pending, 1);
        json_t *as = NULL, *none = NULL;
        assert_int_equal(sched_agent_take_assign(c, aids[i], &as), 0);
        assert_int_equal(json_array_size(as), SLOTS);
        assert_int_equal(sched_agent_pending(c, aids[i], &pending), 0);
        assert_int_equal(pending, 0);   /* pushed: nothing left to fetch */
        assert_int_equal(sched_agent_take_assign(c, aids[i], &none), 0);
        assert_int_equal(json_array_size(none), 0);
        json_decref(none);
        char ev[4096], run[4096];
        started_of(as, ev, sizeof ev, run, sizeof run);
        assert_int_equal(hb(c, aids[i], run, ev), 0);   /* nothing sent twice */
        json_decref(as);
    }
    assert_int_equal(count_state(c, x, "RUNNING"), 80);
    assert_int_equal(nrung, NAG);   /* one ring per agent, in all */
    json_t *unknown = NULL;
    assert_int_equal(sched_agent_take_assign(c, 999999, &unknown), HF_ENOTFOUND);
    sched_free(c);
    store_close(s);
}

static void test_no_kick_places_all_at_once(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    int64_t aids[NAG];
    open_core("nokick", &s, &c, 0, aids);
    int64_t x = unit_submit(c, EXP);
    assert_int_equal(count_state(c, x, "ASSIGNED"), 80);
    assert_int_equal(nrung, NAG);
    /* The heartbeat path is unchanged: the reply carries them. */
    assert_int_equal(hb(c, aids[0], "[]", "[]"), SLOTS);
    sched_free(c);
    store_close(s);
}

static void test_lost_push_sent_again(void **state)
{
    (void)state;
    store *s = NULL;
    sched *c = NULL;
    int64_t aids[NAG];
    open_core("lost", &s, &c, 1, aids);
    unit_submit(c, EXP);
    sched_dispatch_more(c);
    json_t *as = NULL;
    assert_int_equal(sched_agent_take_assign(c, aids[0], &as), 0);
    assert_int_equal(json_array_size(as), SLOTS);
    /* The answer is lost: the agent heartbeats without them. Too early to
     * tell from one still on its way: nothing. */
    assert_int_equal(hb(c, aids[0], "[]", "[]"), 0);
    usleep((SCHED_PUSH_RESEND_MS + 100) * 1000);
    assert_int_equal(hb(c, aids[0], "[]", "[]"), SLOTS);
    assert_int_equal(hb(c, aids[0], "[]", "[]"), 0);   /* once */
    /* An agent that got its push lists it as running: never sent again. */
    json_t *as1 = NULL;
    assert_int_equal(sched_agent_take_assign(c, aids[1], &as1), 0);
    char ev[4096], run[4096];
    started_of(as1, ev, sizeof ev, run, sizeof run);
    usleep((SCHED_PUSH_RESEND_MS + 100) * 1000);
    assert_int_equal(hb(c, aids[1], run, "[]"), 0);
    json_decref(as1);
    json_decref(as);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    hf_log_set_level(HF_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_reaches_every_agent),
        cmocka_unit_test(test_no_kick_places_all_at_once),
        cmocka_unit_test(test_lost_push_sent_again),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

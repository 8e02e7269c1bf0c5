/*
 * test_scheduler_agent_scope.c — an agent token's authority in the core
 * (scheduler/core/sched_token.c, sched_heartbeat.c, sched_ckpt.c; docs/protocol.md "Roles"): the
 * real core on a real store, the agents played by calling the entry points
 * with the holder name their token would carry.
 *
 *   - binding: a named token registers and speaks only for the agent of
 *     its name; the shared one ("agent") only for agents no named token
 *     owns; the binding survives a restart (agents.holder);
 *   - reports: agent b, with its own token and id, reporting a forged
 *     `exited` and a metric for a's running trial gets them refused (409
 *     each, listed), never applied, recorded with b as the user; its honest
 *     items of the same heartbeat are applied; a's honest late report for
 *     its own older attempt stays a plain "rejected" (not refused);
 *   - checkpoints: only the agent that runs the attempt may store one, and
 *     after the attempt ended only a step it reported while it ran.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "agentscope"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

#define EXP(n) "{\"name\": \"scope\", \"objective\": {\"metric\": \"acc\", \"goal\": \"maximize\"}," \
               "\"searcher\": {\"name\": \"random\", \"max_trials\": " #n ", \"seed\": 1}," \
               "\"hyperparameters\": {\"x\": 1}," \
               "\"trial\": {\"command\": [\"true\"], \"max_restarts\": 2}}"

/* Register name with the token of holder; RET rc, *id its id. */
static int reg(sched *c, const char *name, const char *holder, int64_t *id, hf_jerr *e)
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\", \"slots\": 1}", name);
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    int rc = sched_agent_register_as(c, b, "127.0.0.1", holder, &out, e);
    if (id) *id = rc ? 0 : json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    json_decref(b);
    return rc;
}

/* Heartbeat aid with body as holder; RET rc, *out the reply. */
static int hb(sched *c, int64_t aid, const char *holder, const char *body, json_t **out, hf_jerr *e)
{
    json_t *b = json_loads(body, 0, NULL);
    assert_non_null(b);
    *out = NULL;
    int rc = sched_agent_heartbeat_as(c, aid, b, holder, out, e);
    json_decref(b);
    return rc;
}

/* The first assignment an empty heartbeat of aid gets: its trial and attempt. */
static void assigned(sched *c, int64_t aid, const char *holder, int64_t *tid, int64_t *att)
{
    json_t *out;
    hf_jerr e;
    assert_int_equal(hb(c, aid, holder, "{\"running\": []}", &out, &e), 0);
    json_t *a = json_array_get(json_object_get(out, "assign"), 0);
    assert_non_null(a);
    *tid = json_integer_value(json_object_get(a, "trial_id"));
    *att = json_integer_value(json_object_get(a, "attempt"));
    json_decref(out);
}

static void started(sched *c, int64_t aid, const char *holder, int64_t tid, int64_t att)
{
    char body[512];
    json_t *out;
    hf_jerr e;
    snprintf(body, sizeof body, "{\"running\": [{\"trial_id\": %lld, \"attempt\": %lld, \"pid\": 7}], \"events\": "
             "[{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"started\", \"time\": 1, \"pid\": 7}]}",
             (long long)tid, (long long)att, (long long)tid, (long long)att);
    assert_int_equal(hb(c, aid, holder, body, &out, &e), 0);
    assert_int_equal(json_array_size(json_object_get(out, "refused")), 0);
    json_decref(out);
}

static char *trial_state(sched *c, int64_t tid)
{
    static char st[32];
    json_t *t = NULL;
    assert_int_equal(sched_trial_get(c, tid, &t), 0);
    snprintf(st, sizeof st, "%s", json_string_value(json_object_get(t, "state")));
    json_decref(t);
    return st;
}

static void test_binding(void **state)
{
    (void)state;
    char path[320];
    store *s = NULL;
    sched *c = NULL;
    hf_jerr e;
    int64_t a, b, sh, x;
    json_t *out;
    snprintf(path, sizeof path, "%s/bind.db", dir);
    unit_open_core(path, NULL, &s, &c);

    assert_int_equal(reg(c, "gpu-a", "gpu-a", &a, &e), 0);
    assert_int_equal(reg(c, "gpu-b", "gpu-b", &b, &e), 0);
    /* a named token registers only its own name, even a new one */
    assert_int_equal(reg(c, "gpu-a", "gpu-b", &x, &e), HF_EPERM);
    assert_string_equal(e.field, "name");
    assert_non_null(strstr(e.msg, "only the agent named 'gpu-b'"));
    assert_int_equal(reg(c, "gpu-z", "gpu-b", &x, &e), HF_EPERM);
    /* ... and speaks only for it */
    assert_int_equal(hb(c, a, "gpu-b", "{}", &out, &e), HF_EPERM);
    assert_null(out);
    assert_non_null(strstr(e.msg, "'gpu-b' speaks only for the agent named 'gpu-b'"));
    assert_int_equal(hb(c, a, "gpu-a", "{}", &out, &e), 0);
    json_decref(out);
    assert_int_equal(sched_agent_may_speak(c, a, "gpu-b", &e), HF_EPERM);
    assert_int_equal(sched_agent_may_speak(c, a, "gpu-a", &e), 0);
    assert_int_equal(sched_agent_may_speak(c, 999, "gpu-a", &e), HF_ENOTFOUND);
    assert_int_equal(sched_agent_may_speak(c, a, NULL, &e), 0);   /* no token file */
    /* who tried: an events row (at most one a second) with the holder */
    assert_int_equal(unit_one_int(store_db(s), "SELECT count(*) FROM events WHERE type='AGENT_REFUSED' AND "
                                               "user_name='gpu-b' AND detail LIKE 'registration refused (403)%'"), 1);

    /* the shared token: any name no named token owns, never a bound one */
    assert_int_equal(reg(c, "old-1", SCHED_SHARED_AGENT_HOLDER, &sh, &e), 0);
    assert_int_equal(reg(c, "old-1", SCHED_SHARED_AGENT_HOLDER, &x, &e), 0);
    assert_int_equal(x, sh);
    assert_int_equal(reg(c, "gpu-a", SCHED_SHARED_AGENT_HOLDER, &x, &e), HF_EPERM);
    assert_int_equal(hb(c, a, SCHED_SHARED_AGENT_HOLDER, "{}", &out, &e), HF_EPERM);
    assert_int_equal(hb(c, sh, SCHED_SHARED_AGENT_HOLDER, "{}", &out, &e), 0);
    json_decref(out);
    /* a named token takes its own name over from the shared one */
    assert_int_equal(reg(c, "old-1", "old-1", &x, &e), 0);
    assert_int_equal(x, sh);
    assert_int_equal(hb(c, sh, SCHED_SHARED_AGENT_HOLDER, "{}", &out, &e), HF_EPERM);
    assert_int_equal(unit_one_int(store_db(s), "SELECT count(*) FROM agents WHERE holder IS name"), 3);
    sched_free(c);
    store_close(s);

    /* the binding is in the store: a restarted core keeps it */
    unit_open_core(path, NULL, &s, &c);
    assert_int_equal(hb(c, a, SCHED_SHARED_AGENT_HOLDER, "{}", &out, &e), HF_EPERM);
    assert_int_equal(hb(c, a, "gpu-b", "{}", &out, &e), HF_EPERM);
    assert_int_equal(hb(c, a, "gpu-a", "{}", &out, &e), 0);
    json_decref(out);
    sched_free(c);
    store_close(s);
}

static void test_foreign_reports(void **state)
{
    (void)state;
    char path[320], body[1024];
    store *s = NULL;
    sched *c = NULL;
    sched_config cfg;
    hf_jerr e;
    int64_t a, b, ta, aa, tb, ab;
    json_t *out;
    sched_config_defaults(&cfg);
    cfg.agent_timeout_ms = 200;
    snprintf(path, sizeof path, "%s/reports.db", dir);
    unit_open_core(path, &cfg, &s, &c);
    assert_int_equal(reg(c, "a", "a", &a, &e), 0);
    int64_t xid = unit_submit(c, EXP(2));
    assigned(c, a, "a", &ta, &aa);
    assert_int_equal(reg(c, "b", "b", &b, &e), 0);
    assigned(c, b, "b", &tb, &ab);
    assert_true(ta != tb);
    started(c, a, "a", ta, aa);

    /* b, with its own token and id: its own start (honest) beside a
     * forged exit, metric and log line for a's trial */
    snprintf(body, sizeof body,
             "{\"running\": [{\"trial_id\": %lld, \"attempt\": %lld, \"pid\": 8}],"
             " \"events\": [{\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"started\", \"time\": 1, \"pid\": 8},"
             "              {\"trial_id\": %lld, \"attempt\": %lld, \"type\": \"exited\", \"time\": 2, \"exit_code\": 0}],"
             " \"metrics\": [{\"trial_id\": %lld, \"attempt\": %lld, \"step\": 9, \"values\": {\"acc\": 999}}],"
             " \"logs\": [{\"trial_id\": %lld, \"attempt\": %lld, \"stream\": \"stdout\", \"line\": \"forged\"}]}",
             (long long)tb, (long long)ab, (long long)tb, (long long)ab, (long long)ta, (long long)aa,
             (long long)ta, (long long)aa, (long long)ta, (long long)aa);
    assert_int_equal(hb(c, b, "b", body, &out, &e), 0);
    json_t *ref = json_object_get(out, "refused");
    assert_int_equal(json_array_size(ref), 3);
    const char *items[] = {"metrics[0]", "logs[0]", "events[1]"};
    for (size_t i = 0; i < 3; i++) {
        json_t *r = json_array_get(ref, i);
        assert_string_equal(json_string_value(json_object_get(r, "item")), items[i]);
        assert_int_equal(json_integer_value(json_object_get(r, "status")), 409);
        assert_int_equal(json_integer_value(json_object_get(r, "trial_id")), ta);
    }
    assert_int_equal(json_integer_value(json_object_get(json_object_get(out, "rejected"), "refused")), 3);
    json_decref(out);
    /* nothing of it applied; b's own start was */
    assert_string_equal(trial_state(c, ta), "RUNNING");
    assert_string_equal(trial_state(c, tb), "RUNNING");
    json_t *x = NULL;
    assert_int_equal(sched_experiment_get(c, xid, &x), 0);
    assert_true(json_is_null(json_object_get(x, "best")) || !json_object_get(x, "best"));
    json_decref(x);
    assert_int_equal(unit_one_int(store_db(s), "SELECT count(*) FROM metrics"), 0);
    assert_int_equal(unit_one_int(store_db(s), "SELECT count(*) FROM logs"), 0);
    /* who tried: one events row of a's trial, b as its user */
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM events WHERE type='REPORT_REFUSED' AND trial_id=%lld AND "
             "user_name='b' AND detail LIKE '%%agent ''b''%%3 items%%'", (long long)ta);
    assert_int_equal(unit_one_int(store_db(s), q), 1);

    /* a's honest late report for its own attempt, after the trial moved
     * on (a was LOST): rejected as before, not refused */
    usleep(300 * 1000);
    sched_tick(c);
    snprintf(body, sizeof body, "{\"running\": [], \"metrics\": [{\"trial_id\": %lld, \"attempt\": %lld, \"step\": 3,"
             " \"values\": {\"acc\": 0.5}}]}", (long long)ta, (long long)aa);
    assert_int_equal(hb(c, a, "a", body, &out, &e), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(out, "rejected"), "metrics")), 1);
    assert_int_equal(json_array_size(json_object_get(out, "refused")), 0);
    json_decref(out);
    sched_free(c);
    store_close(s);
}

static void test_checkpoints(void **state)
{
    (void)state;
    char path[320], body[1024], q[256];
    store *s = NULL;
    sched *c = NULL;
    hf_jerr e;
    int64_t a, b, ta, aa, tb, ab, who;
    json_t *out;
    snprintf(path, sizeof path, "%s/ckpt.db", dir);
    unit_open_core(path, NULL, &s, &c);
    assert_int_equal(reg(c, "a", "a", &a, &e), 0);
    unit_submit(c, EXP(2));
    assigned(c, a, "a", &ta, &aa);
    assert_int_equal(reg(c, "b", SCHED_SHARED_AGENT_HOLDER, &b, &e), 0);   /* b: the shared token's */
    assigned(c, b, SCHED_SHARED_AGENT_HOLDER, &tb, &ab);
    started(c, a, "a", ta, aa);

    /* the shared token, naming no agent: the attempt's own agent if it
     * speaks for it (b), never a (bound to its own token) */
    who = 0;
    assert_int_equal(sched_ckpt_may_store(c, tb, ab, 1, SCHED_SHARED_AGENT_HOLDER, &who, &e), 0);
    assert_int_equal(who, b);

    /* b's token, as b: not its attempt (409); as a: not its agent (403) */
    who = b;
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, "b", &who, &e), HF_ESTATE);
    assert_non_null(strstr(e.msg, "was not assigned to agent 'b'"));
    who = a;
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, "b", &who, &e), HF_EPERM);
    who = 0;
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, "b", &who, &e), HF_ESTATE);
    who = 0;   /* the shared token: a is bound to its own */
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, SCHED_SHARED_AGENT_HOLDER, &who, &e), HF_ESTATE);
    who = 0;
    assert_int_equal(sched_ckpt_may_store(c, 999, 1, 5, "a", &who, &e), HF_ENOTFOUND);
    /* a, while its attempt runs: yes (the uploader found by name) */
    who = 0;
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, "a", &who, &e), 0);
    assert_int_equal(who, a);
    who = a;   /* not an attempt it was given */
    assert_int_equal(sched_ckpt_may_store(c, ta, aa + 1, 5, "a", &who, &e), HF_ESTATE);

    /* a reports a checkpoint at step 5 and exits: its upload of step 5
     * still goes in afterwards, any other step does not */
    snprintf(body, sizeof body,
             "{\"running\": [], \"metrics\": [{\"trial_id\": %lld, \"attempt\": %lld, \"step\": 5, \"values\":"
             " {\"acc\": 0.7}, \"checkpoint\": \"ck-5\"}], \"events\": [{\"trial_id\": %lld, \"attempt\": %lld,"
             " \"type\": \"exited\", \"time\": 3, \"exit_code\": 0}]}",
             (long long)ta, (long long)aa, (long long)ta, (long long)aa);
    assert_int_equal(hb(c, a, "a", body, &out, &e), 0);
    json_decref(out);
    assert_string_equal(trial_state(c, ta), "COMPLETED");
    who = a;
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, "a", &who, &e), 0);
    who = a;
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 6, "a", &who, &e), HF_ESTATE);
    assert_string_equal(e.field, "step");
    who = b;   /* the finished trial, from b */
    assert_int_equal(sched_ckpt_may_store(c, ta, aa, 5, "b", &who, &e), HF_ESTATE);
    /* every refusal is an event of the trial with the token's holder */
    snprintf(q, sizeof q, "SELECT count(*) FROM events WHERE type='CHECKPOINT_REFUSED' AND trial_id=%lld AND "
             "user_name='b'", (long long)ta);
    assert_int_equal(unit_one_int(store_db(s), q), 4);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binding),
        cmocka_unit_test(test_foreign_reports),
        cmocka_unit_test(test_checkpoints),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

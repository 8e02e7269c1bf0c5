/*
 * test_scheduler_provision.c — the agent provisioner's pure parts
 * (scheduler/provision/): the plan (how many jobs to submit or cancel for a
 * demand), sbatch --parsable and squeue output as untrusted text, GRES
 * counts, the job script's quoting; and the core's demand query
 * (sched_demand) on a real core: trials that do not exist yet count, free
 * slots of alive agents are subtracted, gangs keep their size.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/core/demand.h"
#include "scheduler/core/sched.h"
#include "scheduler/provision/provision.h"
#include "scheduler/provision/provision_opts.h"
#include "scheduler/provision/provision_slurm.h"
#include "unit_fixture.h"

#include <stdlib.h>
#include <string.h>

static char dir[256];
static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "prov"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

static prov_job job(const char *id, int nodes, int state, int reg)
{
    prov_job j = {.nodes = nodes, .state = state, .registered = reg};
    snprintf(j.id, sizeof j.id, "%s", id);
    return j;
}

/* Table: demand and jobs in, submissions and cancels out. */
static void test_plan(void **st)
{
    (void)st;
    prov_need four_singles[4] = {{1, 1}, {1, 1}, {1, 1}, {1, 1}};
    prov_need gang2[1] = {{2, 4}};   /* 2 workers x 4 slots on 4-slot agents: 2 nodes */
    prov_need too_big[1] = {{1, 8}};
    prov_job pend1[2] = {job("10", 1, PROV_PENDING, 0), job("11", 1, PROV_PENDING, 0)};
    prov_job run_reg[1] = {job("12", 1, PROV_RUNNING, 1)};
    prov_job gangjob[1] = {job("13", 2, PROV_PENDING, 0)};
    struct {
        const char *what;
        plan_input in;
        int submit, ngang, gang0, ncancel, unservable;
    } cases[] = {
        {"empty farm, 4 one-slot trials, 2-slot agents: 2 jobs",
         {four_singles, 4, 0, 2, NULL, 0, 8}, 2, 0, 0, 0, 0},
        {"free slots cover 3 of them: 1 job",
         {four_singles, 4, 3, 2, NULL, 0, 8}, 1, 0, 0, 0, 0},
        {"two pending jobs cover them: nothing",
         {four_singles, 4, 0, 2, pend1, 2, 8}, 0, 0, 0, 0, 0},
        {"max_agents 1: one job only",
         {four_singles, 4, 0, 2, NULL, 0, 1}, 1, 0, 0, 0, 0},
        {"no demand, two pending jobs: both cancelled",
         {NULL, 0, 0, 2, pend1, 2, 8}, 0, 0, 0, 2, 0},
        {"no demand, a running registered job: kept (its idle timeout ends it)",
         {NULL, 0, 2, 2, run_reg, 1, 8}, 0, 0, 0, 0, 0},
        {"a 2-node gang: one job of 2 nodes",
         {gang2, 1, 0, 4, NULL, 0, 8}, 0, 1, 2, 0, 0},
        {"a 2-node gang with a pending 2-node job: nothing",
         {gang2, 1, 0, 4, gangjob, 1, 8}, 0, 0, 0, 0, 0},
        {"a gang over max_agents: nothing submitted",
         {gang2, 1, 0, 4, NULL, 0, 1}, 0, 0, 0, 0, 0},
        {"a worker larger than an agent: unservable",
         {too_big, 1, 0, 4, NULL, 0, 8}, 0, 0, 0, 0, 1},
        {"no demand, a pending gang job nothing needs: cancelled",
         {NULL, 0, 0, 4, gangjob, 1, 8}, 0, 0, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_output o;
        provision_plan(&cases[i].in, &o);
        if (o.submit_single != cases[i].submit || o.ngang != cases[i].ngang || o.ncancel != cases[i].ncancel ||
            o.unservable != cases[i].unservable || (o.ngang && o.gang[0] != cases[i].gang0))
            fail_msg("%s: submit %d gang %d (%d) cancel %d unservable %d", cases[i].what, o.submit_single, o.ngang,
                     o.ngang ? o.gang[0] : 0, o.ncancel, o.unservable);
    }
}

static void test_parse_sbatch(void **st)
{
    (void)st;
    char id[PROV_JOB_ID_MAX];
    struct { const char *in; int rc; const char *id; } t[] = {
        {"123\n", 0, "123"}, {"77;cluster\n", 0, "77"}, {"9", 0, "9"}, {"", HF_EPARSE, NULL},
        {"abc\n", HF_EPARSE, NULL}, {"12x\n", HF_EPARSE, NULL}, {"1234567890123456789\n", HF_EPARSE, NULL},
        {"-5\n", HF_EPARSE, NULL}, {";\n", HF_EPARSE, NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int rc = slurm_parse_sbatch(t[i].in, strlen(t[i].in), id, sizeof id);
        if (rc != t[i].rc) fail_msg("'%s': rc %d", t[i].in, rc);
        if (!rc) assert_string_equal(id, t[i].id);
    }
}

static void test_parse_squeue(void **st)
{
    (void)st;
    prov_job j[4];
    int n, bad;
    const char *out = "101|PENDING|1\n102|RUNNING|2\r\n103|COMPLETED|1\nfoo\n104|RUNNING|x\n105|CONFIGURING|1\n"
                      "|RUNNING|1\n106|RUNNING|0\n107|RUNNING|1|extra\n";
    assert_int_equal(slurm_parse_squeue(out, strlen(out), j, 4, &n, &bad), 0);
    assert_int_equal(n, 3);
    assert_int_equal(bad, 5);
    assert_string_equal(j[0].id, "101");
    assert_int_equal(j[0].state, PROV_PENDING);
    assert_string_equal(j[1].id, "102");
    assert_int_equal(j[1].nodes, 2);
    assert_int_equal(j[1].state, PROV_RUNNING);
    assert_string_equal(j[2].id, "105");
    assert_int_equal(j[2].state, PROV_PENDING);
    /* more jobs than room: HF_ETOOBIG, the first kept */
    const char *many = "1|RUNNING|1\n2|RUNNING|1\n3|RUNNING|1\n";
    assert_int_equal(slurm_parse_squeue(many, strlen(many), j, 2, &n, &bad), HF_ETOOBIG);
    assert_int_equal(n, 2);
}

static void test_gres_and_script(void **st)
{
    (void)st;
    int64_t g;
    assert_int_equal(provision_gres_gpus(NULL, &g), 0);
    assert_int_equal(g, 0);
    assert_int_equal(provision_gres_gpus("gpu:4", &g), 0);
    assert_int_equal(g, 4);
    assert_int_equal(provision_gres_gpus("shard:2,gpu:a100:2", &g), 0);
    assert_int_equal(g, 2);
    assert_int_equal(provision_gres_gpus("gpu", &g), 0);
    assert_int_equal(g, 1);
    assert_int_equal(provision_gres_gpus("gpu:x", &g), -1);
    assert_int_equal(provision_gres_gpus("gpu:0", &g), -1);

    provision_config c = {.agent_cmd = "/opt/hf/bin/hyperfarm-agent", .scheduler_url = "http://h:1/",
                          .agent_args = "--token-file /x/it's --sandbox off", .idle_timeout_s = 30};
    char *s = slurm_job_script(&c, 1);
    assert_non_null(s);
    assert_string_equal(s, "#!/bin/sh\n# hyperfarm agent job (docs/deploy.md \"Slurm\")\nexec "
                           "'/opt/hf/bin/hyperfarm-agent' '--scheduler' 'http://h:1/' '--slurm' '--idle-timeout' "
                           "'30' '--token-file' '/x/it'\\''s' '--sandbox' 'off'\n");
    free(s);
    s = slurm_job_script(&c, 2);
    assert_non_null(strstr(s, "exec 'srun' '--ntasks-per-node=1' '--kill-on-bad-exit=0' '/opt/hf/bin/hyperfarm-agent'"));
    free(s);
}

#define EXP(name, extra)                                                                                        \
    "{\"name\": \"" name "\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"                     \
    "\"searcher\": {\"name\": \"random\", \"max_trials\": 5, \"max_concurrent_trials\": 3},"                   \
    "\"hyperparameters\": {\"x\": {\"type\": \"float\", \"min\": 0, \"max\": 1}},"                            \
    "\"trial\": {\"command\": [\"true\"]" extra "}}"

/* The demand of an empty farm counts trials not created yet. */
static void test_demand(void **st)
{
    (void)st;
    char path[300];
    store *s = NULL;
    sched *c = NULL;
    snprintf(path, sizeof path, "%s/d.db", dir);
    unit_open_core(path, NULL, &s, &c);
    sched_demand_out *d = calloc(1, sizeof *d);
    assert_non_null(d);
    assert_int_equal(sched_demand(c, "slurm-", d), 0);
    assert_int_equal(d->nneeds, 0);
    unit_submit(c, EXP("singles", ""));
    unit_submit(c, EXP("gang", ", \"resources\": {\"workers\": 2, \"slots_per_worker\": 2}"));
    assert_int_equal(sched_demand(c, "slurm-", d), 0);
    assert_int_equal(d->nneeds, 6);   /* min(max_concurrent 3, max_trials 5) per experiment */
    int gangs = 0;
    for (int i = 0; i < d->nneeds; i++) gangs += d->needs[i].workers == 2 && d->needs[i].spw == 2;
    assert_int_equal(gangs, 3);
    assert_int_equal(d->free_slots, 0);
    unit_register(c, "slurm-7-n1", 1);
    unit_register(c, "other", 2);
    assert_int_equal(sched_demand(c, "slurm-", d), 0);
    assert_int_equal(d->agents_alive, 2);
    assert_int_equal(d->nnames, 1);
    assert_string_equal(d->names[0], "slurm-7-n1");
    free(d);
    sched_free(c);
    store_close(s);
}

/* Heartbeat agent aid with body; RET the first assignment's trial id
 * (0: none), its attempt into *att. */
static int64_t beat(sched *c, int64_t aid, const char *body, int64_t *att)
{
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    assert_non_null(b);
    hf_jerr e;
    int rc = sched_agent_heartbeat(c, aid, b, &out, &e);
    if (rc) fail_msg("heartbeat: %d %s: %s", rc, e.field, e.msg);
    json_t *a = json_array_get(json_object_get(out, "assign"), 0);
    int64_t t = a ? json_integer_value(json_object_get(a, "trial_id")) : 0;
    if (a && att) *att = json_integer_value(json_object_get(a, "attempt"));
    json_decref(out);
    json_decref(b);
    return t;
}

static const char *trial_field(sched *c, int64_t t, const char *k, char *buf, size_t len)
{
    json_t *o = NULL;
    assert_int_equal(sched_trial_get(c, t, &o), 0);
    json_t *v = json_object_get(o, k);
    if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
    else snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    json_decref(o);
    return buf;
}

/* A drained exit (docs/scheduler.md "Drained attempts") requeues the trial
 * without a restart, and a draining agent gets nothing more. */
static void test_drained(void **st)
{
    (void)st;
    char path[300], body[512], buf[64];
    store *s = NULL;
    sched *c = NULL;
    snprintf(path, sizeof path, "%s/drain.db", dir);
    unit_open_core(path, NULL, &s, &c);
    unit_submit(c, "{\"name\": \"d\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                   "\"searcher\": {\"name\": \"random\", \"max_trials\": 1},"
                   "\"hyperparameters\": {\"x\": 1}, \"trial\": {\"command\": [\"true\"], \"max_restarts\": 0}}");
    int64_t a1 = unit_register(c, "slurm-1-n1", 1), att = 0;
    int64_t t = beat(c, a1, "{\"running\": [], \"events\": []}", &att);
    assert_true(t > 0);
    snprintf(body, sizeof body, "{\"running\": [], \"events\": [{\"trial_id\": %lld, \"attempt\": %lld, "
             "\"type\": \"started\", \"time\": 1, \"pid\": 5}]}", (long long)t, (long long)att);
    beat(c, a1, body, NULL);
    assert_string_equal(trial_field(c, t, "state", buf, sizeof buf), "RUNNING");
    /* the drain: "draining" in the heartbeat, the exit marked drained */
    snprintf(body, sizeof body, "{\"running\": [], \"draining\": true, \"events\": [{\"trial_id\": %lld, "
             "\"attempt\": %lld, \"type\": \"exited\", \"time\": 2, \"exit_code\": 143, \"drained\": true}]}",
             (long long)t, (long long)att);
    assert_int_equal(beat(c, a1, body, NULL), 0);   /* nothing placed on the leaving agent */
    assert_string_equal(trial_field(c, t, "state", buf, sizeof buf), "QUEUED");
    assert_string_equal(trial_field(c, t, "restarts", buf, sizeof buf), "0");
    sched_tick(c);
    assert_int_equal(beat(c, a1, "{\"running\": [], \"draining\": true, \"events\": []}", NULL), 0);
    /* another agent takes it: attempt 2, still no restart */
    int64_t a2 = unit_register(c, "slurm-2-n2", 1), att2 = 0;
    assert_int_equal(beat(c, a2, "{\"running\": [], \"events\": []}", &att2), t);
    assert_int_equal(att2, att + 1);
    /* "draining" must be a boolean */
    json_t *b = json_loads("{\"running\": [], \"draining\": 1, \"events\": []}", 0, NULL), *out = NULL;
    hf_jerr e;
    assert_int_equal(sched_agent_heartbeat(c, a2, b, &out, &e), HF_EINVAL);
    assert_string_equal(e.field, "draining");
    json_decref(b);
    json_decref(out);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_parse_sbatch),
        cmocka_unit_test(test_parse_squeue),
        cmocka_unit_test(test_gres_and_script),
        cmocka_unit_test(test_demand),
        cmocka_unit_test(test_drained),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

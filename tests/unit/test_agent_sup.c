/*
 * test_agent_sup.c — the agent's trial supervisor against real processes:
 * tests/progs/fake_trial is launched with fork/exec exactly as the agent
 * does, its output captured and parsed, stopped with SIGTERM or SIGKILL.
 * Needs bin/tests/fake_trial ($HF_BIN/tests/fake_trial).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_fs.h"
#include "agent/agent_outbox.h"
#include "agent/agent_assign.h"
#include "agent/agent_sup.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fake[1024];
static char workdir[256];

typedef struct fixture {
    agent_outbox *ob;
    agent_sup    *sup;
    json_t       *events, *metrics, *logs;   /* everything taken so far */
} fixture;

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    snprintf(workdir, sizeof workdir, "/tmp/hf-agent-proc-XXXXXX");
    if (!mkdtemp(workdir)) return -1;
    agent_outbox_limits lim = {.max_log_lines = 1000, .max_log_bytes = 1 << 20, .max_metrics = 100000, .max_events = 0};
    fx->ob = agent_outbox_new(&lim);
    fx->sup = agent_sup_new(workdir, NULL, 5000, fx->ob);
    fx->events = json_array();
    fx->metrics = json_array();
    fx->logs = json_array();
    *state = fx;
    return fx->ob && fx->sup ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    agent_sup_free(fx->sup);
    agent_outbox_free(fx->ob);
    json_decref(fx->events);
    json_decref(fx->metrics);
    json_decref(fx->logs);
    free(fx);
    nftw(workdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* Move everything from the outbox into the fixture's arrays. */
static void collect(fixture *fx)
{
    for (;;) {
        agent_outbox_mark m;
        json_t *b = agent_outbox_take(fx->ob, &m);
        assert_non_null(b);
        json_array_extend(fx->events, json_object_get(b, "events"));
        json_array_extend(fx->metrics, json_object_get(b, "metrics"));
        json_array_extend(fx->logs, json_object_get(b, "logs"));
        json_decref(b);
        agent_outbox_ack(fx->ob, &m);
        if (!m.n_events && !m.n_metrics && !m.n_logs) break;
    }
}

/* Poll until no trial is left or timeout; RET elapsed ms. */
static int64_t run_until_done(fixture *fx, int64_t timeout_ms)
{
    int64_t t0 = hf_mono_ms();
    while (agent_sup_count(fx->sup) > 0 && hf_mono_ms() - t0 < timeout_ms) {
        agent_sup_poll(fx->sup, 50, -1);
        collect(fx);
    }
    collect(fx);
    return hf_mono_ms() - t0;
}

static json_t *find_event(fixture *fx, int64_t trial, const char *type)
{
    size_t i;
    json_t *e;
    json_array_foreach(fx->events, i, e) {
        if (json_integer_value(json_object_get(e, "trial_id")) == trial
            && !strcmp(json_string_value(json_object_get(e, "type")), type))
            return e;
    }
    return NULL;
}

static int find_log(fixture *fx, const char *needle)
{
    size_t i;
    json_t *l;
    json_array_foreach(fx->logs, i, l) {
        if (strstr(json_string_value(json_object_get(l, "line")), needle)) return 1;
    }
    return 0;
}

/* Build a spec from JSON text (fake trial path substituted for "@FAKE"). */
static agent_spec *spec_from(const char *fmt, ...)
{
    char text[8192], sub[10000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    char *at = strstr(text, "@FAKE");
    if (at) {
        *at = '\0';
        if (snprintf(sub, sizeof sub, "%s%s%s", text, fake, at + 5) >= (int)sizeof sub) fail();
    } else snprintf(sub, sizeof sub, "%s", text);
    json_t *j = json_loads(sub, 0, NULL);
    assert_non_null(j);
    hf_jerr e;
    agent_spec *s = agent_spec_parse(j, "assign[0]", &e);
    if (!s) fprintf(stderr, "spec rejected: %s: %s\n", e.field, e.msg);
    json_decref(j);
    assert_non_null(s);
    return s;
}

static void start(fixture *fx, agent_spec *s)
{
    char err[512];
    int rc = agent_sup_start(fx->sup, s, err, sizeof err);
    if (rc) fprintf(stderr, "start: %s\n", err);
    assert_int_equal(rc, 0);
    agent_spec_free(s);
}

/* ------------------------------------------------------------------ */

static void test_spec_validation(void **state)
{
    (void)state;
    static const struct { const char *json; const char *field; } bad[] = {
        {"{\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a/b\"}", "a.trial_id"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[],\"checkpoint_dir\":\"a/b\"}", "a.argv"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[1],\"checkpoint_dir\":\"a/b\"}", "a.argv[0]"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"\"],\"checkpoint_dir\":\"a/b\"}", "a.argv[0]"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"/etc\"}", "a.checkpoint_dir"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a/../../etc\"}", "a.checkpoint_dir"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a//b\"}", "a.checkpoint_dir"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"\"}", "a.checkpoint_dir"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"exp/\"}", "a.checkpoint_dir"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a/./b\"}", "a.checkpoint_dir"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"copy_checkpoint_from\":\"../x\"}", "a.copy_checkpoint_from"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"env\":{\"A=B\":\"1\"}}", "a.env.A=B"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"env\":{\"A\":1}}", "a.env.A"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"gpus\":[-1]}", "a.gpus[0]"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"gpus\":[\"0\"]}", "a.gpus[0]"},
        {"{\"trial_id\":0,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\"}", "a.trial_id"},
        {"[1]", "a"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"launcher\":\"srun\"}", "a.launcher"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"hold\":true}", "a.launcher"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"launcher\":\"mpirun\",\"hold\":1}", "a.hold"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"launcher\":\"mpirun\"}", "a.hosts"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"launcher\":\"mpirun\","
         "\"hosts\":[{\"host\":\"a b\",\"slots\":1}]}", "a.hosts[0].host"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"launcher\":\"mpirun\","
         "\"hosts\":[{\"host\":\"h\\nh2 slots=9\",\"slots\":1}]}", "a.hosts[0].host"},
        {"{\"trial_id\":1,\"attempt\":1,\"argv\":[\"x\"],\"checkpoint_dir\":\"a\",\"launcher\":\"mpirun\","
         "\"hosts\":[{\"host\":\"h\",\"slots\":0}]}", "a.hosts[0].slots"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i].json, 0, NULL);
        hf_jerr e;
        assert_non_null(j);
        agent_spec *s = agent_spec_parse(j, "a", &e);
        if (s || strcmp(e.field, bad[i].field) != 0)
            fprintf(stderr, "case %zu: got field '%s' (%s), want '%s'\n", i, e.field, e.msg, bad[i].field);
        assert_null(s);
        assert_string_equal(e.field, bad[i].field);
        json_decref(j);
    }
    /* a good one, with unknown members ignored (forward compatible) */
    json_t *j = json_loads("{\"trial_id\":5,\"attempt\":2,\"experiment_id\":7,\"argv\":[\"a\",\"b c\"],"
                           "\"env\":{\"FOO\":\"5\"},\"checkpoint_dir\":\"e/7/t/5/ck\","
                           "\"gpus\":[1,3],\"slots\":2,\"copy_checkpoint_from\":null,\"future\":true}", 0, NULL);
    hf_jerr e;
    agent_spec *s = agent_spec_parse(j, "a", &e);
    assert_non_null(s);
    assert_int_equal(s->trial_id, 5);
    assert_int_equal(s->attempt, 2);
    assert_string_equal(s->argv[1], "b c");
    assert_null(s->argv[2]);
    assert_string_equal(s->env[0], "FOO=5");
    assert_int_equal(s->trial.ngpus, 2);
    assert_string_equal(s->copy_from, "");
    agent_spec_free(s);
    json_decref(j);
}

static void test_env_cwd_metrics(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":5,\"attempt\":1,\"experiment_id\":7,"
                        "\"argv\":[\"@FAKE\",\"--print-env\",\"--sleep-ms\",\"1\"],"
                        "\"budget\":4,\"hparams\":\"{\\\"x\\\":0.3}\","
                        "\"checkpoint_dir\":\"experiments/7/trials/5/checkpoints\",\"gpus\":[1,3]}"));
    run_until_done(fx, 10000);
    assert_int_equal(agent_sup_count(fx->sup), 0);
    json_t *st = find_event(fx, 5, "started"), *ex = find_event(fx, 5, "exited");
    assert_non_null(st);
    assert_true(json_integer_value(json_object_get(st, "pid")) > 0);
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 0);
    assert_int_equal(json_integer_value(json_object_get(ex, "signal")), 0);

    char want[1200];
    snprintf(want, sizeof want, "env HYPERFARM_CHECKPOINT_DIR=%s/experiments/7/trials/5/checkpoints", workdir);
    assert_true(find_log(fx, want));
    snprintf(want, sizeof want, "cwd %s/experiments/7/trials/5", workdir);
    assert_true(find_log(fx, want));
    snprintf(want, sizeof want, "env HYPERFARM_CONTROL_FILE=%s/experiments/7/trials/5/control.json", workdir);
    assert_true(find_log(fx, want));
    assert_true(find_log(fx, "env HYPERFARM_TRIAL_ID=5"));
    assert_true(find_log(fx, "env HYPERFARM_ATTEMPT=1"));
    /* the contract's variables, from the typed fields (hf_trial.h) */
    assert_true(find_log(fx, "env CUDA_VISIBLE_DEVICES=1,3"));
    assert_true(find_log(fx, "env HYPERFARM_EXPERIMENT_ID=7"));
    assert_true(find_log(fx, "env HYPERFARM_MAX_EPOCHS=4"));
    /* metric lines become metrics, not logs */
    assert_false(find_log(fx, "HYPERFARM {"));
    assert_int_equal(json_array_size(fx->metrics), 4);
    json_t *m = json_array_get(fx->metrics, 3);
    assert_int_equal(json_integer_value(json_object_get(m, "step")), 400);
    assert_true(json_number_value(json_object_get(m, "epoch")) == 4.0);
    assert_int_equal(json_integer_value(json_object_get(m, "attempt")), 1);
    double acc = json_number_value(json_object_get(json_object_get(m, "values"), "val_acc"));
    assert_true(acc > 0.85 && acc < 0.87);    /* 0.9 - 0.3 e^-2 with x = 0.3 from HYPERFARM_HPARAMS */
    assert_null(json_object_get(json_object_get(m, "values"), "epoch"));
    assert_non_null(strstr(json_string_value(json_object_get(m, "checkpoint")), "fake_trial.json"));

    char path[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/experiments/7/trials/5/checkpoints/fake_trial.json", workdir);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/experiments/7/trials/5/control.json", workdir);
    json_t *c = json_load_file(path, 0, NULL);
    assert_non_null(c);
    assert_true(json_is_false(json_object_get(c, "should_stop")));
    json_decref(c);
}

/* mpirun launcher, rank 0: the host file is written next to the
 * checkpoint dir, HYPERFARM_HOSTFILE names it, "{hostfile}" in argv is
 * replaced by its path. */
static void test_launcher_hostfile(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":20,\"attempt\":1,\"launcher\":\"mpirun\","
                        "\"hosts\":[{\"host\":\"10.0.0.1\",\"slots\":1},{\"host\":\"node-b\",\"slots\":2}],"
                        "\"argv\":[\"/bin/sh\",\"-c\",\"echo a1=$1; echo a2=$2; echo env=$HYPERFARM_HOSTFILE; cat $2\","
                        "\"sh\",\"--hf={hostfile}\",\"{hostfile}\"],\"checkpoint_dir\":\"t20/ck\"}"));
    run_until_done(fx, 10000);
    json_t *ex = find_event(fx, 20, "exited");
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 0);
    char want[1200];
    snprintf(want, sizeof want, "a1=--hf=%s/t20/hostfile", workdir);
    assert_true(find_log(fx, want));
    snprintf(want, sizeof want, "a2=%s/t20/hostfile", workdir);
    assert_true(find_log(fx, want));
    snprintf(want, sizeof want, "env=%s/t20/hostfile", workdir);
    assert_true(find_log(fx, want));
    assert_true(find_log(fx, "10.0.0.1 slots=1"));
    assert_true(find_log(fx, "node-b slots=2"));
    /* Without a launcher "{hostfile}" is an ordinary argument. */
    start(fx, spec_from("{\"trial_id\":21,\"attempt\":1,\"argv\":[\"/bin/sh\",\"-c\",\"echo b1=$1\",\"sh\","
                        "\"{hostfile}\"],\"checkpoint_dir\":\"t21/ck\"}"));
    run_until_done(fx, 10000);
    assert_true(find_log(fx, "b1={hostfile}"));
    char path[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/t21/hostfile", workdir);
    assert_int_equal(stat(path, &sb), -1);
}

/* mpirun launcher, another rank: nothing is executed (the program does
 * not even exist); a placeholder holds the slot, reported started and
 * running, until a kill releases it. */
static void test_launcher_holder(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":22,\"attempt\":1,\"rank\":1,\"launcher\":\"mpirun\",\"hold\":true,"
                        "\"argv\":[\"no-such-program-hf\"],\"checkpoint_dir\":\"t22/ck\"}"));
    int64_t t0 = hf_mono_ms();
    while (hf_mono_ms() - t0 < 300) {
        agent_sup_poll(fx->sup, 50, -1);
        collect(fx);
    }
    json_t *st = find_event(fx, 22, "started");
    assert_non_null(st);
    assert_int_equal(json_integer_value(json_object_get(st, "rank")), 1);
    pid_t pid = (pid_t)json_integer_value(json_object_get(st, "pid"));
    assert_true(pid > 0);
    assert_int_equal(kill(pid, 0), 0);
    assert_null(find_event(fx, 22, "exited"));
    assert_null(find_event(fx, 22, "start_failed"));
    assert_int_equal(agent_sup_count(fx->sup), 1);
    assert_true(find_log(fx, "holding 1 slot(s)"));
    assert_int_equal(agent_sup_kill(fx->sup, 22, 1, 2000, "launcher exited"), 0);
    int64_t ms = run_until_done(fx, 5000);
    assert_true(ms < 1000);   /* SIGTERM ends it at once */
    json_t *ex = find_event(fx, 22, "exited");
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "signal")), SIGTERM);
}

static void test_exit_code_and_exec_failure(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":6,\"attempt\":1,\"argv\":[\"@FAKE\",\"--fail-at-epoch\",\"2\","
                        "\"--fail-code\",\"7\",\"--sleep-ms\",\"1\"],\"checkpoint_dir\":\"t6/ck\"}"));
    agent_spec *bad = spec_from("{\"trial_id\":8,\"attempt\":1,\"argv\":[\"no-such-program-hf\"],\"checkpoint_dir\":\"t8/ck\"}");
    char err[512];
    assert_int_equal(agent_sup_start(fx->sup, bad, err, sizeof err), HF_ECHILD);
    assert_non_null(strstr(err, "No such file"));
    agent_spec_free(bad);
    /* a file that is not executable: execve fails in the child */
    bad = spec_from("{\"trial_id\":9,\"attempt\":1,\"argv\":[\"/etc/hostname\"],\"checkpoint_dir\":\"t9/ck\"}");
    assert_int_equal(agent_sup_start(fx->sup, bad, err, sizeof err), HF_ECHILD);
    agent_spec_free(bad);
    run_until_done(fx, 10000);
    json_t *ex = find_event(fx, 6, "exited");
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 7);
    assert_true(find_log(fx, "failing at epoch 2"));
    json_t *sf = find_event(fx, 8, "start_failed");
    assert_non_null(sf);
    assert_non_null(strstr(json_string_value(json_object_get(sf, "error")), "No such file"));
    assert_non_null(find_event(fx, 9, "start_failed"));
    assert_null(find_event(fx, 8, "started"));
    assert_null(find_event(fx, 9, "started"));
}

static void test_kill_graceful(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":10,\"attempt\":1,\"argv\":[\"@FAKE\",\"--epochs\",\"100\","
                        "\"--sleep-ms\",\"100\"],\"checkpoint_dir\":\"t10/ck\"}"));
    /* duplicate assignment of the same attempt: ignored */
    agent_spec *dup = spec_from("{\"trial_id\":10,\"attempt\":1,\"argv\":[\"@FAKE\"],\"checkpoint_dir\":\"t10/ck\"}");
    char err[256];
    assert_int_equal(agent_sup_start(fx->sup, dup, err, sizeof err), HF_EEXIST);
    agent_spec_free(dup);
    int64_t t0 = hf_mono_ms();
    while (json_array_size(fx->metrics) < 2 && hf_mono_ms() - t0 < 5000) {
        agent_sup_poll(fx->sup, 50, -1);
        collect(fx);
    }
    assert_true(json_array_size(fx->metrics) >= 2);
    assert_int_equal(agent_sup_kill(fx->sup, 10, 1, 5000, "asha"), 0);
    assert_int_equal(agent_sup_kill(fx->sup, 99, 1, 5000, "x"), HF_ENOTFOUND);
    char path[1200];
    snprintf(path, sizeof path, "%s/t10/control.json", workdir);
    json_t *c = json_load_file(path, 0, NULL);
    assert_true(json_is_true(json_object_get(c, "should_stop")));
    assert_string_equal(json_string_value(json_object_get(c, "reason")), "asha");
    json_decref(c);
    int64_t took = run_until_done(fx, 10000);
    assert_true(took < 2000);        /* it honoured SIGTERM, long before the 5 s grace */
    json_t *ex = find_event(fx, 10, "exited");
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 143);
    assert_int_equal(json_integer_value(json_object_get(ex, "signal")), 0);
    assert_true(find_log(fx, "checkpoint at epoch"));
}

/* Processes of group pgid that are not zombies, from /proc. */
static int live_in_group(pid_t pgid)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        char path[300], buf[1024];
        if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *p = strrchr(buf, ')');
        char state;
        int ppid, pgrp;
        if (p && sscanf(p + 2, "%c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid && state != 'Z') n++;
    }
    if (d) closedir(d);
    return n;
}

static void test_kill_ignores_sigterm(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":11,\"attempt\":1,\"argv\":[\"@FAKE\",\"--ignore-sigterm\","
                        "\"--spawn-child\",\"--epochs\",\"1\",\"--sleep-ms\",\"1\"],\"checkpoint_dir\":\"t11/ck\"}"));
    pid_t pid = agent_sup_pid(fx->sup, 11, 1);
    assert_true(pid > 0);
    /* its first metric line means SIGTERM is ignored by now */
    int64_t t0 = hf_mono_ms();
    while (json_array_size(fx->metrics) < 1 && hf_mono_ms() - t0 < 10000) {
        agent_sup_poll(fx->sup, 20, -1);
        collect(fx);
    }
    assert_int_equal(json_array_size(fx->metrics), 1);
    t0 = hf_mono_ms();
    assert_int_equal(agent_sup_kill(fx->sup, 11, 1, 400, "user"), 0);
    int64_t took = run_until_done(fx, 10000);
    assert_true(hf_mono_ms() - t0 >= 400);   /* SIGKILL only after the grace period */
    assert_true(took < 3000);
    json_t *ex = find_event(fx, 11, "exited");
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "signal")), SIGKILL);
    assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 128 + SIGKILL);
    assert_true(find_log(fx, "grace period over: SIGKILL"));
    /* the grandchild in the group is gone too (a zombie waiting for init
     * to reap it does not count) */
    hf_sleep_ms(50);
    assert_int_equal(live_in_group(pid), 0);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

static void test_flood_and_long_lines(void **state)
{
    fixture *fx = *state;
    long before = rss_kb();
    /* 64 MB of log lines, then one 100 kB line, then 3 epochs of metrics */
    start(fx, spec_from("{\"trial_id\":12,\"attempt\":1,\"argv\":[\"@FAKE\",\"--flood-bytes\",\"64000000\","
                        "\"--long-line\",\"100000\",\"--sleep-ms\",\"1\"],\"checkpoint_dir\":\"t12/ck\"}"));
    /* Do not collect while it floods: the outbox must bound itself. */
    int64_t t0 = hf_mono_ms();
    while (agent_sup_count(fx->sup) > 0 && hf_mono_ms() - t0 < 30000) agent_sup_poll(fx->sup, 50, -1);
    assert_int_equal(agent_sup_count(fx->sup), 0);
    agent_outbox_stats st;
    agent_outbox_get_stats(fx->ob, &st);
    long after = rss_kb();
    fprintf(stderr, "flood: %.1f s, outbox %zu lines %zu bytes, dropped %llu, rss %ld -> %ld kB\n",
            (double)(hf_mono_ms() - t0) / 1000, st.logs, st.log_bytes,
            (unsigned long long)st.dropped_logs, before, after);
    assert_true(st.logs <= 1000);
    assert_true(st.log_bytes <= (1u << 20));
    assert_true(after - before < 32 * 1024);     /* memory did not follow the flood */
    assert_int_equal(st.metrics, 3);             /* metrics are never crowded out by logs */
    collect(fx);
    json_t *ex = find_event(fx, 12, "exited");
    assert_non_null(ex);
    assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 0);
    assert_int_equal(json_array_size(fx->metrics), 3);
    /* the flood was rate-limited and/or dropped, and the trial's log says so */
    assert_true(find_log(fx, "lines suppressed") || find_log(fx, "log lines dropped"));
    /* the long line arrived truncated with a note (the rate window may have
     * suppressed it; then the count says so) */
    size_t i;
    json_t *l;
    int saw_long = 0;
    json_array_foreach(fx->logs, i, l) {
        const char *s = json_string_value(json_object_get(l, "line"));
        if (s[0] == 'L' && strstr(s, "line truncated, 83616 bytes dropped")) {
            saw_long = 1;
            assert_true(strlen(s) < AGENT_LINE_MAX + 100);
        }
    }
    (void)saw_long;
}

/* mark.more: set only when the outbox held more than one batch's limits
 * took (the heartbeat thread then drains at once); items queued after the
 * take do not set it (they wait for the interval or an urge). */
static void take_expect(agent_outbox *ob, size_t n_logs, int more, const char *line_before_ack)
{
    agent_outbox_mark m;
    json_t *b = agent_outbox_take(ob, &m);
    assert_non_null(b);
    assert_int_equal(m.n_logs, n_logs);
    assert_int_equal(m.more, more);
    if (line_before_ack)
        assert_int_equal(agent_outbox_log(ob, 1, 1, 0, 0, line_before_ack, strlen(line_before_ack)), 0);
    json_decref(b);
    agent_outbox_ack(ob, &m);
}

static void test_outbox_more(void **state)
{
    (void)state;
    agent_outbox *ob = agent_outbox_new(NULL);
    assert_non_null(ob);
    for (int i = 0; i < AGENT_BATCH_LOGS + 1; i++) assert_int_equal(agent_outbox_log(ob, 1, 1, i, 0, "x", 1), 0);
    take_expect(ob, AGENT_BATCH_LOGS, 1, NULL);
    take_expect(ob, 1, 0, "later");   /* "later" is queued while that batch is under way */
    take_expect(ob, 1, 0, NULL);
    agent_outbox_free(ob);
}

static void test_long_line_truncated(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":13,\"attempt\":1,\"argv\":[\"@FAKE\",\"--long-line\",\"100000\","
                        "\"--bad-metric\",\"--epochs\",\"1\",\"--sleep-ms\",\"1\"],\"checkpoint_dir\":\"t13/ck\"}"));
    run_until_done(fx, 10000);
    size_t i;
    json_t *l;
    int saw_long = 0;
    json_array_foreach(fx->logs, i, l) {
        const char *s = json_string_value(json_object_get(l, "line"));
        if (s[0] == 'L') {
            assert_non_null(strstr(s, "[hyperfarm-agent: line truncated, 83616 bytes dropped]"));
            assert_int_equal(strspn(s, "L"), AGENT_LINE_MAX);
            saw_long = 1;
        }
    }
    assert_true(saw_long);
    /* the malformed metric line is kept as a log line, with the reason */
    assert_true(find_log(fx, "HYPERFARM {\"val_acc\": oops}"));
    assert_true(find_log(fx, "metric line ignored"));
    assert_int_equal(json_array_size(fx->metrics), 1);
}

static void test_copy_checkpoint_resume(void **state)
{
    fixture *fx = *state;
    char path[1200];
    snprintf(path, sizeof path, "%s/exp/1/trials/1/checkpoints", workdir);
    assert_int_equal(agent_fs_mkdirs(path), 0);
    snprintf(path, sizeof path, "%s/exp/1/trials/1/checkpoints/fake_trial.json", workdir);
    FILE *f = fopen(path, "w");
    fputs("{\"epoch\": 2}\n", f);
    fclose(f);
    start(fx, spec_from("{\"trial_id\":14,\"attempt\":1,\"argv\":[\"@FAKE\",\"--epochs\",\"3\",\"--sleep-ms\",\"1\"],"
                        "\"checkpoint_dir\":\"exp/1/trials/2/checkpoints\","
                        "\"copy_checkpoint_from\":\"exp/1/trials/1/checkpoints\"}"));
    run_until_done(fx, 10000);
    assert_true(find_log(fx, "checkpoint copied from exp/1/trials/1/checkpoints"));
    assert_true(find_log(fx, "resuming after epoch 2"));
    assert_int_equal(json_array_size(fx->metrics), 1);     /* only epoch 3 was left */
    /* the parent's checkpoint is untouched */
    json_t *j = json_load_file(path, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "epoch")), 2);
    json_decref(j);
    /* a missing source is not fatal: the trial starts from scratch and says so */
    start(fx, spec_from("{\"trial_id\":15,\"attempt\":1,\"argv\":[\"@FAKE\",\"--epochs\",\"2\",\"--sleep-ms\",\"1\"],"
                        "\"checkpoint_dir\":\"exp/1/trials/3/checkpoints\","
                        "\"copy_checkpoint_from\":\"exp/1/trials/99/checkpoints\"}"));
    run_until_done(fx, 10000);
    assert_true(find_log(fx, "copy_checkpoint_from exp/1/trials/99/checkpoints failed"));
    assert_int_equal(json_array_size(fx->metrics), 3);
}

static void test_superseded_attempt(void **state)
{
    fixture *fx = *state;
    start(fx, spec_from("{\"trial_id\":16,\"attempt\":1,\"argv\":[\"@FAKE\",\"--epochs\",\"100\",\"--sleep-ms\",\"100\"],"
                        "\"checkpoint_dir\":\"t16/ck\"}"));
    start(fx, spec_from("{\"trial_id\":16,\"attempt\":2,\"argv\":[\"@FAKE\",\"--epochs\",\"1\",\"--sleep-ms\",\"1\"],"
                        "\"checkpoint_dir\":\"t16/ck\"}"));
    run_until_done(fx, 10000);
    size_t i, n = 0;
    json_t *e;
    json_array_foreach(fx->events, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "type")), "exited")) continue;
        n++;
        if (json_integer_value(json_object_get(e, "attempt")) == 1)
            assert_int_equal(json_integer_value(json_object_get(e, "signal")), SIGKILL);
        else assert_int_equal(json_integer_value(json_object_get(e, "exit_code")), 0);
    }
    assert_int_equal(n, 2);
}

/* An assignment delivered twice (a lost reply re-sent after a scheduler
 * restart) must not run a quick trial that already ended a second time;
 * the next attempt of the same trial still runs. */
static void test_duplicate_assignment_after_exit(void **state)
{
    fixture *fx = *state;
    const char *spec = "{\"trial_id\":21,\"attempt\":%d,\"argv\":[\"@FAKE\",\"--epochs\",\"1\","
                       "\"--sleep-ms\",\"1\"],\"checkpoint_dir\":\"t21/ck\"}";
    start(fx, spec_from(spec, 1));
    run_until_done(fx, 10000);
    assert_non_null(find_event(fx, 21, "exited"));
    size_t started_before = 0, i;
    json_t *e;
    json_array_foreach(fx->events, i, e)
        started_before += !strcmp(json_string_value(json_object_get(e, "type")), "started");
    agent_spec *dup = spec_from(spec, 1);
    char err[512];
    assert_int_equal(agent_sup_start(fx->sup, dup, err, sizeof err), HF_EEXIST);
    agent_spec_free(dup);
    assert_int_equal(agent_sup_count(fx->sup), 0);
    run_until_done(fx, 1000);
    size_t started_after = 0;
    json_array_foreach(fx->events, i, e)
        started_after += !strcmp(json_string_value(json_object_get(e, "type")), "started");
    assert_int_equal(started_after, started_before);
    start(fx, spec_from(spec, 2));      /* a retry has a new attempt: it runs */
    run_until_done(fx, 10000);
    size_t started_retry = 0;
    json_array_foreach(fx->events, i, e)
        started_retry += !strcmp(json_string_value(json_object_get(e, "type")), "started")
                         && json_integer_value(json_object_get(e, "attempt")) == 2;
    assert_int_equal(started_retry, 1);
}

int main(void)
{
    const char *bin = getenv("HF_BIN");
    snprintf(fake, sizeof fake, "%s/tests/fake_trial", bin ? bin : "bin");
    if (access(fake, X_OK)) {
        fprintf(stderr, "%s not found: build it (make bin/tests/fake_trial) or set HF_BIN\n", fake);
        return 1;
    }
    if (fake[0] != '/') {
        char cwd[512], abs[1024 + 512];
        snprintf(abs, sizeof abs, "%s/%s", getcwd(cwd, sizeof cwd), fake);
        if (snprintf(fake, sizeof fake, "%s", abs) >= (int)sizeof fake) return 1;
    }
    hf_log_init("test_agent_sup");
    hf_log_set_level(HF_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_validation),
        cmocka_unit_test(test_outbox_more),
        cmocka_unit_test_setup_teardown(test_env_cwd_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_code_and_exec_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_graceful, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_ignores_sigterm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flood_and_long_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_line_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_checkpoint_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_superseded_attempt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_assignment_after_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launcher_hostfile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launcher_holder, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_agent_link.c — the agent's wire protocol against a real HTTP server.
 *
 * A small scheduler stand-in on libmicrohttpd (a real socket on 127.0.0.1)
 * speaks docs/protocol.md's agent routes, records every registration and
 * heartbeat body, and hands out assignments and kills. The tests check
 * agent_link/agent_reply_parse directly, then run the real
 * $HF_BIN/hyperfarm-agent process with $HF_BIN/tests/fake_trial as the
 * trial through: registration, assignments (valid and invalid), metrics,
 * a 404 (re-register listing running trials), a partition (the server
 * stopped and restarted on the same port: trials keep running, nothing is
 * lost or duplicated), a kill with grace, and SIGTERM to the agent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_assign.h"
#include "agent/agent_link.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char bin[1024], tmpdir[256];

/* ------------------------------------------------ the stand-in scheduler */

typedef struct fake_sched {
    struct MHD_Daemon *d;
    uint16_t           port;
    pthread_mutex_t    mu;
    json_t            *registers;     /* bodies of POST /api/v1/agents */
    json_t            *heartbeats;    /* bodies of heartbeats */
    json_t            *assign, *kill; /* sent with the next heartbeat reply */
    int                not_found;     /* answer the next N heartbeats with 404 */
    int                refuse;        /* answer the next N heartbeats with 400 */
    const char        *token;         /* required bearer token, NULL = none */
} fake_sched;

static fake_sched fs;

typedef struct conn { char *buf; size_t len; } conn;


/* Was a heartbeat with body's (instance, batch) stored already? Caller holds fs.mu. */
static int seen_batch(const json_t *body)
{
    const json_t *inst = json_object_get(body, "instance"), *batch = json_object_get(body, "batch"), *hb;
    size_t i;
    if (!inst || !batch) return 0;
    json_array_foreach(fs.heartbeats, i, hb)
        if (json_equal(json_object_get(hb, "instance"), inst) && json_equal(json_object_get(hb, "batch"), batch))
            return 1;
    return 0;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **ptr)
{
    (void)cls; (void)version;
    conn *cn = *ptr;
    if (!cn) {
        *ptr = calloc(1, sizeof(conn));
        return MHD_YES;
    }
    if (*size) {
        cn->buf = realloc(cn->buf, cn->len + *size + 1);
        memcpy(cn->buf + cn->len, data, *size);
        cn->len += *size;
        cn->buf[cn->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    if (fs.token) {
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        char want[128];
        snprintf(want, sizeof want, "Bearer %s", fs.token);
        if (!a || strcmp(a, want)) return send_json(c, 401, json_pack("{s:s}", "error", "bad token"));
    }
    json_t *body = cn->buf ? json_loads(cn->buf, 0, NULL) : NULL;
    if (strcmp(method, "POST") || !json_is_object(body)) {
        json_decref(body);
        return send_json(c, 400, json_pack("{s:s}", "error", "bad request"));
    }
    pthread_mutex_lock(&fs.mu);
    enum MHD_Result ret;
    if (!strcmp(url, "/api/v1/agents")) {
        json_array_append_new(fs.registers, body);
        ret = send_json(c, 201, json_pack("{s:i, s:i, s:n}", "id", 42, "heartbeat_interval_ms", 50, "token"));
    } else if (!strcmp(url, "/api/v1/agents/42/heartbeat")) {
        if (fs.refuse > 0) {
            fs.refuse--;
            json_decref(body);
            ret = send_json(c, 400, json_pack("{s:s, s:s}", "error", "must be a number", "field", "metrics[0].values.x"));
        } else if (fs.not_found > 0) {
            fs.not_found--;
            json_decref(body);
            ret = send_json(c, 404, json_pack("{s:s}", "error", "unknown agent 42: register again"));
        } else {
            /* A batch sent again (its reply was lost: the partition below
             * stops the server mid-request) is acknowledged, not stored
             * twice, as the scheduler does (agent_loop.c, "Duplicate-safe
             * heartbeats"). */
            if (seen_batch(body)) json_decref(body);
            else json_array_append_new(fs.heartbeats, body);
            ret = send_json(c, 200, json_pack("{s:o, s:o, s:i}", "assign", fs.assign, "kill", fs.kill,
                                              "heartbeat_interval_ms", 50));
            fs.assign = json_array();
            fs.kill = json_array();
        }
    } else {
        json_decref(body);
        ret = send_json(c, 404, json_pack("{s:s}", "error", "no such route"));
    }
    pthread_mutex_unlock(&fs.mu);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **ptr, enum MHD_RequestTerminationCode t)
{
    (void)cls; (void)c; (void)t;
    conn *cn = *ptr;
    if (cn) free(cn->buf);
    free(cn);
    *ptr = NULL;
}

static void server_start(uint16_t port)
{
    fs.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, port, NULL, NULL,
                            handler, NULL, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
    assert_non_null(fs.d);
    fs.port = MHD_get_daemon_info(fs.d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

static void server_stop(void)
{
    if (fs.d) MHD_stop_daemon(fs.d);
    fs.d = NULL;
}

static int setup(void **state)
{
    (void)state;
    pthread_mutex_init(&fs.mu, NULL);
    fs.registers = json_array();
    fs.heartbeats = json_array();
    fs.assign = json_array();
    fs.kill = json_array();
    fs.not_found = 0;
    fs.refuse = 0;
    fs.token = NULL;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hf-agent-hb-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    server_start(0);
    return 0;
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

static int teardown(void **state)
{
    (void)state;
    server_stop();
    json_decref(fs.registers);
    json_decref(fs.heartbeats);
    json_decref(fs.assign);
    json_decref(fs.kill);
    if (!getenv("HF_KEEP_TMP")) nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* --------------------------------------------------------------- helpers */

static void queue_assign(const char *fmt, ...)
{
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_error_t je;
    json_t *a = json_loads(text, 0, &je);
    if (!a) fprintf(stderr, "bad test JSON: %s: %s\n", je.text, text);
    assert_non_null(a);
    pthread_mutex_lock(&fs.mu);
    json_array_append_new(fs.assign, a);
    pthread_mutex_unlock(&fs.mu);
}

static void queue_kill(int64_t trial, int64_t attempt, int64_t grace_ms, const char *reason)
{
    pthread_mutex_lock(&fs.mu);
    json_array_append_new(fs.kill, json_pack("{s:I, s:I, s:I, s:s}", "trial_id", (json_int_t)trial,
                                             "attempt", (json_int_t)attempt, "grace_ms", (json_int_t)grace_ms,
                                             "reason", reason));
    pthread_mutex_unlock(&fs.mu);
}

/* Count items of kind ("events", "metrics", "logs") of trial in all heartbeats;
 * for events, only of the given type (NULL = any). */
static int count_items(const char *kind, int64_t trial, const char *type)
{
    int n = 0;
    size_t i, k;
    json_t *hb, *it;
    pthread_mutex_lock(&fs.mu);
    json_array_foreach(fs.heartbeats, i, hb) {
        json_array_foreach(json_object_get(hb, kind), k, it) {
            if (json_integer_value(json_object_get(it, "trial_id")) != trial) continue;
            if (type && strcmp(json_string_value(json_object_get(it, "type")), type)) continue;
            n++;
        }
    }
    pthread_mutex_unlock(&fs.mu);
    return n;
}

/* A copy of the first event of trial with type. */
static json_t *get_event(int64_t trial, const char *type)
{
    json_t *r = NULL, *hb, *it;
    size_t i, k;
    pthread_mutex_lock(&fs.mu);
    json_array_foreach(fs.heartbeats, i, hb) {
        json_array_foreach(json_object_get(hb, "events"), k, it) {
            if (!r && json_integer_value(json_object_get(it, "trial_id")) == trial
                && !strcmp(json_string_value(json_object_get(it, "type")), type))
                r = json_deep_copy(it);
        }
    }
    pthread_mutex_unlock(&fs.mu);
    return r;
}

static int registers(void)
{
    pthread_mutex_lock(&fs.mu);
    int n = (int)json_array_size(fs.registers);
    pthread_mutex_unlock(&fs.mu);
    return n;
}

static int wait_until(int64_t timeout_ms, int (*cond)(void *), void *arg)
{
    int64_t t0 = hf_mono_ms();
    while (hf_mono_ms() - t0 < timeout_ms) {
        if (cond(arg)) return 1;
        hf_sleep_ms(20);
    }
    return cond(arg);
}

typedef struct want { const char *kind; int64_t trial; const char *type; int n; } want;
static int have_items(void *arg)
{
    want *w = arg;
    return count_items(w->kind, w->trial, w->type) >= w->n;
}
static int have_registers(void *arg) { return registers() >= *(int *)arg; }

static int wait_items(const char *kind, int64_t trial, const char *type, int n, int64_t timeout_ms)
{
    want w = {kind, trial, type, n};
    return wait_until(timeout_ms, have_items, &w);
}

static pid_t start_agent(const char *name, const char *extra)
{
    char url[64], wd[512], log[512], grace[] = "--grace-ms";
    snprintf(url, sizeof url, "http://127.0.0.1:%u", fs.port);
    snprintf(wd, sizeof wd, "%s/work-%s", tmpdir, name);
    snprintf(log, sizeof log, "%s/agent-%s.log", tmpdir, name);
    char agent[1100];
    snprintf(agent, sizeof agent, "%s/hyperfarm-agent", bin);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char *argv[] = {agent, "--scheduler", url, "--name", (char *)name, "--gpus", "none", "--slots", "4",
                        "--workdir", wd, grace, "3000", "--log-level", "debug", (char *)extra, NULL};
        execv(agent, argv);
        _exit(127);
    }
    return pid;
}

/* Metric epochs of trial: each of 1..n exactly once? */
static int epochs_exact(int64_t trial, int n)
{
    int *seen = calloc((size_t)n + 2, sizeof *seen), ok = 1;
    size_t i, k;
    json_t *hb, *it;
    pthread_mutex_lock(&fs.mu);
    json_array_foreach(fs.heartbeats, i, hb) {
        json_array_foreach(json_object_get(hb, "metrics"), k, it) {
            if (json_integer_value(json_object_get(it, "trial_id")) != trial) continue;
            int e = (int)json_number_value(json_object_get(it, "epoch"));
            if (e < 1 || e > n) ok = 0;
            else seen[e]++;
        }
    }
    pthread_mutex_unlock(&fs.mu);
    for (int e = 1; e <= n; e++)
        if (seen[e] != 1) {
            fprintf(stderr, "epoch %d seen %d times\n", e, seen[e]);
            ok = 0;
        }
    free(seen);
    return ok;
}

/* ------------------------------------------------------------------ tests */

static void test_reply_parse(void **state)
{
    (void)state;
    json_t *r = json_loads("{\"assign\": ["
        "{\"trial_id\":5,\"attempt\":1,\"argv\":[\"a\"],\"checkpoint_dir\":\"e/5/ck\",\"prompt_metric\":\"val_acc\"},"
        "{\"trial_id\":6,\"attempt\":2,\"argv\":[\"a\"],\"checkpoint_dir\":\"/abs\"},"
        "{\"trial_id\":7,\"attempt\":1,\"argv\":[\"a\"],\"checkpoint_dir\":\"e/7/ck\",\"prompt_metric\":\"a b\"},"
        "{\"argv\":[\"a\"]},"
        "17],"
        "\"kill\": [{\"trial_id\":3,\"attempt\":1,\"reason\":\"asha\",\"grace_ms\":100},"
        "{\"trial_id\":4}, {\"trial_id\":\"x\"}, {\"trial_id\":8,\"reason\":null}],"
        "\"heartbeat_interval_ms\": 250, \"report_gap_ms\": 500}", 0, NULL);
    agent_reply out;
    hf_jerr e;
    assert_int_equal(agent_reply_parse(r, &out, &e), 0);
    assert_int_equal(out.nassign, 1);
    assert_int_equal(out.assign[0]->trial_id, 5);
    assert_string_equal(out.assign[0]->prompt_metric, "val_acc");
    assert_int_equal(json_array_size(out.rejected), 2);   /* trials 6 and 7; the others name no trial */
    assert_non_null(strstr(json_string_value(json_object_get(json_array_get(out.rejected, 1), "error")),
                           "assign[2].prompt_metric"));
    json_t *rej = json_array_get(out.rejected, 0);
    assert_int_equal(json_integer_value(json_object_get(rej, "trial_id")), 6);
    assert_int_equal(json_integer_value(json_object_get(rej, "attempt")), 2);
    assert_string_equal(json_string_value(json_object_get(rej, "type")), "start_failed");
    assert_non_null(strstr(json_string_value(json_object_get(rej, "error")), "assign[1].checkpoint_dir"));
    assert_int_equal(out.nkill, 3);
    assert_int_equal(out.kill[0].grace_ms, 100);
    assert_string_equal(out.kill[0].reason, "asha");
    assert_int_equal(out.kill[1].grace_ms, -1);
    assert_int_equal(out.kill[1].attempt, 0);
    assert_string_equal(out.kill[2].reason, "scheduler");
    assert_int_equal(out.interval_ms, 250);
    assert_int_equal(out.report_gap_ms, 500);
    agent_reply_free(&out);
    json_decref(r);

    /* an older scheduler sends no report_gap_ms: 0 = keep the agent's own */
    r = json_loads("{\"assign\": [], \"kill\": [], \"heartbeat_interval_ms\": 250}", 0, NULL);
    assert_int_equal(agent_reply_parse(r, &out, &e), 0);
    assert_int_equal(out.report_gap_ms, 0);
    agent_reply_free(&out);
    json_decref(r);

    static const struct { const char *body, *field; } bad[] = {
        {"[]", ""}, {"{\"assign\": 3}", "assign"}, {"{\"kill\": {}}", "kill"},
        {"{\"heartbeat_interval_ms\": -5}", "heartbeat_interval_ms"},
        {"{\"report_gap_ms\": 0}", "report_gap_ms"}, {"{\"report_gap_ms\": \"20\"}", "report_gap_ms"},
        {"{\"report_gap_ms\": 3600001}", "report_gap_ms"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = json_loads(bad[i].body, JSON_DECODE_ANY, NULL);
        assert_int_not_equal(agent_reply_parse(r, &out, &e), 0);
        if (strcmp(e.field, bad[i].field))
            fail_msg("%s: error names '%s', not '%s'", bad[i].body, e.field, bad[i].field);
        agent_reply_free(&out);
        json_decref(r);
    }
}

static void test_link(void **state)
{
    (void)state;
    char url[64], err[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", fs.port);
    agent_link *l = agent_link_new(url, "s3cret", NULL, 2000,
                                   json_pack("{s:s, s:i, s:[], s:s}", "name", "n1", "slots", 2, "gpus", "host", "127.0.0.1"));
    assert_non_null(l);
    json_t *running = json_pack("[{s:i, s:i, s:i}]", "trial_id", 3, "attempt", 1, "pid", 99);
    fs.token = "other";
    assert_int_equal(agent_link_register(l, running, err, sizeof err), HF_EAUTH);
    assert_non_null(strstr(err, "401"));
    fs.token = "s3cret";
    assert_int_equal(agent_link_register(l, running, err, sizeof err), 0);
    assert_int_equal(agent_link_id(l), 42);
    assert_int_equal(agent_link_interval(l), 50);
    json_t *reg = json_array_get(fs.registers, 0);
    assert_string_equal(json_string_value(json_object_get(reg, "name")), "n1");
    assert_string_equal(json_string_value(json_object_get(reg, "version")), AGENT_VERSION);
    assert_true(json_equal(json_object_get(reg, "running"), running));

    json_t *body = json_pack("{s:[], s:[], s:[], s:[]}", "running", "events", "metrics", "logs"), *reply = NULL;
    queue_kill(3, 1, 10, "user");
    assert_int_equal(agent_link_heartbeat(l, body, &reply, err, sizeof err), 0);
    assert_int_equal(json_array_size(json_object_get(reply, "kill")), 1);
    json_decref(reply);
    fs.refuse = 1;
    assert_int_equal(agent_link_heartbeat(l, body, &reply, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "HTTP 400: must be a number"));
    assert_int_equal(agent_link_id(l), 42);
    fs.not_found = 1;
    assert_int_equal(agent_link_heartbeat(l, body, &reply, err, sizeof err), HF_ENOTFOUND);
    assert_int_equal(agent_link_id(l), 0);    /* forgotten: must register again */
    assert_null(reply);
    assert_int_equal(agent_link_heartbeat(l, body, &reply, err, sizeof err), HF_ENOTFOUND);
    server_stop();
    assert_int_equal(agent_link_register(l, running, err, sizeof err), HF_ECONN);
    server_start(fs.port);
    assert_int_equal(agent_link_register(l, running, err, sizeof err), 0);
    fs.token = NULL;
    json_decref(body);
    json_decref(running);
    agent_link_free(l);
}

static void test_agent_process(void **state)
{
    (void)state;
    char fake[1200];
    snprintf(fake, sizeof fake, "%s/tests/fake_trial", bin);
    /* a valid assignment, one with a forbidden path, one that cannot exec */
    queue_assign("{\"trial_id\":1,\"attempt\":1,\"experiment_id\":1,\"argv\":[\"%s\",\"--sleep-ms\",\"60\"],"
                 "\"budget\":40,"
                 "\"checkpoint_dir\":\"experiments/1/trials/1/checkpoints\",\"slots\":1,\"gpus\":[]}", fake);
    queue_assign("{\"trial_id\":2,\"attempt\":1,\"argv\":[\"%s\"],\"checkpoint_dir\":\"../../etc\"}", fake);
    queue_assign("{\"trial_id\":3,\"attempt\":1,\"argv\":[\"no-such-trial-program\"],\"checkpoint_dir\":\"x/3/ck\"}");
    pid_t agent = start_agent("a1", "--heartbeat-ms=50");
    int one = 1, two = 2, three = 3;
    assert_true(wait_until(5000, have_registers, &one));
    json_t *reg = json_array_get(fs.registers, 0);
    assert_string_equal(json_string_value(json_object_get(reg, "name")), "a1");
    assert_int_equal(json_integer_value(json_object_get(reg, "slots")), 4);
    assert_int_equal(json_array_size(json_object_get(reg, "gpus")), 0);
    assert_string_equal(json_string_value(json_object_get(reg, "host")), "127.0.0.1");

    assert_true(wait_items("events", 1, "started", 1, 5000));
    assert_true(wait_items("events", 2, "start_failed", 1, 5000));
    assert_true(wait_items("events", 3, "start_failed", 1, 5000));
    json_t *ev = get_event(3, "start_failed");
    assert_non_null(strstr(json_string_value(json_object_get(ev, "error")), "No such file"));
    json_decref(ev);
    assert_true(wait_items("metrics", 1, NULL, 3, 5000));

    /* scheduler lost its database: 404, the agent registers again listing trial 1 */
    pthread_mutex_lock(&fs.mu);
    fs.not_found = 1;
    pthread_mutex_unlock(&fs.mu);
    assert_true(wait_until(5000, have_registers, &two));
    reg = json_array_get(fs.registers, 1);
    json_t *run0 = json_array_get(json_object_get(reg, "running"), 0);
    assert_int_equal(json_integer_value(json_object_get(run0, "trial_id")), 1);
    assert_int_equal(json_integer_value(json_object_get(run0, "attempt")), 1);
    assert_true(json_integer_value(json_object_get(run0, "pid")) > 0);

    /* partition: the scheduler goes away for 1.2 s and comes back on the same port */
    int before = count_items("metrics", 1, NULL);
    server_stop();
    hf_sleep_ms(1200);
    assert_int_equal(waitpid(agent, NULL, WNOHANG), 0);      /* the agent did not give up */
    server_start(fs.port);
    /* the trial kept running; everything it reported meanwhile arrives, once */
    assert_true(wait_items("events", 1, "exited", 1, 10000));
    assert_true(count_items("metrics", 1, NULL) > before);
    assert_true(epochs_exact(1, 40));
    ev = get_event(1, "exited");
    assert_int_equal(json_integer_value(json_object_get(ev, "exit_code")), 0);
    json_decref(ev);
    assert_true(count_items("events", 1, "started") == 1);
    /* after a lost connection the agent registers again before heartbeating,
     * listing the trial that kept running */
    assert_true(registers() == 3);
    reg = json_array_get(fs.registers, 2);
    run0 = json_array_get(json_object_get(reg, "running"), 0);
    assert_int_equal(json_integer_value(json_object_get(run0, "trial_id")), 1);

    /* kill with grace: fake_trial checkpoints and exits 143 */
    queue_assign("{\"trial_id\":4,\"attempt\":1,\"argv\":[\"%s\",\"--epochs\",\"1000\",\"--sleep-ms\",\"50\"],"
                 "\"checkpoint_dir\":\"experiments/1/trials/4/checkpoints\"}", fake);
    assert_true(wait_items("metrics", 4, NULL, 2, 5000));
    int64_t t0 = hf_mono_ms();
    queue_kill(4, 1, 5000, "asha");
    assert_true(wait_items("events", 4, "exited", 1, 5000));
    assert_true(hf_mono_ms() - t0 < 2000);
    ev = get_event(4, "exited");
    assert_int_equal(json_integer_value(json_object_get(ev, "exit_code")), 143);
    json_decref(ev);

    /* SIGTERM to the agent: trial 5 is stopped, its exit reported, the agent exits 0 */
    queue_assign("{\"trial_id\":5,\"attempt\":1,\"argv\":[\"%s\",\"--epochs\",\"1000\",\"--sleep-ms\",\"50\"],"
                 "\"checkpoint_dir\":\"experiments/1/trials/5/checkpoints\"}", fake);
    assert_true(wait_items("metrics", 5, NULL, 1, 5000));
    kill(agent, SIGTERM);
    int st = 0;
    t0 = hf_mono_ms();
    while (waitpid(agent, &st, WNOHANG) == 0 && hf_mono_ms() - t0 < 10000) hf_sleep_ms(20);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(count_items("events", 5, "exited") == 1);
    ev = get_event(5, "exited");
    assert_int_equal(json_integer_value(json_object_get(ev, "exit_code")), 143);
    json_decref(ev);
    (void)three;
}

static void test_agent_bad_options(void **state)
{
    (void)state;
    char agent[1100], cmd[2400];
    snprintf(agent, sizeof agent, "%s/hyperfarm-agent", bin);
    static const char *const bad[] = {"--slots -1", "--gpus 0,x", "--scheduler ftp://x", "--log-level loud",
                                      "--heartbeat-ms abc", "--no-such-flag", "--token-file /nonexistent/t"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --workdir %s/w %s >/dev/null 2>&1", agent, tmpdir, bad[i]);
        int rc = system(cmd);
        if (!WIFEXITED(rc) || WEXITSTATUS(rc) == 0) fprintf(stderr, "accepted: %s\n", bad[i]);
        assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
    }
    snprintf(cmd, sizeof cmd, "%s --print-config --slots 3 --gpus none 2>/dev/null", agent);
    FILE *p = popen(cmd, "r");
    json_t *j = json_loadf(p, 0, NULL);
    pclose(p);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "slots")), 3);
    assert_string_equal(json_string_value(json_object_get(j, "gpus")), "none");
    json_decref(j);
}

int main(void)
{
    const char *b = getenv("HF_BIN");
    char cwd[512];
    if (!b) b = "bin";
    if (b[0] == '/') snprintf(bin, sizeof bin, "%s", b);
    else snprintf(bin, sizeof bin, "%s/%s", getcwd(cwd, sizeof cwd) ? cwd : ".", b);
    char p1[1200], p2[1200];
    snprintf(p1, sizeof p1, "%s/hyperfarm-agent", bin);
    snprintf(p2, sizeof p2, "%s/tests/fake_trial", bin);
    if (access(p1, X_OK) || access(p2, X_OK)) {
        fprintf(stderr, "need %s and %s (make bin/hyperfarm-agent bin/tests/fake_trial, or set HF_BIN)\n", p1, p2);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    hf_log_init("test_agent_link");
    hf_log_set_level(HF_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_parse),
        cmocka_unit_test_setup_teardown(test_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_bad_options, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

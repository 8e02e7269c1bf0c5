/*
 * cold_core.c — the scheduler core's own floor for a cold start (issue 32
 * point 4; docs/operations.md, "bench/loadgen", "What bounds the cold
 * start"): the real core (scheduler/core) on a real store (a SQLite file
 * opened as hyperfarm-scheduler opens it, the group flush included), with
 * no HTTP, no JSON on a wire, no other thread and no load generator
 * competing for the CPU. The doorbell, the kick, the long-poll's push and
 * the agents' heartbeats are direct calls, as the HTTP layer makes them
 * (tests/unit/test_scheduler_cold_dispatch.c checks that sequence).
 *
 * AGENTS idle agents of SLOTS slots register; EXPERIMENTS random-search
 * experiments of TRIALS trials in all (as bin/bench/loadgen submits them:
 * max_concurrent_trials = all of its trials) are submitted one after the
 * other, then the burst is placed a chunk per call of sched_dispatch_more
 * (as hf-cron does); then every agent takes its pushed assignments
 * (sched_agent_take_assign, the long-poll's answer) and heartbeats them
 * started. Printed: the time of each phase, the time from the first
 * submission to the last trial RUNNING and durable (store_wait_durable),
 * and per trial. That last figure bounds loadgen's cold p99 from below for
 * the same burst: every cold trial is counted from its experiment's
 * creation to its start's acknowledgement, and here nothing else runs.
 *
 *   bin/bench/cold_core [--profile] [AGENTS [SLOTS [TRIALS [EXPERIMENTS [REPS]]]]]
 *       defaults 1000 8 8000 8 3 (loadgen --full's cold start)
 *
 * --profile: SQLite's own clock per statement (sqlite3_trace_v2,
 * SQLITE_TRACE_PROFILE) over the timed phases of each run, printed as
 * total ms, calls and µs per call, dearest first: where the core's
 * SQL time goes (docs/operations.md, "What bounds the cold start").
 * SQLite times each call with a millisecond clock, so one call's figure
 * is 0 or 1 ms; summed over thousands of calls the totals are sound.
 */
#include "hf_err.h"
#include "hf_json.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"

#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --profile: per statement text, calls and nanoseconds (stmt text pointers
 * are stable while the store lives; compared by content across runs). */
typedef struct { char *sql; long n; long long ns; } stmt_prof;
static stmt_prof prof[256];
static int nprof, profiling;

static int on_profile(unsigned type, void *ctx, void *stmt, void *ns)
{
    (void)type; (void)ctx;
    if (!profiling) return 0;
    const char *sql = sqlite3_sql(stmt);
    if (!sql) return 0;
    for (int i = 0; i < nprof; i++)
        if (strcmp(prof[i].sql, sql) == 0) {
            prof[i].n++;
            prof[i].ns += *(const long long *)ns;
            return 0;
        }
    if (nprof < (int)(sizeof prof / sizeof *prof) && (prof[nprof].sql = strdup(sql))) {
        prof[nprof].n = 1;
        prof[nprof++].ns = *(const long long *)ns;
    }
    return 0;
}

static int by_time(const void *a, const void *b)
{
    long long x = ((const stmt_prof *)a)->ns, y = ((const stmt_prof *)b)->ns;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void print_profile(int reps)
{
    long long total = 0;
    qsort(prof, (size_t)nprof, sizeof *prof, by_time);
    for (int i = 0; i < nprof; i++) total += prof[i].ns;
    printf("SQL time per run by statement (sqlite3 profile), %.1f ms in all:\n", (double)total / 1e6 / reps);
    printf("%10s %9s %9s  %s\n", "ms/run", "calls/run", "us/call", "statement");
    for (int i = 0; i < nprof; i++) {
        printf("%10.1f %9ld %9.2f  %.110s\n", (double)prof[i].ns / 1e6 / reps, prof[i].n / reps,
               (double)prof[i].ns / 1e3 / (double)prof[i].n, prof[i].sql);
        free(prof[i].sql);
    }
}

static int kicked;
static void kick(void *ctx) { (void)ctx; kicked = 1; }
static void ring(void *ctx, int64_t agent_id) { (void)ctx; (void)agent_id; }

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "cold_core: %s: %s\n", what, msg);
    exit(1);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb; (void)flag; (void)f;
    return remove(p);
}

static json_t *parse(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) die("json", je.text);
    return j;
}

/* The "started" heartbeat of the assignments in as (as an agent sends it). */
static json_t *started_body(const json_t *as)
{
    json_t *ev = json_array(), *run = json_array();
    size_t i;
    const json_t *a;
    json_array_foreach(as, i, a) {
        json_int_t t = json_integer_value(json_object_get(a, "trial_id"));
        json_int_t att = json_integer_value(json_object_get(a, "attempt"));
        json_array_append_new(ev, json_pack("{sIsIsssIsI}", "trial_id", t, "attempt", att, "type", "started", "time",
                                            (json_int_t)hf_wall_ms(), "pid", (json_int_t)(1000 + t)));
        json_array_append_new(run, json_pack("{sIsIsI}", "trial_id", t, "attempt", att, "pid", (json_int_t)(1000 + t)));
    }
    return json_pack("{sososo}", "running", run, "events", ev, "metrics", json_array());
}

typedef struct { double submit, place, push, start, durable, total; long started; } run_ms;

static run_ms one_run(int agents, int slots, int trials, int nexp)
{
    char dir[] = "/tmp/hf-cold-core-XXXXXX", path[64], err[256] = "";
    if (!mkdtemp(dir)) die("mkdtemp", "failed");
    snprintf(path, sizeof path, "%s/hf.db", dir);
    store *st = NULL;
    sched *c = NULL;
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (store_open(path, &st, err, sizeof err)) die("store_open", err);
    /* as hyperfarm-scheduler runs it by default (main.c): the group flush */
    if (store_set_sync(st, STORE_SYNC_FULL)) die("store_set_sync", "FULL");
    if (sched_new(&cfg, st, NULL, &c, err, sizeof err)) die("sched_new", err);
    sqlite3_trace_v2(store_db(st), SQLITE_TRACE_PROFILE, on_profile, NULL);
    sched_set_doorbell(c, ring, NULL);
    sched_set_kick(c, kick, NULL);
    int64_t *aid = calloc((size_t)agents, sizeof *aid);
    if (!aid) die("calloc", "out of memory");
    for (int i = 0; i < agents; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"name\": \"cold-%d\", \"slots\": %d}", i, slots);
        json_t *b = parse(body), *out = NULL;
        hf_jerr je;
        if (sched_agent_register(c, b, "127.0.0.1", &out, &je)) die("register", je.msg);
        aid[i] = json_integer_value(json_object_get(out, "id"));
        json_decref(out);
        json_decref(b);
    }
    if (store_wait_durable(st)) die("flush", "failed");
    run_ms r = {0};
    profiling = 1;
    int64_t t0 = hf_mono_us(), left = trials;
    for (int e = 0; e < nexp; e++) {
        int n = (int)(left / (nexp - e));
        left -= n;
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"name\":\"cold-exp-%d\",\"objective\":{\"metric\":\"m0\",\"goal\":\"minimize\"},"
                 "\"searcher\":{\"name\":\"random\",\"max_trials\":%d,\"max_concurrent_trials\":%d},"
                 "\"hyperparameters\":{\"lr\":{\"type\":\"log\",\"min\":0.0001,\"max\":0.3},"
                 "\"width\":{\"type\":\"int\",\"min\":16,\"max\":512}},"
                 "\"trial\":{\"command\":[\"true\"],\"resources\":{\"workers\":1,\"slots_per_worker\":1},"
                 "\"max_restarts\":0}}", e, n, n);
        json_t *x = parse(body);
        hf_jerr je;
        int64_t id = 0;
        if (sched_experiment_submit(c, x, &id, &je)) die("submit", je.msg);
        json_decref(x);
    }
    int64_t t1 = hf_mono_us();
    while (kicked) {
        kicked = 0;
        sched_dispatch_more(c);
    }
    int64_t t2 = hf_mono_us();
    json_t **as = calloc((size_t)agents, sizeof *as);
    if (!as) die("calloc", "out of memory");
    for (int i = 0; i < agents; i++)
        if (sched_agent_take_assign(c, aid[i], &as[i])) die("take_assign", "failed");
    int64_t t3 = hf_mono_us();
    for (int i = 0; i < agents; i++) {
        json_t *b = started_body(as[i]), *out = NULL;
        hf_jerr je;
        r.started += (long)json_array_size(as[i]);
        if (sched_agent_heartbeat(c, aid[i], b, &out, &je)) die("heartbeat", je.msg);
        json_decref(out);
        json_decref(b);
        json_decref(as[i]);
    }
    int64_t t4 = hf_mono_us();
    if (store_wait_durable(st)) die("flush", "failed");
    int64_t t5 = hf_mono_us();
    profiling = 0;
    r.submit = (double)(t1 - t0) / 1000;
    r.place = (double)(t2 - t1) / 1000;
    r.push = (double)(t3 - t2) / 1000;
    r.start = (double)(t4 - t3) / 1000;
    r.durable = (double)(t5 - t4) / 1000;
    r.total = (double)(t5 - t0) / 1000;
    free(as);
    free(aid);
    sched_free(c);
    store_close(st);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return r;
}

int main(int argc, char **argv)
{
    int want_profile = argc > 1 && strcmp(argv[1], "--profile") == 0;
    if (want_profile) argc--, argv++;
    int agents = argc > 1 ? atoi(argv[1]) : 1000, slots = argc > 2 ? atoi(argv[2]) : 8;
    int trials = argc > 3 ? atoi(argv[3]) : 8000, nexp = argc > 4 ? atoi(argv[4]) : 8;
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    if (agents < 1 || slots < 1 || trials < 1 || nexp < 1 || nexp > trials || reps < 1) {
        fprintf(stderr, "usage: cold_core [--profile] [AGENTS [SLOTS [TRIALS [EXPERIMENTS [REPS]]]]]\n");
        return 2;
    }
    hf_log_set_level(HF_LOG_WARN);
    printf("cold_core: %d agents x %d slots, %d trials in %d experiments, the core alone (no HTTP), %d runs\n",
           agents, slots, trials, nexp, reps);
    printf("%4s %10s %10s %10s %10s %10s %10s %9s %12s\n", "run", "submit ms", "place ms", "push ms", "start ms",
           "flush ms", "total ms", "started", "us/trial");
    double best = 0;
    for (int k = 0; k < reps; k++) {
        run_ms r = one_run(agents, slots, trials, nexp);
        printf("%4d %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %9ld %12.1f\n", k + 1, r.submit, r.place, r.push, r.start,
               r.durable, r.total, r.started, r.started ? 1000 * r.total / (double)r.started : 0);
        if (k == 0 || r.total < best) best = r.total;
    }
    if (want_profile) print_profile(reps);
    printf("COLD_CORE {\"agents\":%d,\"slots\":%d,\"trials\":%d,\"experiments\":%d,\"best_total_ms\":%.1f}\n", agents,
           slots, trials, nexp, best);
    return 0;
}

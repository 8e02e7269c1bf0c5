/*
 * loadgen.c — plays a farm of agents against one scheduler and measures it.
 *
 * It registers A simulated agents with S slots each, submits E random-search
 * experiments totalling T trials, and then behaves exactly like
 * hyperfarm-agent on the wire (docs/protocol.md): heartbeats at the
 * interval the scheduler asks for, accepts assignments, "runs" each trial
 * by reporting R metric reports spread over its heartbeats (P per
 * heartbeat, V values each), then reports it exited with status 0. No
 * process is started: the point is the scheduler's side of the load.
 *
 * Like a good agent it sends a heartbeat at once (not at the next tick)
 * when it has something to tell: a trial just accepted (started) or a
 * trial whose last reports were acknowledged (exited). That makes the
 * dispatch latency the scheduler's own, plus the poll interval for trials
 * that become ready while their agent is idle. Each agent's doorbell
 * long-poll asks for the push (wait?assign=1, docs/protocol.md): an idle
 * agent gets its assignments in the long-poll's answer and its first
 * heartbeat already reports them started (--no-push: it heartbeats to
 * fetch them, as before; a scheduler without the push answers without
 * them and the agent heartbeats, so one loadgen measures both).
 *
 * Measured and printed at the end (and as one "LOADGEN {json}" line):
 *   - acknowledged metric reports/s (one report = one trial line with V
 *     values; points = reports * V), over the whole run and the best 5 s
 *   - heartbeat round-trip p50/p99
 *   - user GET latency p50/p99 from a probe thread that cycles through the
 *     dashboard's read routes during the load
 *   - dispatch latency p50/p99: from the moment the trial was ready (the
 *     later of its experiment's created_at, read from the API after the
 *     run, and the moment its agent reported the slot free) to the moment
 *     the scheduler acknowledged the heartbeat carrying its "started"
 *     event. The experiment's time, not the trial's: a scheduler that
 *     creates trials lazily must not hide the wait before creation.
 *   - scheduler RSS (peak sampled VmRSS and VmHWM from /proc/PID/status)
 *   - database size (db + wal after a clean shutdown) per million points,
 *     and a check that the metrics table holds every acknowledged point
 *
 * Without --url it spawns the scheduler next to it (../hyperfarm-scheduler,
 * or $HF_BIN, or --scheduler PATH) on a free loopback port and a fresh
 * database in a temporary directory, and stops it with SIGTERM at the end.
 *
 * Threads: --threads workers (default 16) each own every Nth agent and
 * talk over one keep-alive connection (hf_http); one probe thread; the
 * main thread samples RSS and prints progress.
 */
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_http.h"
#include "hf_json.h"
#include "hf_log.h"
#include "hf_time.h"

#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define LG_MAX_SLOTS 64
#define LG_BODY_MAX (8u << 20)   /* the protocol's heartbeat body limit */

/* ---- options ---- */

typedef struct lg_opts {
    int agents, slots, trials, experiments, reports, per_hb, values, threads;
    int hb_ms;          /* -1: the scheduler's interval; 0: back to back; else fixed */
    int eager;          /* heartbeat at once after accept/exit */
    int wait;           /* keep a doorbell long-poll open per agent, as hyperfarm-agent does */
    int push;           /* ask the long-poll for the assignments themselves (assign=1) */
    int probe_hz;
    int max_seconds;
    int keep;
    const char *sched_args[16];   /* --sched-arg, appended to the spawned scheduler's argv */
    int nsched_args;
    const char *url, *scheduler, *agent_token, *user_token, *db, *name_prefix;
    pid_t pid;          /* scheduler pid for RSS when --url is given */
} lg_opts;

static lg_opts opt = {
    .agents = 200, .slots = 8, .trials = 8000, .experiments = 0, .reports = 40,
    .per_hb = 2, .values = 2, .threads = 0, .hb_ms = -1, .eager = 1, .wait = 1, .push = 1, .probe_hz = 20,
    .max_seconds = 600, .name_prefix = "lg",
};

/* ---- latency samples: a growable array of microseconds ---- */

typedef struct lg_lat {
    uint32_t *v;
    size_t n, cap;
} lg_lat;

static void lat_add(lg_lat *l, int64_t us)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        uint32_t *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) return;            /* a lost sample is better than a crash */
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = us < 0 ? 0 : (us > UINT32_MAX ? UINT32_MAX : (uint32_t)us);
}

static void lat_merge(lg_lat *dst, const lg_lat *src)
{
    for (size_t i = 0; i < src->n; i++) lat_add(dst, src->v[i]);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Percentile in milliseconds of a sorted array; -1 when empty. */
static double lat_pct(const lg_lat *l, double p)
{
    if (l->n == 0) return -1;
    size_t i = (size_t)(p / 100.0 * (double)(l->n - 1) + 0.5);
    if (i >= l->n) i = l->n - 1;
    return l->v[i] / 1000.0;
}

static void lat_sort(lg_lat *l) { if (l->n) qsort(l->v, l->n, sizeof *l->v, cmp_u32); }

/* ---- simulated agents ---- */

enum { SLOT_FREE = 0, SLOT_ASSIGNED, SLOT_RUNNING, SLOT_EXITING };

typedef struct lg_slot {
    int     state;
    int64_t trial_id;
    int     attempt;
    int     reports_left;   /* reports still to generate */
    int     unacked;        /* reports generated but not yet acknowledged */
    int64_t step;
    int64_t free_since;     /* wall ms the scheduler learnt this slot was free */
    long    disp;           /* index of this trial's dispatch record, -1 none */
} lg_slot;

typedef struct lg_agent {
    int     idx;
    int64_t id;             /* scheduler's agent id, 0 = not registered */
    int64_t next_hb;        /* monotonic ms */
    int     interval_ms;
    hf_buf  events;         /* pending event objects, comma separated */
    hf_buf  metrics;        /* pending metric objects, comma separated */
    long    pend_reports;
    int64_t batch;          /* heartbeat batch number of the pending items (instance/batch) */
    int     retry;          /* the last send of this batch failed: re-send it unchanged */
    atomic_int rung;        /* the doorbell answered "pending": heartbeat now */
    hf_buf  pushed;         /* long-poll answers carrying assignments, each ending in '\n'
                             * (under the owning worker's mu: the waiter adds, the worker takes) */
    int64_t pushed_wall;    /* when the first of them arrived */
    int     worker;         /* index of the worker thread that owns it */
    lg_slot slot[LG_MAX_SLOTS];
} lg_agent;

typedef struct lg_disp {
    int64_t trial_id;
    int64_t exp_id;
    int64_t free_since;     /* wall ms */
    int64_t recv;           /* wall ms the assignment arrived */
    int64_t started_ack;    /* wall ms the started event was acknowledged */
} lg_disp;

typedef struct lg_worker {
    pthread_t th;
    int       index;
    hf_http  *http;
    lg_lat    hb_lat;
    lg_disp  *disp;
    size_t    ndisp, capdisp;
    long      status_counts[6];   /* 2xx 4xx(other) 404 5xx 507 transport */
    char      last_err[400];
    pthread_mutex_t mu;           /* with cv: woken by the doorbell thread */
    pthread_cond_t  cv;
    int       woken;
} lg_worker;

static lg_agent *agents;
static lg_worker *workers;
static atomic_long acked_reports, acked_points, trials_done, assigns_total, overassigns,
    hb_total, hb_failed, kills_total, rejected_reports, rejected_points, rings_total, waits_total,
    waits_parked, pushes_total;
static atomic_llong t_last_exit;   /* monotonic ms of the last acknowledged exit: the run's end */
static long instance_salt;
static atomic_int stop_flag;
static int64_t t_start_wall, t_first_submit;
static char base_url[256];

/* Append the objects of one heartbeat item list: "," between items. */
static int buf_item(hf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int buf_item(hf_buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return HF_ETOOBIG;
    if (b->len && hf_buf_add(b, ",", 1)) return HF_ETOOBIG;
    return hf_buf_add(b, tmp, (size_t)n);
}

static int agent_register(lg_worker *w, lg_agent *a)
{
    hf_buf body;
    long st = 0;
    char *resp = NULL, err[256];
    size_t rlen = 0;
    int rc = HF_EHTTP, first = 1;

    hf_buf_init(&body, 1 << 20);
    hf_buf_printf(&body, "{\"name\":\"%s-agent-%05d\",\"slots\":%d,\"gpus\":[],"
                  "\"host\":\"127.0.0.1\",\"version\":\"0.1\",\"running\":[",
                  opt.name_prefix, a->idx, opt.slots);
    for (int s = 0; s < opt.slots; s++) {
        lg_slot *sl = &a->slot[s];
        if (sl->state != SLOT_ASSIGNED && sl->state != SLOT_RUNNING) continue;
        hf_buf_printf(&body, "%s{\"trial_id\":%" PRId64 ",\"attempt\":%d,\"pid\":%d}",
                      first ? "" : ",", sl->trial_id, sl->attempt, 100000 + a->idx * 64 + s);
        first = 0;
    }
    hf_buf_addstr(&body, "]}");
    if (hf_http_request_raw(w->http, "POST", "/api/v1/agents", body.data, &st, &resp, &rlen,
                            err, sizeof err)) {
        snprintf(w->last_err, sizeof w->last_err, "register: %s", err);
        goto end;
    }
    if (st != 201 && st != 200) {
        snprintf(w->last_err, sizeof w->last_err, "register: HTTP %ld: %.200s", st, resp ? resp : "");
        goto end;
    }
    json_t *j = json_loadb(resp, rlen, 0, NULL);
    json_int_t id = 0, iv = 0;
    if (!j || json_unpack(j, "{s:I}", "id", &id) || id <= 0) {
        snprintf(w->last_err, sizeof w->last_err, "register: no id in %.200s", resp);
        json_decref(j);
        goto end;
    }
    if (!json_unpack(j, "{s:I}", "heartbeat_interval_ms", &iv) && iv > 0 && iv < 600000)
        a->interval_ms = (int)iv;
    json_decref(j);
    a->id = id;
    rc = 0;
end:
    free(resp);
    hf_buf_free(&body);
    return rc;
}

static lg_slot *slot_find(lg_agent *a, int64_t trial_id)
{
    for (int s = 0; s < opt.slots; s++)
        if (a->slot[s].state != SLOT_FREE && a->slot[s].trial_id == trial_id) return &a->slot[s];
    return NULL;
}

static void disp_push(lg_worker *w, lg_slot *sl, int64_t trial_id, int64_t exp_id, int64_t recv)
{
    if (w->ndisp == w->capdisp) {
        size_t cap = w->capdisp ? w->capdisp * 2 : 1024;
        lg_disp *nd = realloc(w->disp, cap * sizeof *nd);
        if (!nd) { sl->disp = -1; return; }
        w->disp = nd;
        w->capdisp = cap;
    }
    w->disp[w->ndisp] = (lg_disp){trial_id, exp_id, sl->free_since, recv, 0};
    sl->disp = (long)w->ndisp++;
}

/* Handle a 200 heartbeat reply: new assignments and kills. */
static void agent_on_reply(lg_worker *w, lg_agent *a, const char *resp, size_t rlen, int64_t now_wall)
{
    json_t *j = json_loadb(resp, rlen, 0, NULL), *arr, *it;
    size_t i;
    json_int_t iv;
    if (!j) return;
    if (!json_unpack(j, "{s:I}", "heartbeat_interval_ms", &iv) && iv > 0 && iv < 600000)
        a->interval_ms = (int)iv;
    {   /* "acknowledged" means stored: what was not stored is counted here */
        json_int_t rm = 0, rp = 0;
        if (!json_unpack(json_object_get(j, "rejected"), "{s?I,s?I}", "metrics", &rm, "points", &rp) &&
            (rm > 0 || rp > 0)) {
            atomic_fetch_sub(&acked_reports, (long)rm);
            atomic_fetch_sub(&acked_points, (long)(rm * opt.values + rp));
            atomic_fetch_add(&rejected_reports, (long)rm);
            atomic_fetch_add(&rejected_points, (long)(rm * opt.values + rp));
        }
    }
    arr = json_object_get(j, "assign");
    json_array_foreach(arr, i, it) {
        json_int_t tid = 0, att = 1, eid = 0;
        if (json_unpack(it, "{s:I,s?I,s?I}", "trial_id", &tid, "attempt", &att, "experiment_id", &eid)) continue;
        atomic_fetch_add(&assigns_total, 1);
        lg_slot *sl = slot_find(a, tid);
        if (sl) {       /* already ours: a duplicate assignment */
            if (atomic_fetch_add(&overassigns, 1) < 5)
                fprintf(stderr, "loadgen: agent %s-agent-%05d got trial %lld attempt %lld again (slot state %d, "
                        "attempt %d)\n", opt.name_prefix, a->idx, (long long)tid, (long long)att, sl->state,
                        sl->attempt);
            continue;
        }
        /* The free slot that has been free the longest takes it. */
        lg_slot *best = NULL;
        for (int s = 0; s < opt.slots; s++)
            if (a->slot[s].state == SLOT_FREE && (!best || a->slot[s].free_since < best->free_since))
                best = &a->slot[s];
        if (!best) {
            if (atomic_fetch_add(&overassigns, 1) < 5)
                fprintf(stderr, "loadgen: agent %s-agent-%05d got trial %lld but has no free slot\n",
                        opt.name_prefix, a->idx, (long long)tid);
            buf_item(&a->events, "{\"trial_id\":%lld,\"attempt\":%lld,\"type\":\"start_failed\","
                     "\"time\":%" PRId64 ",\"error\":\"loadgen: no free slot\"}",
                     (long long)tid, (long long)att, now_wall);
            continue;
        }
        best->state = SLOT_ASSIGNED;
        best->trial_id = tid;
        best->attempt = (int)att;
        best->reports_left = opt.reports;
        best->unacked = 0;
        best->step = 0;
        disp_push(w, best, tid, eid, now_wall);
        buf_item(&a->events, "{\"trial_id\":%lld,\"attempt\":%lld,\"type\":\"started\","
                 "\"time\":%" PRId64 ",\"pid\":%d}", (long long)tid, (long long)att, now_wall,
                 100000 + a->idx * 64 + (int)(best - a->slot));
        if (opt.eager) a->next_hb = 0;
    }
    arr = json_object_get(j, "kill");
    json_array_foreach(arr, i, it) {
        json_int_t tid = 0, katt = 0;
        const char *reason = "?";
        if (json_unpack(it, "{s:I,s?I,s?s}", "trial_id", &tid, "attempt", &katt, "reason", &reason)) continue;
        lg_slot *sl = slot_find(a, tid);
        if (!sl || sl->state == SLOT_EXITING) continue;
        if (atomic_fetch_add(&kills_total, 1) < 5)
            fprintf(stderr, "loadgen: agent %s-agent-%05d told to kill trial %lld attempt %lld (ours: attempt %d, "
                    "state %d): %s\n", opt.name_prefix, a->idx, (long long)tid, (long long)katt, sl->attempt,
                    sl->state, reason);
        buf_item(&a->events, "{\"trial_id\":%" PRId64 ",\"attempt\":%d,\"type\":\"exited\","
                 "\"time\":%" PRId64 ",\"exit_code\":143,\"signal\":15}",
                 sl->trial_id, sl->attempt, now_wall);
        sl->state = SLOT_EXITING;
        sl->reports_left = 0;
        if (opt.eager) a->next_hb = 0;
    }
    json_decref(j);
}

/* One heartbeat of agent a. */
static void agent_heartbeat(lg_worker *w, lg_agent *a, int depth)
{
    char path[96], *resp = NULL, err[256];
    size_t rlen = 0;
    long st = 0;
    hf_buf body;
    int64_t now_wall = hf_wall_ms(), t0, t1;
    int first = 1, gen_reports = 0;
    long sent_reports = 0;

    hf_buf_init(&body, LG_BODY_MAX);
    /* 1. trials whose last reports were acknowledged exit now (not into a
     *    batch being re-sent: it must go out exactly as it was) */
    for (int s = 0; s < opt.slots && !a->retry; s++) {
        lg_slot *sl = &a->slot[s];
        if (sl->state == SLOT_RUNNING && sl->reports_left == 0 && sl->unacked == 0) {
            buf_item(&a->events, "{\"trial_id\":%" PRId64 ",\"attempt\":%d,\"type\":\"exited\","
                     "\"time\":%" PRId64 ",\"exit_code\":0,\"signal\":0}",
                     sl->trial_id, sl->attempt, now_wall);
            sl->state = SLOT_EXITING;
        }
    }
    /* 2. running trials report, unless an unacknowledged batch is pending */
    if (a->metrics.len == 0 && !a->retry) {
        for (int s = 0; s < opt.slots; s++) {
            lg_slot *sl = &a->slot[s];
            if (sl->state != SLOT_RUNNING || sl->reports_left == 0) continue;
            int k = sl->reports_left < opt.per_hb ? sl->reports_left : opt.per_hb;
            for (int r = 0; r < k; r++) {
                char vals[512];
                size_t vl = 0;
                sl->step++;
                for (int v = 0; v < opt.values && vl < sizeof vals - 64; v++)
                    vl += (size_t)snprintf(vals + vl, sizeof vals - vl, "%s\"m%d\":%.6f", v ? "," : "",
                                           v, 1.0 / (double)(sl->step + v + 1));
                buf_item(&a->metrics, "{\"trial_id\":%" PRId64 ",\"attempt\":%d,\"time\":%" PRId64
                         ",\"step\":%" PRId64 ",\"epoch\":%.3f,\"values\":{%s}}",
                         sl->trial_id, sl->attempt, now_wall, sl->step,
                         (double)sl->step / 10.0, vals);
                gen_reports++;
            }
            sl->reports_left -= k;
            sl->unacked = k;
        }
        a->pend_reports = gen_reports;
    }
    sent_reports = a->pend_reports;
    hf_buf_addstr(&body, "{\"running\":[");
    for (int s = 0; s < opt.slots; s++) {
        lg_slot *sl = &a->slot[s];
        if (sl->state != SLOT_ASSIGNED && sl->state != SLOT_RUNNING) continue;
        hf_buf_printf(&body, "%s{\"trial_id\":%" PRId64 ",\"attempt\":%d,\"pid\":%d}",
                      first ? "" : ",", sl->trial_id, sl->attempt, 100000 + a->idx * 64 + s);
        first = 0;
    }
    hf_buf_addstr(&body, "],\"events\":[");
    if (a->events.len) hf_buf_add(&body, a->events.data, a->events.len);
    hf_buf_addstr(&body, "],\"metrics\":[");
    if (a->metrics.len) hf_buf_add(&body, a->metrics.data, a->metrics.len);
    hf_buf_printf(&body, "],\"logs\":[],\"instance\":\"lg-%ld-%d\",\"batch\":%" PRId64,
                  instance_salt, a->idx, a->batch);
    if (hf_buf_addstr(&body, "}")) {
        snprintf(w->last_err, sizeof w->last_err, "heartbeat body over %u bytes", LG_BODY_MAX);
        goto end;
    }
    snprintf(path, sizeof path, "/api/v1/agents/%" PRId64 "/heartbeat", a->id);
    t0 = hf_mono_us();
    int rc = hf_http_request_raw(w->http, "POST", path, body.data, &st, &resp, &rlen, err, sizeof err);
    t1 = hf_mono_us();
    atomic_fetch_add(&hb_total, 1);
    {   /* --hb-ms applies to agents with work; idle ones poll at the scheduler's pace */
        int busy = 0;
        for (int s = 0; s < opt.slots; s++) busy |= a->slot[s].state != SLOT_FREE;
        a->next_hb = hf_mono_ms() + (opt.hb_ms >= 0 && busy ? opt.hb_ms : a->interval_ms);
    }
    a->retry = 1;   /* until a 200 says this batch is stored */
    if (rc) {
        w->status_counts[5]++;
        atomic_fetch_add(&hb_failed, 1);
        snprintf(w->last_err, sizeof w->last_err, "heartbeat: %s", err);
        goto end;
    }
    lat_add(&w->hb_lat, t1 - t0);
    if (st == 404) {    /* scheduler forgot us: register again with what runs */
        w->status_counts[2]++;
        atomic_fetch_add(&hb_failed, 1);
        agent_register(w, a);
        a->next_hb = 0;
        goto end;
    }
    if (st != 200) {
        w->status_counts[st == 507 ? 4 : st >= 500 ? 3 : 1]++;
        atomic_fetch_add(&hb_failed, 1);
        snprintf(w->last_err, sizeof w->last_err, "heartbeat: HTTP %ld: %.200s", st, resp ? resp : "");
        goto end;
    }
    w->status_counts[0]++;
    /* Acknowledged: everything in this heartbeat is durable, except what
     * the reply's "rejected" counts (subtracted in agent_on_reply). */
    int64_t ack_wall = hf_wall_ms();
    a->retry = 0;
    a->batch++;
    hf_buf_reset(&a->events);
    hf_buf_reset(&a->metrics);
    a->pend_reports = 0;
    atomic_fetch_add(&acked_reports, sent_reports);
    atomic_fetch_add(&acked_points, sent_reports * opt.values);
    for (int s = 0; s < opt.slots; s++) {
        lg_slot *sl = &a->slot[s];
        switch (sl->state) {
        case SLOT_ASSIGNED:
            sl->state = SLOT_RUNNING;
            if (sl->disp >= 0) w->disp[sl->disp].started_ack = ack_wall;
            break;
        case SLOT_RUNNING:
            sl->unacked = 0;
            if (sl->reports_left == 0 && opt.eager) a->next_hb = 0;
            break;
        case SLOT_EXITING:
            sl->state = SLOT_FREE;
            sl->free_since = now_wall;   /* the scheduler knew when it got this heartbeat */
            atomic_fetch_add(&trials_done, 1);
            atomic_store(&t_last_exit, (long long)hf_mono_ms());
            break;
        default:
            break;
        }
    }
    long before = atomic_load(&assigns_total);
    agent_on_reply(w, a, resp, rlen, ack_wall);
    /* A real agent starts the process and reports it at once; do that here,
     * before this thread serves its other agents, so the dispatch figure is
     * the scheduler's and not this generator's queueing. */
    if (opt.eager && depth == 0 && atomic_load(&assigns_total) != before && a->events.len) {
        free(resp);
        resp = NULL;
        hf_buf_free(&body);
        agent_heartbeat(w, a, 1);
        return;
    }
end:
    free(resp);
    hf_buf_free(&body);
}

/* Assignments the doorbell pushed (waiter_main) are handled as a
 * heartbeat reply's, timed from their arrival; the heartbeat that follows
 * reports them started. */
static void agent_take_pushed(lg_worker *w, lg_agent *a)
{
    hf_buf got;
    int64_t when;
    hf_buf_init(&got, LG_BODY_MAX);
    pthread_mutex_lock(&w->mu);
    if (a->pushed.len) hf_buf_add(&got, a->pushed.data, a->pushed.len);
    hf_buf_reset(&a->pushed);
    when = a->pushed_wall;
    pthread_mutex_unlock(&w->mu);
    for (size_t off = 0; off < got.len;) {
        const char *p = got.data + off, *nl = memchr(p, '\n', got.len - off);
        size_t n = nl ? (size_t)(nl - p) : got.len - off;
        agent_on_reply(w, a, p, n, when);
        off += n + 1;
    }
    hf_buf_free(&got);
}

static void *worker_main(void *arg)
{
    lg_worker *w = arg;
    /* Register this worker's agents, spread over the first second. */
    for (int i = w->index; i < opt.agents && !atomic_load(&stop_flag); i += opt.threads) {
        lg_agent *a = &agents[i];
        while (agent_register(w, a) != 0 && !atomic_load(&stop_flag)) hf_sleep_ms(200);
        int64_t now_wall = hf_wall_ms();
        for (int s = 0; s < opt.slots; s++) a->slot[s].free_since = now_wall;
        a->next_hb = hf_mono_ms() + (a->idx * 997) % (a->interval_ms > 0 ? a->interval_ms : 1000);
    }
    while (!atomic_load(&stop_flag)) {
        /* next_hb is only ever changed by this thread, so sleeping until
         * the earliest one is exact (capped to notice stop_flag); the
         * doorbell thread sets an agent's rung flag and wakes us. */
        int64_t now = hf_mono_ms(), next = now + 200;
        for (int i = w->index; i < opt.agents && !atomic_load(&stop_flag); i += opt.threads) {
            lg_agent *a = &agents[i];
            if (a->id <= 0) continue;
            if (atomic_exchange(&a->rung, 0)) {
                agent_take_pushed(w, a);
                a->next_hb = 0;
            }
            if (a->next_hb <= now) {
                agent_heartbeat(w, a, 0);
                now = hf_mono_ms();
            }
            if (a->next_hb < next) next = a->next_hb;
        }
        now = hf_mono_ms();
        pthread_mutex_lock(&w->mu);
        if (!w->woken && next > now) {
            struct timespec ts = hf_deadline(CLOCK_REALTIME, next - now);
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
        w->woken = 0;
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

/* ---- the doorbell: one parked GET /agents/{id}/wait per agent ----
 *
 * As hyperfarm-agent does, every simulated agent keeps one long-poll open;
 * when it answers {"pending": true} the agent heartbeats at once (its
 * worker is woken). All of them live on one libcurl multi handle in one
 * thread, so a thousand open waits cost a thousand sockets, not threads. */

typedef struct lg_wait {
    CURL    *h;
    int      agent;
    char     url[320];
    hf_buf   resp;
    int64_t  retry_at;      /* mono ms; 0 = in flight */
    int      started;
} lg_wait;

static size_t wait_write(char *p, size_t sz, size_t n, void *ud)
{
    lg_wait *wt = ud;
    if (hf_buf_add(&wt->resp, p, sz * n)) return 0;
    return sz * n;
}

/* The doorbell answered pending; body (len bytes) is kept for the worker
 * when it pushed assignments. */
static void agent_ring(int idx, const char *body, size_t len)
{
    lg_agent *a = &agents[idx];
    lg_worker *w = &workers[a->worker];
    int push = body && memmem(body, len, "\"trial_id\"", 10) != NULL;
    atomic_fetch_add(&rings_total, 1);
    pthread_mutex_lock(&w->mu);
    if (push) {
        if (a->pushed.len == 0) a->pushed_wall = hf_wall_ms();
        if (hf_buf_add(&a->pushed, body, len) == 0 && hf_buf_add(&a->pushed, "\n", 1) == 0)
            atomic_fetch_add(&pushes_total, 1);
    }
    atomic_store(&a->rung, 1);
    w->woken = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *waiter_main(void *arg)
{
    (void)arg;
    CURLM *m = curl_multi_init();
    lg_wait *wt = calloc((size_t)opt.agents, sizeof *wt);
    struct curl_slist *hdr = NULL;
    char auth[300];
    if (!m || !wt) goto end;
    if (opt.agent_token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", opt.agent_token);
        hdr = curl_slist_append(NULL, auth);
    }
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)opt.agents + 16);
    for (int i = 0; i < opt.agents; i++) {
        wt[i].agent = i;
        wt[i].retry_at = 1;   /* start when registered */
        hf_buf_init(&wt[i].resp, 4096);
    }
    while (!atomic_load(&stop_flag)) {
        int64_t now = hf_mono_ms();
        for (int i = 0; i < opt.agents; i++) {
            if (!wt[i].retry_at || wt[i].retry_at > now || agents[i].id <= 0) continue;
            if (!wt[i].h) {
                wt[i].h = curl_easy_init();
                if (!wt[i].h) continue;
                snprintf(wt[i].url, sizeof wt[i].url, "%s/api/v1/agents/%" PRId64 "/wait?timeout_ms=25000%s",
                         base_url, agents[i].id, opt.push ? "&assign=1" : "");
                curl_easy_setopt(wt[i].h, CURLOPT_URL, wt[i].url);
                curl_easy_setopt(wt[i].h, CURLOPT_WRITEFUNCTION, wait_write);
                curl_easy_setopt(wt[i].h, CURLOPT_WRITEDATA, &wt[i]);
                curl_easy_setopt(wt[i].h, CURLOPT_PRIVATE, &wt[i]);
                curl_easy_setopt(wt[i].h, CURLOPT_TIMEOUT_MS, 35000L);
                curl_easy_setopt(wt[i].h, CURLOPT_NOSIGNAL, 1L);
                if (hdr) curl_easy_setopt(wt[i].h, CURLOPT_HTTPHEADER, hdr);
            }
            hf_buf_reset(&wt[i].resp);
            wt[i].retry_at = 0;
            curl_multi_add_handle(m, wt[i].h);
            if (!wt[i].started) { wt[i].started = 1; atomic_fetch_add(&waits_parked, 1); }
        }
        int running = 0, left = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            lg_wait *x = NULL;
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            CURLcode res = msg->data.result;
            curl_multi_remove_handle(m, msg->easy_handle);
            if (!x) continue;
            atomic_fetch_add(&waits_total, 1);
            if (res == CURLE_OK && code == 200) {
                int pend = x->resp.len && memmem(x->resp.data, x->resp.len, "true", 4);
                if (pend) agent_ring(x->agent, x->resp.data, x->resp.len);
                /* after a ring, park again once the heartbeat had its moment */
                x->retry_at = hf_mono_ms() + (pend ? 20 : 0);
            } else {
                x->retry_at = hf_mono_ms() + 500;   /* back off, as the agent does */
            }
        }
        curl_multi_poll(m, NULL, 0, 50, NULL);
    }
end:
    for (int i = 0; wt && i < opt.agents; i++) {
        if (wt[i].h) {
            curl_multi_remove_handle(m, wt[i].h);
            curl_easy_cleanup(wt[i].h);
        }
        hf_buf_free(&wt[i].resp);
    }
    free(wt);
    curl_slist_free_all(hdr);
    if (m) curl_multi_cleanup(m);
    return NULL;
}

/* ---- the user probe: GETs the dashboard makes, timed ---- */

enum { PR_EXPS, PR_EXP, PR_TRIALS, PR_TRIAL, PR_METRICS, PR_HEALTH, PR_N };
static const char *const probe_names[PR_N] = {
    "GET /experiments", "GET /experiments/{id}", "GET /experiments/{id}/trials",
    "GET /trials/{id}", "GET /trials/{id}/metrics", "GET /healthz"};
static lg_lat probe_lat[PR_N], probe_all;
static long probe_errors;
static int64_t *exp_ids;
static int nexp;

static void *probe_main(void *arg)
{
    (void)arg;
    hf_http *h = hf_http_new(base_url, opt.user_token, 10000, 0);
    unsigned k = 0;
    if (!h) return NULL;
    while (!atomic_load(&stop_flag)) {
        char path[160], *resp = NULL, err[256];
        size_t rlen;
        long st = 0;
        int r = (int)(k % PR_N);
        int64_t e = nexp ? exp_ids[(k / PR_N) % (unsigned)nexp] : 1;
        /* a trial id that exists once trials are flowing: one recently assigned */
        long na = atomic_load(&assigns_total);
        int64_t t = na > 0 ? 1 + (int64_t)((k * 7919u) % (unsigned long)na) : 1;
        k++;
        switch (r) {
        case PR_EXPS: snprintf(path, sizeof path, "/api/v1/experiments"); break;
        case PR_EXP: snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64, e); break;
        case PR_TRIALS: snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/trials", e); break;
        case PR_TRIAL: snprintf(path, sizeof path, "/api/v1/trials/%" PRId64, t); break;
        case PR_METRICS:
            snprintf(path, sizeof path, "/api/v1/trials/%" PRId64 "/metrics?limit=100", t);
            break;
        default: snprintf(path, sizeof path, "/healthz"); break;
        }
        int64_t t0 = hf_mono_us();
        int rc = hf_http_request_raw(h, "GET", path, NULL, &st, &resp, &rlen, err, sizeof err);
        int64_t dt = hf_mono_us() - t0;
        free(resp);
        if (rc || (st != 200 && st != 404)) probe_errors++;
        else {
            lat_add(&probe_lat[r], dt);
            lat_add(&probe_all, dt);
        }
        int64_t period = opt.probe_hz > 0 ? 1000 / opt.probe_hz : 1000;
        if (period > dt / 1000) hf_sleep_ms(period - dt / 1000);
    }
    hf_http_free(h);
    return NULL;
}

/* ---- the scheduler process ---- */

static pid_t sched_pid = -1;
static char tmpdir[256], db_path[512];

static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int find_scheduler(char *out, size_t size)
{
    char self[PATH_MAX - 64];
    const char *hfbin = getenv("HF_BIN");
    if (opt.scheduler) { snprintf(out, size, "%s", opt.scheduler); return access(out, X_OK); }
    if (hfbin) {
        snprintf(out, size, "%s/hyperfarm-scheduler", hfbin);
        if (access(out, X_OK) == 0) return 0;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) *slash = 0;
        snprintf(out, size, "%s/../hyperfarm-scheduler", self);
        if (access(out, X_OK) == 0) return 0;
    }
    return -1;
}

/* Print the tail of the spawned scheduler's log (its temp dir goes away). */
static void sched_log_tail(const char *logp)
{
    char buf[2048];
    FILE *f = fopen(logp, "r");
    if (!f) return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long sz = ftell(f);
        fseek(f, sz > (long)sizeof buf - 1 ? sz - (long)sizeof buf + 1 : 0, SEEK_SET);
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    fprintf(stderr, "---- end of the scheduler's log ----\n%s\n----\n", buf);
}

static int sched_spawn(void)
{
    char bin[PATH_MAX], listen_arg[64], logp[600];
    int port = free_port();
    if (find_scheduler(bin, sizeof bin)) {
        fprintf(stderr, "loadgen: hyperfarm-scheduler not found (give --scheduler PATH or --url)\n");
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hf-loadgen-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("loadgen: mkdtemp"); return -1; }
    if (opt.db) snprintf(db_path, sizeof db_path, "%s", opt.db);
    else snprintf(db_path, sizeof db_path, "%s/hf.db", tmpdir);
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", port);
    snprintf(base_url, sizeof base_url, "http://127.0.0.1:%d", port);
    snprintf(logp, sizeof logp, "%s/scheduler.log", tmpdir);
    sched_pid = fork();
    if (sched_pid < 0) return -1;
    if (sched_pid == 0) {
        FILE *f = freopen(logp, "w", stderr);
        (void)f;
        dup2(2, 1);
        const char *av[10 + 16];
        int ac = 0;
        av[ac++] = bin;
        av[ac++] = "--listen";
        av[ac++] = listen_arg;
        av[ac++] = "--db";
        av[ac++] = db_path;
        /* Every simulated agent connects from 127.0.0.1; real agents come
         * from their own addresses, so the per-address cap does not apply. */
        av[ac++] = "--max-conns-per-ip";
        av[ac++] = "0";
        for (int k = 0; k < opt.nsched_args; k++) av[ac++] = opt.sched_args[k];
        av[ac] = NULL;
        execv(bin, (char *const *)av);
        _exit(127);
    }
    hf_http *h = hf_http_new(base_url, NULL, 1000, 0);
    for (int i = 0; i < 200; i++) {
        char *resp = NULL, err[256];
        long st = 0;
        int status;
        if (waitpid(sched_pid, &status, WNOHANG) == sched_pid) {
            fprintf(stderr, "loadgen: the scheduler exited at start\n");
            sched_log_tail(logp);
            sched_pid = -1;
            hf_http_free(h);
            return -1;
        }
        int rc = hf_http_request_raw(h, "GET", "/healthz", NULL, &st, &resp, NULL, err, sizeof err);
        free(resp);
        if (rc == 0 && st == 200) { hf_http_free(h); return 0; }
        hf_sleep_ms(50);
    }
    hf_http_free(h);
    fprintf(stderr, "loadgen: the scheduler did not answer /healthz in 10 s\n");
    sched_log_tail(logp);
    return -1;
}

/* SIGTERM and wait up to 15 s. RET the wait status text in out. */
static void sched_stop(char *out, size_t size)
{
    int status = 0;
    if (sched_pid <= 0) { snprintf(out, size, "not ours"); return; }
    kill(sched_pid, SIGTERM);
    for (int i = 0; i < 150; i++) {
        if (waitpid(sched_pid, &status, WNOHANG) == sched_pid) {
            if (WIFEXITED(status)) snprintf(out, size, "exit %d", WEXITSTATUS(status));
            else snprintf(out, size, "killed by signal %d", WTERMSIG(status));
            sched_pid = -1;
            return;
        }
        hf_sleep_ms(100);
    }
    kill(sched_pid, SIGKILL);
    waitpid(sched_pid, &status, 0);
    snprintf(out, size, "did not exit within 15 s of SIGTERM (SIGKILLed)");
    sched_pid = -1;
}

static long rss_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    long v = -1;
    size_t fl = strlen(field);
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') { v = strtol(line + fl + 1, NULL, 10); break; }
    fclose(f);
    return v;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static long long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

/* ---- experiments ---- */

static int submit_experiments(void)
{
    hf_http *h = hf_http_new(base_url, opt.user_token, 30000, 0);
    int rc = -1, left = opt.trials;
    if (!h) return -1;
    exp_ids = calloc((size_t)nexp, sizeof *exp_ids);
    for (int e = 0; e < nexp; e++) {
        int n = left / (nexp - e);
        char body[1024], *resp = NULL, err[256];
        size_t rlen = 0;
        long st = 0;
        left -= n;
        snprintf(body, sizeof body,
                 "{\"name\":\"%s-exp-%d\",\"objective\":{\"metric\":\"m0\",\"goal\":\"minimize\"},"
                 "\"searcher\":{\"name\":\"random\",\"max_trials\":%d,\"max_concurrent_trials\":%d},"
                 "\"hyperparameters\":{\"lr\":{\"type\":\"log\",\"min\":0.0001,\"max\":0.3},"
                 "\"width\":{\"type\":\"int\",\"min\":16,\"max\":512}},"
                 "\"trial\":{\"command\":[\"true\"],\"resources\":{\"workers\":1,\"slots_per_worker\":1},"
                 "\"max_restarts\":0}}",
                 opt.name_prefix, e, n, n);
        if (hf_http_request_raw(h, "POST", "/api/v1/experiments", body, &st, &resp, &rlen, err, sizeof err)) {
            fprintf(stderr, "loadgen: submit: %s\n", err);
            goto end;
        }
        json_t *j = resp ? json_loadb(resp, rlen, 0, NULL) : NULL;
        json_int_t id = 0;
        if (st != 201 || !j || json_unpack(j, "{s:I}", "id", &id)) {
            fprintf(stderr, "loadgen: submit: HTTP %ld: %s\n", st, resp ? resp : "");
            json_decref(j);
            free(resp);
            goto end;
        }
        exp_ids[e] = id;
        json_decref(j);
        free(resp);
    }
    rc = 0;
end:
    hf_http_free(h);
    return rc;
}

/* After the run: created_at of every experiment, from the API (not timed). */
typedef struct { int64_t id, created; } lg_created;
static lg_created *created;
static size_t ncreated;

static int cmp_created(const void *a, const void *b)
{
    int64_t x = ((const lg_created *)a)->id, y = ((const lg_created *)b)->id;
    return x < y ? -1 : x > y;
}

static void fetch_created(void)
{
    hf_http *h = hf_http_new(base_url, opt.user_token, 60000, 2);
    char *resp = NULL, err[256];
    size_t rlen = 0, i;
    long st = 0;
    json_t *j = NULL, *arr, *e;
    if (!h) return;
    if (hf_http_request_raw(h, "GET", "/api/v1/experiments", NULL, &st, &resp, &rlen, err, sizeof err) ||
        st != 200)
        goto end;
    j = json_loadb(resp, rlen, 0, NULL);
    arr = json_object_get(j, "experiments");
    created = calloc(json_array_size(arr) + 1, sizeof *created);
    if (!created) goto end;
    json_array_foreach(arr, i, e) {
        json_int_t id = 0, c = 0;
        if (json_unpack(e, "{s:I,s:I}", "id", &id, "created_at", &c)) continue;
        created[ncreated++] = (lg_created){id, c};
    }
    if (ncreated) qsort(created, ncreated, sizeof *created, cmp_created);
end:
    json_decref(j);
    free(resp);
    hf_http_free(h);
}

static int64_t created_of(int64_t id)
{
    lg_created key = {id, 0}, *f;
    if (!ncreated) return -1;
    f = bsearch(&key, created, ncreated, sizeof *created, cmp_created);
    return f ? f->created : -1;
}

/* Rows in the metrics table, read-only after the scheduler stopped; -1 unknown. */
static long long db_count_metrics(char *why, size_t size)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long n = -1;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(why, size, "open: %s", sqlite3_errmsg(db));
        goto end;
    }
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM metrics", -1, &st, NULL) != SQLITE_OK) {
        snprintf(why, size, "%s", sqlite3_errmsg(db));
        goto end;
    }
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
end:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Sum of the experiments' trial counts as the scheduler sees them.
 * RET 1 when every experiment is in a final state, 0 when not, -1 on error. */
static long last_counts[3];
static int have_counts;

static int sched_counts(long *completed, long *failed, long *other)
{
    hf_http *h = hf_http_new(base_url, opt.user_token, 30000, 0);
    char *resp = NULL, err[256];
    size_t rlen = 0, i;
    long st = 0;
    int all_final = -1;
    json_t *j = NULL, *arr, *e;
    *completed = *failed = *other = 0;
    if (!h) return -1;
    if (hf_http_request_raw(h, "GET", "/api/v1/experiments", NULL, &st, &resp, &rlen, err, sizeof err) ||
        st != 200) {
        if (have_counts) { *completed = last_counts[0]; *failed = last_counts[1]; *other = last_counts[2]; }
        goto end;
    }
    j = json_loadb(resp, rlen, 0, NULL);
    arr = json_object_get(j, "experiments");
    all_final = json_array_size(arr) > 0;
    json_array_foreach(arr, i, e) {
        const char *state = json_string_value(json_object_get(e, "state"));
        json_t *c = json_object_get(e, "counts"), *v;
        const char *k;
        if (!state || (strcmp(state, "COMPLETED") && strcmp(state, "CANCELED"))) all_final = 0;
        json_object_foreach(c, k, v) {
            long n = (long)json_integer_value(v);
            if (!strcmp(k, "completed")) *completed += n;
            else if (!strcmp(k, "failed")) *failed += n;
            else *other += n;
        }
    }
    last_counts[0] = *completed; last_counts[1] = *failed; last_counts[2] = *other;
    have_counts = 1;
end:
    json_decref(j);
    free(resp);
    hf_http_free(h);
    return all_final;
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: loadgen [options]\n"
        "  --agents N         simulated agents (default 200; full scale 1000)\n"
        "  --slots N          slots per agent (default 8)\n"
        "  --trials N         trials in total (default 8000; full scale 100000)\n"
        "  --experiments N    experiments to spread them over (default trials/1000, at least 1)\n"
        "  --reports N        metric reports per trial (default 40)\n"
        "  --per-hb N         reports per trial per heartbeat (default 2)\n"
        "  --values N         metric values per report (default 2)\n"
        "  --hb-ms N          heartbeat period: -1 the scheduler's (default), 0 back to back\n"
        "  --no-eager         do not heartbeat at once after accepting/finishing a trial\n"
        "  --no-wait          no doorbell long-poll (GET /agents/{id}/wait); by default each\n"
        "                     agent keeps one open, on one libcurl multi thread, and\n"
        "                     heartbeats at once when it answers pending\n"
        "  --no-push          the long-poll does not ask for the assignments (assign=1):\n"
        "                     the agent heartbeats to fetch them\n"
        "  --threads N        heartbeat worker threads, each serving every Nth agent\n"
        "                     (default 16, at most the agent count and 1024; see\n"
        "                     docs/operations.md for what more threads change)\n"
        "  --probe-hz N       user GETs per second during the load (default 20; 0 off)\n"
        "  --max-seconds N    stop after N seconds even if trials remain (default 600)\n"
        "  --url URL          use a running scheduler (default: spawn one)\n"
        "  --pid PID          its pid, for RSS (with --url)\n"
        "  --db PATH          its database, for size and row count\n"
        "  --scheduler PATH   the scheduler binary to spawn\n"
        "  --agent-token T, --user-token T   bearer tokens when the scheduler has a token file\n"
        "  --name-prefix S    agent/experiment name prefix (default lg)\n"
        "  --keep             keep the spawned scheduler's temporary directory\n"
        "  --sched-arg ARG    pass ARG to the spawned scheduler (repeat, at most 16;\n"
        "                     e.g. --sched-arg --heartbeat-rate --sched-arg 2000)\n"
        "  --full             1000 agents x 8 slots, 100000 trials\n");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"agents", 1, 0, 'a'}, {"slots", 1, 0, 's'}, {"trials", 1, 0, 't'},
        {"experiments", 1, 0, 'e'}, {"reports", 1, 0, 'r'}, {"per-hb", 1, 0, 'p'},
        {"values", 1, 0, 'v'}, {"hb-ms", 1, 0, 'H'}, {"no-eager", 0, 0, 'N'}, {"no-wait", 0, 0, 'W'},
        {"no-push", 0, 0, 'Q'},
        {"threads", 1, 0, 'j'}, {"probe-hz", 1, 0, 'P'}, {"max-seconds", 1, 0, 'm'},
        {"url", 1, 0, 'u'}, {"pid", 1, 0, 'i'}, {"db", 1, 0, 'd'}, {"scheduler", 1, 0, 'S'},
        {"agent-token", 1, 0, 'A'}, {"user-token", 1, 0, 'U'}, {"name-prefix", 1, 0, 'n'},
        {"keep", 0, 0, 'k'}, {"sched-arg", 1, 0, 'X'}, {"full", 0, 0, 'F'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c, rc = 1;
    pthread_t probe, waiter;
    int probe_started = 0, waiter_started = 0, nworkers = 0;
    char stop_txt[128] = "not ours", why[256] = "";
    long rss_peak = 0, best5 = 0, hwm = -1;
    double elapsed = 0;

    signal(SIGPIPE, SIG_IGN);
    hf_log_init("loadgen");
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'a': opt.agents = atoi(optarg); break;
        case 's': opt.slots = atoi(optarg); break;
        case 't': opt.trials = atoi(optarg); break;
        case 'e': opt.experiments = atoi(optarg); break;
        case 'r': opt.reports = atoi(optarg); break;
        case 'p': opt.per_hb = atoi(optarg); break;
        case 'v': opt.values = atoi(optarg); break;
        case 'H': opt.hb_ms = atoi(optarg); break;
        case 'N': opt.eager = 0; break;
        case 'W': opt.wait = 0; break;
        case 'Q': opt.push = 0; break;
        case 'j': opt.threads = atoi(optarg); break;
        case 'P': opt.probe_hz = atoi(optarg); break;
        case 'm': opt.max_seconds = atoi(optarg); break;
        case 'u': opt.url = optarg; break;
        case 'i': opt.pid = (pid_t)atoi(optarg); break;
        case 'd': opt.db = optarg; break;
        case 'S': opt.scheduler = optarg; break;
        case 'A': opt.agent_token = optarg; break;
        case 'U': opt.user_token = optarg; break;
        case 'n': opt.name_prefix = optarg; break;
        case 'k': opt.keep = 1; break;
        case 'X':
            if (opt.nsched_args >= 16) { fprintf(stderr, "loadgen: at most 16 --sched-arg\n"); return 2; }
            opt.sched_args[opt.nsched_args++] = optarg;
            break;
        case 'F': opt.agents = 1000; opt.slots = 8; opt.trials = 100000; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (opt.agents < 1 || opt.slots < 1 || opt.slots > LG_MAX_SLOTS || opt.trials < 1 ||
        opt.reports < 1 || opt.per_hb < 1 || opt.values < 1 || opt.values > 32 ||
        opt.threads < 0 || opt.threads > 1024 || opt.max_seconds < 1) {
        fprintf(stderr, "loadgen: option out of range (slots 1..%d, values 1..32)\n", LG_MAX_SLOTS);
        return 2;
    }
    /* 16 by default. A thread's agents queue behind each other, which
     * inflates the submission burst (1,000 agents rung at once); one
     * thread per agent removes that queue but, on a small machine shared
     * with the scheduler, 1,000 generator threads take the scheduler's CPU
     * and the queue moves into it (docs/operations.md has both). */
    if (opt.threads == 0) opt.threads = 16;
    if (opt.threads > opt.agents) opt.threads = opt.agents;
    nexp = opt.experiments > 0 ? opt.experiments : (opt.trials + 999) / 1000;
    if (nexp > opt.trials) nexp = opt.trials;

    if (opt.url) {
        snprintf(base_url, sizeof base_url, "%s", opt.url);
        if (opt.db) snprintf(db_path, sizeof db_path, "%s", opt.db);
    } else if (sched_spawn()) {
        goto end;
    }
    pid_t rss_pid = opt.url ? opt.pid : sched_pid;
    printf("loadgen: %d agents x %d slots, %d trials in %d experiments, %d reports/trial "
           "(%d per heartbeat, %d values each), %d threads, scheduler %s%s\n",
           opt.agents, opt.slots, opt.trials, nexp, opt.reports, opt.per_hb, opt.values,
           opt.threads, base_url, opt.url ? "" : " (spawned)");
    fflush(stdout);

    agents = calloc((size_t)opt.agents, sizeof *agents);
    workers = calloc((size_t)opt.threads, sizeof *workers);
    if (!agents || !workers) goto end;
    for (int i = 0; i < opt.agents; i++) {
        agents[i].idx = i;
        agents[i].interval_ms = 1000;
        agents[i].batch = 1;
        agents[i].worker = i % opt.threads;
        hf_buf_init(&agents[i].events, LG_BODY_MAX / 4);
        hf_buf_init(&agents[i].metrics, LG_BODY_MAX / 2);
        hf_buf_init(&agents[i].pushed, LG_BODY_MAX);
        for (int s = 0; s < LG_MAX_SLOTS; s++) agents[i].slot[s].disp = -1;
    }
    t_start_wall = hf_wall_ms();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 << 10);   /* up to 1024 threads */
    instance_salt = (long)getpid() ^ (long)(hf_wall_ms() & 0xffffff);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (int i = 0; i < opt.threads; i++) {
        pthread_mutex_init(&workers[i].mu, NULL);
        pthread_cond_init(&workers[i].cv, NULL);
    }
    for (int i = 0; i < opt.threads; i++) {
        workers[i].index = i;
        workers[i].http = hf_http_new(base_url, opt.agent_token, 30000, 0);
        if (!workers[i].http || pthread_create(&workers[i].th, &attr, worker_main, &workers[i])) break;
        nworkers++;
    }
    pthread_attr_destroy(&attr);
    /* Wait for every agent to be registered, then submit the experiments. */
    int64_t t_reg = hf_mono_ms();
    for (;;) {
        int reg = 0;
        for (int i = 0; i < opt.agents; i++) reg += agents[i].id > 0;
        if (reg == opt.agents) break;
        if (hf_mono_ms() - t_reg > 60000) {
            fprintf(stderr, "loadgen: only %d of %d agents registered in 60 s (%s)\n", reg, opt.agents,
                    workers[0].last_err);
            goto stop;
        }
        hf_sleep_ms(50);
    }
    printf("loadgen: %d agents registered in %.1f s\n", opt.agents, (double)(hf_mono_ms() - t_reg) / 1000.0);
    /* Park every agent's wait before the work arrives, as running agents have. */
    if (opt.wait && pthread_create(&waiter, NULL, waiter_main, NULL) == 0) {
        waiter_started = 1;
        int64_t tw = hf_mono_ms();
        while (atomic_load(&waits_parked) < opt.agents && hf_mono_ms() - tw < 10000) hf_sleep_ms(20);
        hf_sleep_ms(200);
    }
    t_first_submit = hf_wall_ms();
    int64_t t0 = hf_mono_ms();
    if (submit_experiments()) goto stop;
    if (opt.probe_hz > 0 && pthread_create(&probe, NULL, probe_main, NULL) == 0) probe_started = 1;

    /* Progress: every second sample RSS; every 5 s print. */
    long prev5 = 0;
    int64_t last_progress = t0, last_change = t0;
    long last_done = -1, last_acked = -1;
    int64_t next_tick = t0 + 1000;
    for (;;) {
        /* the end is noticed within 20 ms; the rest runs once a second */
        while (atomic_load(&trials_done) < opt.trials && hf_mono_ms() < next_tick) hf_sleep_ms(20);
        next_tick += 1000;
        int64_t now = hf_mono_ms();
        long done = atomic_load(&trials_done), acked = atomic_load(&acked_reports);
        long r = rss_pid > 0 ? rss_kb(rss_pid, "VmRSS") : -1;
        if (r > rss_peak) rss_peak = r;
        if (done != last_done || acked != last_acked) { last_change = now; last_done = done; last_acked = acked; }
        if (now - last_progress >= 5000) {
            long win = acked - prev5;
            double rate = (double)win * 1000.0 / (double)(now - last_progress);
            if ((long)rate > best5) best5 = (long)rate;
            printf("loadgen: %5.0f s  trials done %ld/%d  reports %ld (%.0f/s)  heartbeats %ld (%ld failed)"
                   "  rss %ld kB\n", (double)(now - t0) / 1000.0, done, opt.trials, acked, rate,
                   atomic_load(&hb_total), atomic_load(&hb_failed), r);
            fflush(stdout);
            prev5 = acked;
            last_progress = now;
        }
        if (done >= opt.trials) break;
        if (now - last_progress < 1000) {   /* just printed: also ask the scheduler */
            long nc, nf, no;
            if (sched_counts(&nc, &nf, &no) == 1) {
                printf("loadgen: the scheduler reports every experiment finished (%ld completed, %ld failed)\n",
                       nc, nf);
                break;
            }
        }
        if (now - t0 > (int64_t)opt.max_seconds * 1000) {
            printf("loadgen: stopping at --max-seconds %d with %ld of %d trials done\n", opt.max_seconds, done,
                   opt.trials);
            break;
        }
        if (now - last_change > 30000) {
            printf("loadgen: STALLED: nothing acknowledged for 30 s (%ld of %d trials done; last error: %s)\n",
                   done, opt.trials, workers[0].last_err[0] ? workers[0].last_err : "none");
            break;
        }
    }
    /* to the last trial's exit when all finished (the polling above does
     * not round the run up to whole seconds), else to now */
    elapsed = (double)((atomic_load(&trials_done) >= opt.trials && atomic_load(&t_last_exit) > t0
                            ? (int64_t)atomic_load(&t_last_exit)
                            : hf_mono_ms()) -
                       t0) / 1000.0;
    hwm = rss_pid > 0 ? rss_kb(rss_pid, "VmHWM") : -1;
stop:
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < nworkers; i++) pthread_join(workers[i].th, NULL);
    if (probe_started) pthread_join(probe, NULL);
    if (waiter_started) pthread_join(waiter, NULL);
    if (t_first_submit == 0) goto end;
    {
        lg_lat hb = {0}, disp = {0}, disp_wait = {0}, disp_refill = {0}, disp_idle = {0};
        long st[6] = {0};
        long n_disp = 0, n_nocreated = 0;
        long done = atomic_load(&trials_done), reports = atomic_load(&acked_reports),
             points = atomic_load(&acked_points);
        fetch_created();
        for (int i = 0; i < nworkers; i++) {
            lg_worker *w = &workers[i];
            lat_merge(&hb, &w->hb_lat);
            for (int k = 0; k < 6; k++) st[k] += w->status_counts[k];
            for (size_t d = 0; d < w->ndisp; d++) {
                lg_disp *dr = &w->disp[d];
                if (!dr->started_ack) continue;
                int64_t ready = dr->free_since, cr = created_of(dr->exp_id);
                int idle = 0;
                if (cr < 0) n_nocreated++;
                else if (cr > ready) { ready = cr; idle = 1; }
                lat_add(&disp, (dr->started_ack - ready) * 1000);
                /* refill: the trial waited for this slot; idle: the slot waited for the trial */
                lat_add(idle ? &disp_idle : &disp_refill, (dr->started_ack - ready) * 1000);
                lat_add(&disp_wait, (dr->recv - ready) * 1000);
                n_disp++;
            }
        }
        lat_sort(&hb);
        lat_sort(&disp);
        lat_sort(&disp_wait);
        lat_sort(&disp_refill);
        lat_sort(&disp_idle);
        lat_sort(&probe_all);
        for (int k = 0; k < PR_N; k++) lat_sort(&probe_lat[k]);
        double rps = elapsed > 0 ? (double)reports / elapsed : 0;
        if (best5 < (long)rps) best5 = (long)rps;   /* runs shorter than one window */

        if (!opt.url) sched_stop(stop_txt, sizeof stop_txt);
        long long dbsz = file_size(db_path), walsz = 0, rows = -1;
        if (db_path[0]) {
            char p2[600];
            snprintf(p2, sizeof p2, "%s-wal", db_path);
            walsz = file_size(p2);
            if (!opt.url) rows = db_count_metrics(why, sizeof why);
        }
        double per_m = points > 0 ? (double)(dbsz + walsz) / (double)points * 1e6 / 1048576.0 : 0;

        long sc_c = 0, sc_f = 0, sc_o = 0;
        /* the scheduler may apply the last exits a moment after acknowledging them */
        for (int i = 0; i < 20 && sched_counts(&sc_c, &sc_f, &sc_o) != 1; i++) hf_sleep_ms(250);
        printf("\n== loadgen results ==\n");
        printf("scheduler's trial counts completed %ld, failed %ld, other %ld%s\n", sc_c, sc_f, sc_o,
               sc_f ? "  ** trials FAILED: see over-assignments, kills and the scheduler's log **" : "");
        printf("trials completed        %ld of %d in %.1f s (%ld assignments, %ld over-assigned, %ld kills)\n",
               done, opt.trials, elapsed, atomic_load(&assigns_total), atomic_load(&overassigns),
               atomic_load(&kills_total));
        printf("metric reports acked    %ld (%ld points)  sustained %.0f reports/s, best 5 s %ld/s\n",
               reports, points, rps, best5);
        printf("rejected by scheduler   %ld reports, %ld points (answered in \"rejected\", not stored)\n",
               atomic_load(&rejected_reports), atomic_load(&rejected_points));
        printf("doorbell                %s: %ld waits answered, %ld rang, %ld pushed assignments%s\n",
               opt.wait ? "on" : "off", atomic_load(&waits_total), atomic_load(&rings_total),
               atomic_load(&pushes_total), opt.wait && opt.push ? "" : " (push off)");
        printf("heartbeats              %zu ok-or-answered, HTTP 2xx %ld, 404 %ld, 4xx %ld, 5xx %ld, 507 %ld, "
               "transport errors %ld\n", hb.n, st[0], st[2], st[1], st[3], st[4], st[5]);
        printf("heartbeat latency       p50 %.1f ms  p99 %.1f ms  max %.1f ms\n", lat_pct(&hb, 50),
               lat_pct(&hb, 99), lat_pct(&hb, 100));
        printf("user GET latency        p50 %.1f ms  p99 %.1f ms  (%zu requests, %ld errors)\n",
               lat_pct(&probe_all, 50), lat_pct(&probe_all, 99), probe_all.n, probe_errors);
        for (int k = 0; k < PR_N; k++)
            if (probe_lat[k].n)
                printf("  %-28s p50 %.1f ms  p99 %.1f ms  (%zu)\n", probe_names[k], lat_pct(&probe_lat[k], 50),
                       lat_pct(&probe_lat[k], 99), probe_lat[k].n);
        printf("dispatch latency        p50 %.1f ms  p99 %.1f ms  (%ld trials%s)\n", lat_pct(&disp, 50),
               lat_pct(&disp, 99), n_disp,
               n_nocreated ? "; experiment created_at unavailable for some, slot-free time used" : "");
        printf("  ready -> assignment in a reply  p50 %.1f ms  p99 %.1f ms\n", lat_pct(&disp_wait, 50),
               lat_pct(&disp_wait, 99));
        printf("  work waiting, slot frees        p50 %.1f ms  p99 %.1f ms  (%zu)\n", lat_pct(&disp_refill, 50),
               lat_pct(&disp_refill, 99), disp_refill.n);
        printf("  slot idle, experiment submitted p50 %.1f ms  p99 %.1f ms  (%zu)\n", lat_pct(&disp_idle, 50),
               lat_pct(&disp_idle, 99), disp_idle.n);
        printf("scheduler RSS           peak sampled %ld kB, VmHWM %ld kB\n", rss_peak, hwm);
        printf("database                %.1f MiB (+ wal %.1f MiB) = %.1f MiB per million points\n",
               (double)dbsz / 1048576.0, (double)walsz / 1048576.0, per_m);
        if (rows >= 0)
            printf("metrics rows in db      %lld (acknowledged points %ld)%s\n", rows, points,
                   rows < points ? "  ** ACKNOWLEDGED POINTS MISSING **" : "");
        else if (!opt.url)
            printf("metrics rows in db      unknown (%s)\n", why);
        printf("scheduler shutdown      %s\n", stop_txt);
        printf("LOADGEN {\"agents\":%d,\"slots\":%d,\"trials\":%d,\"trials_done\":%ld,\"seconds\":%.1f,"
               "\"reports\":%ld,\"points\":%ld,\"reports_per_s\":%.0f,\"best5_reports_per_s\":%ld,"
               "\"hb_p50_ms\":%.2f,\"hb_p99_ms\":%.2f,\"api_p50_ms\":%.2f,\"api_p99_ms\":%.2f,"
               "\"dispatch_p50_ms\":%.2f,\"dispatch_p99_ms\":%.2f,\"dispatch_refill_p50_ms\":%.2f,"
               "\"dispatch_refill_p99_ms\":%.2f,"
               "\"dispatch_cold_n\":%zu,\"dispatch_cold_p50_ms\":%.2f,\"dispatch_cold_p99_ms\":%.2f,"
               "\"rss_peak_kb\":%ld,\"rss_hwm_kb\":%ld,"
               "\"db_bytes\":%lld,\"mib_per_million_points\":%.2f,\"db_metric_rows\":%lld,"
               "\"hb_failed\":%ld,\"sched_completed\":%ld,\"sched_failed\":%ld,\"pushes\":%ld}\n",
               opt.agents, opt.slots, opt.trials, done, elapsed, reports, points, rps, best5,
               lat_pct(&hb, 50), lat_pct(&hb, 99), lat_pct(&probe_all, 50), lat_pct(&probe_all, 99),
               lat_pct(&disp, 50), lat_pct(&disp, 99), lat_pct(&disp_refill, 50), lat_pct(&disp_refill, 99),
               disp_idle.n,
               lat_pct(&disp_idle, 50), lat_pct(&disp_idle, 99), rss_peak, hwm, dbsz + walsz, per_m, rows,
               atomic_load(&hb_failed), sc_c, sc_f, atomic_load(&pushes_total));
        rc = done >= opt.trials && sc_f == 0 ? 0 : 3;
        if (rows >= 0 && rows < points) rc = 4;
        free(hb.v);
        free(disp.v);
        free(disp_wait.v);
        free(disp_refill.v);
        free(disp_idle.v);
    }
end:
    if (sched_pid > 0) sched_stop(stop_txt, sizeof stop_txt);
    if (tmpdir[0] && !opt.keep) {
        if (nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
            fprintf(stderr, "loadgen: could not remove %s\n", tmpdir);
    } else if (tmpdir[0]) {
        printf("loadgen: kept %s\n", tmpdir);
    }
    if (workers)
        for (int i = 0; i < opt.threads; i++) {
            hf_http_free(workers[i].http);
            free(workers[i].hb_lat.v);
            free(workers[i].disp);
        }
    if (agents)
        for (int i = 0; i < opt.agents; i++) {
            hf_buf_free(&agents[i].events);
            hf_buf_free(&agents[i].metrics);
            hf_buf_free(&agents[i].pushed);
        }
    free(agents);
    free(workers);
    free(exp_ids);
    free(created);
    free(probe_all.v);
    for (int k = 0; k < PR_N; k++) free(probe_lat[k].v);
    return rc;
}

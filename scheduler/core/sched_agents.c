/*
 * sched_agents.c — agents in the scheduler core (sched_int.h):
 * registration, the heartbeat, the doorbell query and the cron tick.
 *
 * A heartbeat is applied in steps, all in one transaction (grouped with
 * the heartbeats queued behind it, txn_end_grouped): mark the agent alive;
 * skip a batch already stored (duplicate-safe); store metrics and logs
 * before the events, since a trial's last reports arrive in the same
 * heartbeat as its exit; apply started/exited events; then build the reply
 * (new assignments, kills, kills of stale attempts) after a dispatch pass.
 * The body was validated as a whole before any of it is applied
 * (sched_proto.c). Items of attempts the agent no longer runs are not
 * stored and are counted in the reply's "rejected" (docs/protocol.md).
 *
 * Authority (docs/protocol.md, "Agent tokens"): with a token file each request
 * carries the holder name of its agent token. A named token ("agent:NAME
 * TOKEN") registers and speaks for only the agent named NAME; the shared
 * unnamed one ("agent:TOKEN", holder "agent") only for agents not bound to
 * a named token (agents.holder, schema 0011). Anything else is HF_EPERM
 * (403) before the core changes (an AGENT_REFUSED event, at most one a
 * second, records who tried). Items naming an attempt that was never
 * assigned to the reporting agent (allocations) are foreign: never
 * applied, listed in the reply's "refused", logged, and recorded as a
 * REPORT_REFUSED event with the token's holder as its user; the honest
 * items of the same heartbeat are applied as usual.
 *
 * The tick (every ~100 ms, cron.c) scales heartbeat intervals to the farm,
 * declares silent agents LOST, fails assignments never acknowledged, and
 * runs a dispatch pass at least once a second.
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/notify/events.h"
#include "scheduler/api/metrics.h"

#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

/* ---------- the token binding ---------- */

#define HB_REFUSED_LIST 1000   /* refused items listed in one reply (all are counted) */
#define HB_REFUSED_ROWS 8      /* distinct trials given a REPORT_REFUSED event per heartbeat */

static int holder_shared(const char *h) { return strcmp(h, SCHED_SHARED_AGENT_HOLDER) == 0; }

/* a's holder ("" = registered without a token file or before schema
 * 0011), read from its row the first time. RET NULL when the store could
 * not say (callers refuse: fail closed). */
static const char *agent_holder(sched *s, agent *a)
{
    sqlite3_stmt *st = NULL;
    if (a->holder_known) return a->holder;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT holder FROM agents WHERE id=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, a->id);
        int src = sqlite3_step(st);
        const unsigned char *h = src == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        snprintf(a->holder, sizeof a->holder, "%s", h ? (const char *)h : "");
        a->holder_known = src == SQLITE_ROW || src == SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return a->holder_known ? a->holder : NULL;
}

int agent_may_speak_locked(sched *s, agent *a, const char *holder, hf_jerr *e)
{
    if (!holder) return 0;
    if (!holder_shared(holder)) {
        if (strcmp(a->name, holder) == 0) return 0;
        hf_jerr_set(e, "", NULL, "agent %lld is '%.64s': the agent token of '%.64s' speaks only for the agent named '%.64s'",
                    (long long)a->id, a->name, holder, holder);
        return HF_EPERM;
    }
    const char *h = agent_holder(s, a);
    if (!h) {
        hf_jerr_set(e, "", NULL, "agent %lld: its token binding cannot be read from the store", (long long)a->id);
        return HF_EPERM;
    }
    if (!*h || holder_shared(h)) return 0;
    hf_jerr_set(e, "", NULL, "agent %lld ('%.64s') has its own agent token: the shared agent token may not speak for it",
                (long long)a->id, a->name);
    return HF_EPERM;
}

int alloc_was_assigned(sched *s, int64_t tid, int64_t att, int64_t aid)
{
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT 1 FROM allocations WHERE trial_id=? AND attempt=? AND agent_id=? "
                                             "LIMIT 1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, tid);
        sqlite3_bind_int64(st, 2, att);
        sqlite3_bind_int64(st, 3, aid);
        int src = sqlite3_step(st);
        found = src == SQLITE_ROW ? 1 : src == SQLITE_DONE ? 0 : -1;
    }
    if (found < 0) hf_error("allocations of trial %lld: %s", (long long)tid, sqlite3_errmsg(store_db(s->st)));
    sqlite3_finalize(st);
    return found;
}

/* A 403 of the binding: an AGENT_REFUSED events row ("who tried": the
 * token's holder as its user), at most one a second whatever the rate of
 * refused requests, so a flood of them cannot grow the store; the log
 * line is the caller's. Its own transaction (ends an open group first). */
static void note_speak_refused(sched *s, const char *what, const hf_jerr *e)
{
    static _Atomic int64_t last_mono;
    char d[320];
    int64_t now = hf_mono_ms(), prev = atomic_load(&last_mono);
    if (now - prev < 1000 || !atomic_compare_exchange_strong(&last_mono, &prev, now)) return;
    snprintf(d, sizeof d, "%s refused (403): %s", what, e->msg);
    txn_begin(s);
    row_event(s, 0, 0, "AGENT_REFUSED", d);
    txn_end(s);
}

int sched_agent_may_speak(sched *s, int64_t agent_id, const char *holder, hf_jerr *e)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    agent *a = agent_find(s, agent_id);
    if (!a) {
        hf_jerr_set(e, "", NULL, "unknown agent %lld: register again", (long long)agent_id);
        rc = HF_ENOTFOUND;
    } else if ((rc = agent_may_speak_locked(s, a, holder, e))) {
        hf_warn("refused (403): token of '%s' for agent %lld: %s", holder, (long long)agent_id, e->msg);
        actor_set(s, holder);
        note_speak_refused(s, "long-poll", e);
        actor_set(s, NULL);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* May the token of holder register the agent named name? RET 0 or HF_EPERM. */
static int register_may(sched *s, const char *name, const char *holder, hf_jerr *e)
{
    if (!holder) return 0;
    if (!holder_shared(holder)) {
        if (strcmp(name, holder) == 0) return 0;
        hf_jerr_set(e, "", "name", "this agent token belongs to '%.64s': it may register only the agent named '%.64s', "
                    "not '%.64s'", holder, holder, name);
        return HF_EPERM;
    }
    agent *a = agent_by_name(s, name);
    return a ? agent_may_speak_locked(s, a, holder, e) : 0;
}

/* Bind a to holder (row and record; NULL = no token file). */
static void register_bind(sched *s, agent *a, const char *holder)
{
    sqlite3_stmt *st = NULL;
    snprintf(a->holder, sizeof a->holder, "%s", holder ? holder : "");
    a->holder_known = 1;
    if (s->txn_rc) return;
    if (sqlite3_prepare_v2(store_db(s->st), "UPDATE agents SET holder=? WHERE id=?", -1, &st, NULL) != SQLITE_OK) {
        s->txn_rc = HF_EDB;
        return;
    }
    if (holder) sqlite3_bind_text(st, 1, holder, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, a->id);
    int rc = store_exec_stmt(st);
    if (rc) s->txn_rc = rc;
    sqlite3_finalize(st);
}

/* Does a still have a live rank of (tid, att)? Processes it lists that
 * fail this are stale: they get a kill and hold their slots until gone. */
static int agent_knows(sched *s, const agent *a, int64_t tid, int64_t att, trial **out)
{
    trial *t = trial_find(s, tid);
    *out = t;
    if (t && t->attempt == att && t->ranks)
        for (int r = 0; r < t->nranks; r++)
            if (t->ranks[r].agent_id == a->id && !t->ranks[r].exited) return 1;
    return 0;
}

/* Count the slots of the stale processes in running[] as used on a. */
static void agent_stale_update(sched *s, agent *a, const json_t *running)
{
    size_t i;
    json_t *it;
    int stale = 0;
    json_array_foreach(running, i, it) {
        trial *t;
        if (agent_knows(s, a, json_integer_value(json_object_get(it, "trial_id")),
                        json_integer_value(json_object_get(it, "attempt")), &t)) continue;
        stale += t ? (int)t->exp->spec.slots_per_worker : 1;
    }
    if (stale == a->stale_slots) return;
    a->pa.slots_used += stale - a->stale_slots;
    if (a->pa.slots_used < 0) a->pa.slots_used = 0;
    a->stale_slots = stale;
    s->dispatch_dirty = 1;
}

/* ---------- registration ---------- */

/* The agent named r->name, created or updated (row and record) as
 * registered now. RET 0 with *out, or HF_E* (*out NULL; with s->txn_rc set
 * when its row failed, else nothing was written). */
static int register_upsert(sched *s, const reg_body *r, const char *host, const char *gpus_json, int64_t now,
                           agent **out)
{
    agent *a = agent_by_name(s, r->name);
    int rc;
    *out = NULL;
    if (!a) {
        if ((rc = sched_grow((void **)&s->agents, &s->cagents, s->nagents + 1, sizeof *s->agents))) return rc;
        a = calloc(1, sizeof *a);
        if (!a) return HF_ENOMEM;
        int64_t id = row_agent_insert(s, r->name, host, r->slots, gpus_json, r->version, now);
        if (s->txn_rc) { free(a); return s->txn_rc; }
        a->id = id;
        a->pa.id = a->id;
        a->name = strdup(r->name);
        s->agents[s->nagents++] = a;
    } else {
        row_agent_update(s, a->id, host, r->slots, gpus_json, r->version, now);
    }
    free(a->host);
    a->host = xstrdup(host);
    free(a->version);
    a->version = xstrdup(r->version ? r->version : "");
    a->pa.slots = (int)r->slots;
    agent_set_gpus(a, r->gpus ? json_deep_copy(r->gpus) : NULL);
    a->alive = 1;
    a->last_hb_mono = hf_mono_ms();
    a->last_hb_wall = now;
    a->registered_at = now;
    *out = a;
    return 0;
}

/* Reconcile a (re-)registered agent with the placed ranks: ranks it still
 * runs are re-adopted; placed ranks it does not list were lost with it
 * (unsent ones are sent again). */
static void register_reconcile(sched *s, agent *a, const json_t *running, int64_t now)
{
    size_t nsnap = 0;
    trial **snap = live_snapshot(s, &nsnap);
    for (size_t k = 0; k < nsnap; k++) {
        trial *t = snap[k];
        int here = 0;
        for (int r = 0; r < t->nranks; r++) here += t->ranks[r].agent_id == a->id && !t->ranks[r].exited;
        for (int r = 0; r < t->nranks && t->ranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != a->id || tr->exited) continue;
            if (proto_running_has(running, t->id, t->attempt, tr->rank, here)) {
                if (tr->st != R_STARTED) {
                    tr->st = R_STARTED;
                    row_alloc_update(s, t, tr);
                    if (t->state == T_ASSIGNED) {
                        if (!t->started_at) t->started_at = now;
                        trial_set_state(s, t, T_RUNNING, "re-adopted");
                    }
                }
            } else if (tr->st == R_STARTED) {
                rank_exited(s, t, tr, -1, "lost: agent restarted without it");
                if (!t->ranks) break;
            } else {
                tr->st = R_NEW;   /* send the assignment again */
                txn_ring_note(s, a->id);
            }
        }
    }
    free(snap);
}

int sched_agent_register(sched *s, const json_t *body, const char *peer_ip, json_t **out, hf_jerr *e)
{
    return sched_agent_register_as(s, body, peer_ip, NULL, out, e);
}

int sched_agent_register_as(sched *s, const json_t *body, const char *peer_ip, const char *holder, json_t **out,
                            hf_jerr *e)
{
    reg_body r;
    int rc = proto_register_check(body, &r, e);
    if (rc) return rc;
    const char *host = r.host && *r.host ? r.host : peer_ip ? peer_ip : "127.0.0.1";
    char *gj = r.gpus ? hf_json_dump(r.gpus) : NULL;   /* NULL: "[]" */
    pthread_mutex_lock(&s->lock);
    if ((rc = register_may(s, r.name, holder, e))) {
        hf_warn("registration of agent '%s' refused (403): %s", r.name, e->msg);
        actor_set(s, holder);
        note_speak_refused(s, "registration", e);
        actor_set(s, NULL);
        goto end;
    }
    if (holder && holder_shared(holder))
        hf_warn("agent '%s' registered with the shared agent token ('agent:TOKEN'): every holder of that token can "
                "speak for it; give each agent its own ('agent:%s TOKEN', docs/operations.md)", r.name, r.name);
    txn_begin(s);
    int64_t now = hf_wall_ms(), aid = 0;
    agent *a = NULL;
    rc = register_upsert(s, &r, host, gj, now, &a);
    if (rc && !s->txn_rc) { txn_abort(s); goto end; }   /* nothing written: ENOMEM */
    if (a) {
        if (r.cached) {
            json_decref(a->cached);
            a->cached = json_incref(r.cached);
        }
        register_bind(s, a, holder);
        actor_set(s, holder);
        row_event(s, 0, 0, "AGENT_REGISTERED", r.name);
        actor_set(s, NULL);
        register_reconcile(s, a, r.running, now);
        agent_stale_update(s, a, r.running);
        txn_emit(s, "agent", agent_view(s, a));
        s->dispatch_dirty = 1;
        dispatch_pass(s);
        aid = a->id;
    }
    rc = txn_end(s);
    if (rc == 0)
        *out = json_pack("{sIsIsos{ssss*}}", "id", (json_int_t)aid, "heartbeat_interval_ms", (json_int_t)s->hb_fast_eff,
                         "token", json_null(), "checkpoint_storage", "mode",
                         s->cfg.ck_shared_dir ? "shared_fs" : "scheduler", "path", s->cfg.ck_shared_dir);
end:
    free(gj);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---------- heartbeat ---------- */

/* One heartbeat being applied: its agent (valid until the transaction
 * ends), clocks, batch, and what was stored or rejected. */
typedef struct hb_ctx {
    agent   *a;
    int64_t  now, mono;
    int64_t  batch;
    int      repeated;      /* this batch was already stored */
    uint64_t dropped, reports, points, nlogs;
    int64_t  rej_metrics, rej_points, rej_logs;   /* answered in "rejected": not stored */
    const char *holder;     /* the token's holder (NULL: no token file) */
    json_t  *refused;       /* owned: the reply's "refused" (foreign items) */
    int64_t  nrefused;
    int64_t  memo_tid, memo_att;   /* the last allocation lookup ... */
    int      memo_mine;            /* ... and its answer */
    struct { int64_t exp, tid, att, n; char first[48]; } rt[HB_REFUSED_ROWS];   /* trials refused, for the events rows */
    int      nrt;
} hb_ctx;

/* An item whose (trial_id, attempt) is not current on c->a: foreign when
 * that attempt was never assigned to c->a (an honest agent reports only
 * attempts it was given; a late report of its own older attempt is not
 * foreign and is dropped as before). A foreign item is listed in
 * c->refused and counted for the log and events rows. RET 1 when foreign. */
static int hb_foreign(sched *s, hb_ctx *c, const char *kind, size_t idx, const json_t *it)
{
    int64_t tid = json_integer_value(json_object_get(it, "trial_id")),
            att = json_integer_value(json_object_get(it, "attempt"));
    trial *t = trial_find(s, tid);
    if (!t) return 0;   /* no such trial (deleted, or another database): dropped as before */
    if (c->memo_tid != tid || c->memo_att != att) {
        c->memo_tid = tid;
        c->memo_att = att;
        c->memo_mine = alloc_was_assigned(s, tid, att, c->a->id) != 0;   /* a store error: not accused */
    }
    if (c->memo_mine) return 0;
    char where[48];
    snprintf(where, sizeof where, "%s[%zu]", kind, idx);
    c->nrefused++;
    if (json_array_size(c->refused) < HB_REFUSED_LIST)
        json_array_append_new(c->refused,
                              json_pack("{sssIsIsIsiss}", "item", where, "index", (json_int_t)idx, "trial_id",
                                        (json_int_t)tid, "attempt", (json_int_t)att, "status", 409, "error",
                                        "this attempt was never assigned to this agent: not applied"));
    int k = 0;
    while (k < c->nrt && (c->rt[k].tid != tid || c->rt[k].att != att)) k++;
    if (k == c->nrt && c->nrt < HB_REFUSED_ROWS) {
        c->rt[k].exp = t->exp->id;
        c->rt[k].tid = tid;
        c->rt[k].att = att;
        c->rt[k].n = 0;
        snprintf(c->rt[k].first, sizeof c->rt[k].first, "%s", where);
        c->nrt++;
    }
    if (k < c->nrt) c->rt[k].n++;
    return 1;
}

/* The log line and the events rows ("who tried") of the foreign items. */
static void hb_note_refused(sched *s, hb_ctx *c)
{
    char actor[sizeof s->actor], d[300];
    if (!c->nrefused) return;
    hf_warn("agent %s (%lld, token of '%s') reported %lld items of attempts never assigned to it (first: trial %lld "
            "attempt %lld, %s): refused, not applied", c->a->name, (long long)c->a->id, c->holder ? c->holder : "-",
            (long long)c->nrefused, (long long)c->rt[0].tid, (long long)c->rt[0].att, c->rt[0].first);
    memcpy(actor, s->actor, sizeof actor);
    actor_set(s, c->holder);
    for (int k = 0; k < c->nrt; k++) {
        snprintf(d, sizeof d, "agent '%.64s' (id %lld) reported %lld items (first: %s) for attempt %lld, which was "
                 "never assigned to it: refused, not applied", c->a->name, (long long)c->a->id, (long long)c->rt[k].n,
                 c->rt[k].first, (long long)c->rt[k].att);
        row_event(s, c->rt[k].exp, c->rt[k].tid, "REPORT_REFUSED", d);
    }
    memcpy(s->actor, actor, sizeof actor);
}

static void hb_mark_alive(sched *s, hb_ctx *c)
{
    agent *a = c->a;
    a->last_hb_mono = c->mono;
    a->last_hb_wall = c->now;
    row_agent_state(s, a->id, "ALIVE", c->now);
    if (!a->alive) {
        a->alive = 1;
        s->dispatch_dirty = 1;
        row_event(s, 0, 0, "AGENT_BACK", a->name);
        txn_emit(s, "agent", agent_view(s, a));
    }
}

/* Duplicate-safe: a batch this agent process already got committed (its
 * reply was lost, e.g. a timeout) is acknowledged without storing its
 * items again; the assignments of that lost reply are sent again. RET 1
 * when the batch is such a repeat; otherwise records it as the newest. */
static int hb_batch_repeated(sched *s, hb_ctx *c, const hb_items *in)
{
    agent *a = c->a;
    c->batch = in->batch;
    if (!in->instance) return 0;
    if (strcmp(in->instance, a->hb_instance) == 0 && in->batch <= a->hb_batch) {
        atomic_fetch_add(&metrics.heartbeats_repeated, 1);
        hf_info("agent %s: heartbeat batch %lld of instance %s already stored; acknowledging it again", a->name,
                (long long)in->batch, in->instance);
        c->repeated = 1;
        return 1;
    }
    snprintf(a->hb_instance, sizeof a->hb_instance, "%s", in->instance);
    a->hb_batch = in->batch;
    row_agent_batch(s, a->id, in->instance, in->batch);
    return 0;
}

/* One metric report: its points, the trial's latest/best and objective,
 * its checkpoint, and the SSE event. */
static void hb_apply_metric(sched *s, hb_ctx *c, size_t idx, const json_t *it)
{
    trial *t = proto_item_trial(s, c->a, it);
    if (!t) hb_foreign(s, c, "metrics", idx, it);
    if (!t || trial_state_terminal(t->state)) { c->dropped++; c->rej_metrics++; return; }
    json_t *vals = json_object_get(it, "values"), *stj = json_object_get(it, "step"),
           *epj = json_object_get(it, "epoch"), *tj = json_object_get(it, "time");
    const char *ck = json_string_value(json_object_get(it, "checkpoint"));
    int64_t tm = tj ? json_integer_value(tj) : c->now;
    t->nreports++;
    double xp = epj ? json_number_value(epj) : stj ? (double)json_integer_value(stj) : (double)t->nreports;
    const char *k;
    json_t *v;
    /* Two passes, the objective (the first one of a list) last: a
     * multi-objective searcher deciding on the objective's report then
     * sees the report's other objectives and constraints, and the rows'
     * order (replayed after a restart) is the order they were fed in. */
    for (int pass = 0; pass < 2; pass++)
        json_object_foreach(vals, k, v) {
            if ((strcmp(k, t->exp->spec.metric) == 0) != pass) continue;
            if (!json_object_get(t->best, k) && (int64_t)json_object_size(t->best) >= s->cfg.max_metric_names) {
                c->dropped++;
                c->rej_points++;
                continue;
            }
            row_metric_insert(s, t, k, stj, epj, json_number_value(v), tm);
            c->points++;
        }
    if (stj) json_object_set_new(t->latest, "step", json_integer(json_integer_value(stj)));
    if (epj) json_object_set_new(t->latest, "epoch", json_real(json_number_value(epj)));
    t->mver++;
    for (int pass = 0; pass < 2; pass++)
        json_object_foreach(vals, k, v)
            if ((strcmp(k, t->exp->spec.metric) == 0) == pass &&
                (json_object_get(t->best, k) || (int64_t)json_object_size(t->best) < s->cfg.max_metric_names))
                trial_report(s, t, k, json_number_value(v), xp);
    if (ck && *ck) row_ckpt_insert(s, t, ck, stj, tm);
    c->reports++;
    if (s->ev && events_subscribers(s->ev))
        txn_emit(s, "metric", json_pack("{sIsIsOsOsO}", "trial_id", (json_int_t)t->id, "experiment_id",
                                        (json_int_t)t->exp->id, "step", stj ? stj : json_null(),
                                        "epoch", epj ? epj : json_null(), "values", vals));
}

/* Cut *len to at most max bytes without splitting a UTF-8 sequence. */
static void utf8_truncate(const char *s, size_t *len, size_t max)
{
    if (*len <= max) return;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    *len = n;
}

/* One log line, within the trial's line budget and the line length bound. */
static void hb_apply_log(sched *s, hb_ctx *c, size_t idx, const json_t *it)
{
    trial *t = proto_item_trial(s, c->a, it);
    if (!t) hb_foreign(s, c, "logs", idx, it);
    if (!t || trial_state_terminal(t->state)) { c->dropped++; c->rej_logs++; return; }
    if (t->log_lines >= s->cfg.max_log_lines) { t->logs_dropped++; c->dropped++; c->rej_logs++; return; }
    json_t *lj = json_object_get(it, "line"), *tj = json_object_get(it, "time");
    const char *line = json_string_value(lj);
    size_t len = json_string_length(lj);
    utf8_truncate(line, &len, (size_t)s->cfg.max_log_line);
    row_log_insert(s, t, json_string_value(json_object_get(it, "stream")), line, len,
                   tj ? json_integer_value(tj) : c->now);
    t->log_lines++;
    c->nlogs++;
}

/* One UPDATE per trial whose latest/best changed. */
static void hb_flush_metrics(sched *s)
{
    for (size_t k = 0; k < s->ndirty; k++)
        if (s->dirty[k]->dirty_metrics) row_trial_metrics(s, s->dirty[k]);
    s->ndirty = 0;
}

/* One event: a rank started, or exited / failed to start. */
static void hb_apply_event(sched *s, hb_ctx *c, size_t idx, const json_t *it)
{
    trial *t = proto_item_trial(s, c->a, it);
    if (!t) {
        hb_foreign(s, c, "events", idx, it);
        c->dropped++;
        return;
    }
    const char *type = json_string_value(json_object_get(it, "type"));
    if (strcmp(type, "started") == 0) {
        trial_rank *tr = proto_item_rank(t, c->a->id, it, 1);
        if (!tr || tr->st == R_STARTED) return;
        tr->st = R_STARTED;
        row_alloc_update(s, t, tr);
        if (t->state == T_ASSIGNED) {
            t->started_at = c->now;
            metrics_observe(&metrics.dispatch_latency, (c->mono - t->ready_mono) * 1000);
            char d[64];
            snprintf(d, sizeof d, "pid %lld", (long long)json_integer_value(json_object_get(it, "pid")));
            trial_set_state(s, t, T_RUNNING, d);
        }
        return;
    }
    trial_rank *tr = proto_item_rank(t, c->a->id, it, 0);
    if (!tr) return;
    int code;
    char why[200];
    if (strcmp(type, "start_failed") == 0) {
        const char *err = json_string_value(json_object_get(it, "error"));
        code = 127;
        snprintf(why, sizeof why, "start failed: %.150s", err ? err : "?");
    } else {
        int sig = (int)json_integer_value(json_object_get(it, "signal"));
        code = (int)json_integer_value(json_object_get(it, "exit_code"));
        if (sig && !code) code = 128 + sig;
        if (sig) snprintf(why, sizeof why, "signal %d", sig);
        else why[0] = 0;
    }
    tr->st = R_STARTED;
    rank_exited(s, t, tr, code, why[0] ? why : NULL);
}

/* The reply's work for c->a: new assignments (and those of a lost reply
 * when this batch is a repeat) and kills, re-sent every 2 s until the rank
 * exits. RET 1 when the agent has live ranks. */
static int hb_reply_work(sched *s, hb_ctx *c, json_t *assign, json_t *kill)
{
    agent *a = c->a;
    int busy = 0;
    for (size_t k = 0; k < a->non; k++) {
        trial *t = a->on[k];
        if (!t->ranks) continue;
        int killed_here = 0;
        for (int r = 0; r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != a->id || tr->exited) continue;
            busy = 1;
            if (t->kill_state >= 0) {
                /* A holder of a launcher trial keeps its slots until mpirun
                 * (rank 0) has exited: mpirun's daemons run there. */
                if (trial_holder_waits(t, tr)) continue;
                if (!killed_here && tr->st != R_NEW &&
                    (tr->kill_sent_mono == 0 || c->mono - tr->kill_sent_mono > 2000)) {
                    json_array_append_new(kill, json_pack("{sIsIsssI}", "trial_id", (json_int_t)t->id, "attempt",
                                                          (json_int_t)t->attempt, "reason", t->kill_reason,
                                                          "grace_ms", (json_int_t)t->exp->spec.grace_ms));
                    killed_here = 1;
                }
                if (tr->st != R_NEW) tr->kill_sent_mono = c->mono;
                continue;
            }
            if (tr->st == R_NEW || (c->repeated && tr->st == R_SENT && c->batch > 0 && tr->sent_batch == c->batch)) {
                json_array_append_new(assign, proto_assignment(s, t, tr));
                if (tr->st == R_NEW) {
                    tr->st = R_SENT;
                    row_alloc_update(s, t, tr);
                }
                tr->sent_mono = c->mono;
                tr->sent_batch = c->batch;
            }
        }
    }
    return busy;
}

/* Kills for processes of attempts the core no longer has on a. */
static void hb_reply_stale(sched *s, const agent *a, const json_t *running, json_t *kill)
{
    size_t i;
    json_t *it;
    json_array_foreach(running, i, it) {
        trial *t;
        int64_t att = json_integer_value(json_object_get(it, "attempt"));
        if (!agent_knows(s, a, json_integer_value(json_object_get(it, "trial_id")), att, &t))
            json_array_append_new(kill, json_pack("{sOsIsssi}", "trial_id", json_object_get(it, "trial_id"),
                                                  "attempt", (json_int_t)att, "reason", "stale attempt",
                                                  "grace_ms", 0));
    }
}

/* Build the reply after a dispatch pass, then end the transaction (grouped).
 * Slots that stale processes hold stay used until the agent stops listing
 * them, so nothing new is placed on top of them. */
static int hb_reply(sched *s, hb_ctx *c, const json_t *running, json_t **out)
{
    json_t *assign = json_array(), *kill = json_array();
    agent_stale_update(s, c->a, running);
    dispatch_pass(s);
    int busy = hb_reply_work(s, c, assign, kill);
    hb_reply_stale(s, c->a, running, kill);
    for (size_t k = 0; k < s->nexps && !busy; k++)
        if (s->exps[k]->state == E_ACTIVE && s->exps[k]->counts[T_QUEUED] > 0) busy = 1;
    txn_ring_forget(s, c->a->id);   /* this reply carries all of it */
    c->a = NULL;                    /* the commit may reload memory: no record past here */
    int rc = txn_end_grouped(s);
    if (rc) {
        json_decref(assign);
        json_decref(kill);
        return rc;
    }
    json_t *refused = c->refused;
    c->refused = NULL;
    atomic_fetch_add(&metrics.metric_reports, c->reports);
    atomic_fetch_add(&metrics.metric_points, c->points);
    atomic_fetch_add(&metrics.log_lines, c->nlogs);
    atomic_fetch_add(&metrics.items_dropped, c->dropped);
    *out = json_pack("{sososIsIs{sIsIsIsI}so}", "assign", assign, "kill", kill, "heartbeat_interval_ms",
                     (json_int_t)(busy || json_array_size(kill) ? s->hb_fast_eff : s->hb_idle_eff),
                     "report_gap_ms", (json_int_t)s->hb_report_gap, "rejected", "metrics",
                     (json_int_t)c->rej_metrics, "points", (json_int_t)c->rej_points, "logs", (json_int_t)c->rej_logs,
                     "refused", (json_int_t)c->nrefused, "refused", refused);
    return 0;
}

int sched_agent_heartbeat(sched *s, int64_t agent_id, const json_t *body, json_t **out, hf_jerr *e)
{
    return sched_agent_heartbeat_as(s, agent_id, body, NULL, out, e);
}

int sched_agent_heartbeat_as(sched *s, int64_t agent_id, const json_t *body, const char *holder, json_t **out,
                             hf_jerr *e)
{
    hb_items in;
    size_t i;
    json_t *it;
    int rc = proto_heartbeat_check(body, &in, e);
    if (rc) return rc;
    atomic_fetch_add(&s->hb_queue, 1);
    pthread_mutex_lock(&s->lock);
    atomic_fetch_sub(&s->hb_queue, 1);
    hb_ctx c = {.a = agent_find(s, agent_id), .holder = holder, .memo_tid = -1};
    if (!c.a) {
        hf_jerr_set(e, "", NULL, "unknown agent %lld: register again", (long long)agent_id);
        rc = HF_ENOTFOUND;
        goto end;
    }
    if ((rc = agent_may_speak_locked(s, c.a, holder, e))) {   /* before anything is written */
        hf_warn("heartbeat refused (403): token of '%s' for agent %lld: %s", holder, (long long)agent_id, e->msg);
        actor_set(s, holder);
        note_speak_refused(s, "heartbeat", e);
        actor_set(s, NULL);
        goto end;
    }
    if (!(c.refused = json_array())) {
        rc = HF_ENOMEM;
        goto end;
    }
    atomic_fetch_add(&metrics.heartbeats, 1);
    c.now = hf_wall_ms();
    c.mono = hf_mono_ms();
    txn_join(s);
    hb_mark_alive(s, &c);
    if (in.cached) {
        json_decref(c.a->cached);
        c.a->cached = json_incref(in.cached);
    }
    if (hb_batch_repeated(s, &c, &in)) in.metrics = in.logs = in.events = NULL;
    /* Metrics and logs first: a trial's last reports arrive in the same
     * heartbeat as its exit and must be stored before it is finished. */
    json_array_foreach(in.metrics, i, it) hb_apply_metric(s, &c, i, it);
    json_array_foreach(in.logs, i, it) hb_apply_log(s, &c, i, it);
    hb_flush_metrics(s);
    json_array_foreach(in.events, i, it) hb_apply_event(s, &c, i, it);
    hb_note_refused(s, &c);
    rc = hb_reply(s, &c, in.running, out);
end:
    json_decref(c.refused);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---------- doorbell ---------- */

void sched_set_doorbell(sched *s, void (*ring)(void *ctx, int64_t agent_id), void *ctx)
{
    pthread_mutex_lock(&s->lock);
    s->bell = ring;
    s->bell_ctx = ctx;
    pthread_mutex_unlock(&s->lock);
}

int sched_agent_pending(sched *s, int64_t agent_id, int *pending)
{
    int rc = 0;
    *pending = 0;
    pthread_mutex_lock(&s->lock);
    agent *a = agent_find(s, agent_id);
    if (!a) {
        rc = HF_ENOTFOUND;
        goto end;
    }
    for (size_t k = 0; k < a->non && !*pending; k++) {
        trial *t = a->on[k];
        for (int r = 0; r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != agent_id || tr->exited) continue;
            if (t->kill_state >= 0 ? tr->st != R_NEW && tr->kill_sent_mono == 0 : tr->st == R_NEW) *pending = 1;
        }
    }
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---------- tick ---------- */

/* Heartbeat load stays near heartbeat_rate/s however many agents there
 * are; the doorbell keeps dispatch prompt regardless. The heartbeats an
 * agent sends at once for a report a searcher may stop on (prompt_metric)
 * are spaced by the same scaled interval, at least 20 ms, so they add at
 * most another heartbeat_rate/s (docs/protocol.md). */
static void tick_scale_heartbeats(sched *s)
{
    int64_t alive = 0, scaled = 0;
    for (size_t i = 0; i < s->nagents; i++) alive += s->agents[i]->alive;
    if (s->cfg.heartbeat_rate > 0) scaled = alive * 1000 / s->cfg.heartbeat_rate;
    if (scaled > s->cfg.agent_timeout_ms / 4) scaled = s->cfg.agent_timeout_ms / 4;
    s->hb_fast_eff = s->cfg.heartbeat_fast_ms > scaled ? s->cfg.heartbeat_fast_ms : scaled;
    s->hb_idle_eff = s->cfg.heartbeat_ms > scaled ? s->cfg.heartbeat_ms : scaled;
    s->hb_report_gap = scaled > SCHED_REPORT_GAP_MIN_MS ? scaled : SCHED_REPORT_GAP_MIN_MS;
}

/* a has been silent past agent_timeout_ms: LOST, its ranks end. */
static void tick_agent_lost(sched *s, agent *a, int64_t mono)
{
    a->alive = 0;
    s->dispatch_dirty = 1;
    hf_warn("agent %s (%lld) lost: no heartbeat for %lld ms", a->name, (long long)a->id,
            (long long)(mono - a->last_hb_mono));
    row_agent_state(s, a->id, "LOST", a->last_hb_wall);
    row_event(s, 0, 0, "AGENT_LOST", a->name);
    size_t nsnap = 0;
    int stale = 0;
    trial **snap = trials_copy(a->on, a->non, &nsnap);
    for (size_t k = 0; k < nsnap; k++) {
        trial *t = snap[k];
        for (int r = 0; t->ranks && r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != a->id || tr->exited) continue;
            if (tr->st == R_NEW) tr->st = R_STARTED;   /* count it as gone */
            else stale += tr->slots;   /* it may still run there */
            rank_exited(s, t, tr, -1, "agent lost");
            if (!t->ranks) break;
        }
    }
    free(snap);
    /* Its processes may outlive the silence (a partition): their slots
     * stay used until a heartbeat or registration lists what runs. */
    a->stale_slots += stale;
    a->pa.slots_used += stale;
    txn_emit(s, "agent", agent_view(s, a));
}

/* Assignments an agent never started: fail the attempt. */
static void tick_assign_timeouts(sched *s, int64_t mono)
{
    size_t nsnap = 0;
    trial **snap = live_snapshot(s, &nsnap);
    for (size_t k = 0; k < nsnap; k++) {
        trial *t = snap[k];
        for (int r = 0; t->ranks && r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->st == R_SENT && !tr->exited && mono - tr->sent_mono > s->cfg.assign_timeout_ms) {
                tr->st = R_STARTED;
                rank_exited(s, t, tr, -1, "assignment not acknowledged");
                break;
            }
        }
    }
    free(snap);
}

void sched_tick(sched *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t mono = hf_mono_ms();
    tick_scale_heartbeats(s);
    txn_begin(s);
    for (size_t i = 0; i < s->nagents; i++) {
        agent *a = s->agents[i];
        if (a->alive && mono - a->last_hb_mono > s->cfg.agent_timeout_ms) tick_agent_lost(s, a, mono);
    }
    tick_assign_timeouts(s, mono);
    /* The pass runs after changes; the tick also runs one every second
     * whatever happened (nothing should need it; it bounds a miss). */
    if (mono - s->last_pass_mono >= 1000) s->dispatch_dirty = 1;
    dispatch_pass(s);
    txn_end(s);
    pthread_mutex_unlock(&s->lock);
}

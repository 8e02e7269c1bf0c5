/*
 * sched_heartbeat.c — an agent's heartbeat applied to the scheduler core
 * (docs/protocol.md "Heartbeat"; sched_int.h).
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
 * Authority (docs/protocol.md, "Agent tokens"; sched_token.c): the token
 * must speak for the agent before anything is written (else HF_EPERM).
 * Items naming an attempt that was never assigned to the reporting agent
 * (allocations) are foreign: never applied, listed in the reply's
 * "refused", logged, and recorded as a REPORT_REFUSED event with the
 * token's holder as its user; the honest items of the same heartbeat are
 * applied as usual.
 *
 * Workload: thousands of agents a few times a second; per heartbeat the
 * work is the agent's own items and its placed trials (agent.on).
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/notify/events.h"
#include "scheduler/api/metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HB_REFUSED_LIST 1000   /* refused items listed in one reply (all are counted) */
#define HB_REFUSED_ROWS 8      /* distinct trials given a REPORT_REFUSED event per heartbeat */

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
    /* A drained agent (docs/scheduler.md "Drained attempts"): the attempt
     * goes back to the queue, from its newest checkpoint, without a
     * restart, and nothing more is placed on the agent (it is leaving). */
    if (json_is_true(json_object_get(it, "drained"))) {
        c->a->pa.excluded = 1;
        if (code != 0 && t->kill_state < 0) trial_request_kill(s, t, T_PAUSED, "agent drained: requeued");
    }
    rank_exited(s, t, tr, code, why[0] ? why : NULL);
}

/* Was rank tr of t pushed to c->a by a long-poll reply (sched_pending.c)
 * that got lost? Yes when the agent still does not list it as running
 * SCHED_PUSH_RESEND_MS after the push (it lists an accepted one at once):
 * it goes out again in this reply, and an agent that had it after all
 * ignores the duplicate. */
static int hb_push_lost(const hb_ctx *c, const trial *t, const trial_rank *tr, const json_t *running)
{
    if (tr->st != R_SENT || !tr->pushed || c->mono - tr->sent_mono < SCHED_PUSH_RESEND_MS) return 0;
    int here = 0;
    for (int r = 0; r < t->nranks; r++) here += t->ranks[r].agent_id == c->a->id && !t->ranks[r].exited;
    return !proto_running_has(running, t->id, t->attempt, tr->rank, here);
}

/* The reply's work for c->a: new assignments (and those of a lost reply
 * when this batch is a repeat, or of a lost push) and kills, re-sent every
 * 2 s until the rank exits. RET 1 when the agent has live ranks. */
static int hb_reply_work(sched *s, hb_ctx *c, const json_t *running, json_t *assign, json_t *kill)
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
            if (tr->st == R_NEW || (c->repeated && tr->st == R_SENT && c->batch > 0 && tr->sent_batch == c->batch) ||
                hb_push_lost(c, t, tr, running)) {
                json_array_append_new(assign, proto_assignment(s, t, tr));
                if (tr->st == R_NEW || tr->pushed) {
                    tr->st = R_SENT;
                    tr->pushed = 0;
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
        if (!agent_runs_attempt(s, a, json_integer_value(json_object_get(it, "trial_id")), att, &t))
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
    /* During a burst (dispatch_more) the kicked thread places, chunk by
     * chunk; a heartbeat's thread serves other agents' connections too. */
    if (!(s->dispatch_more && s->kick)) dispatch_pass(s);
    int busy = hb_reply_work(s, c, running, assign, kill);
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
    sched_lock(s);
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
        agent_refused_note(s, "heartbeat", e);
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
    if (json_is_true(json_object_get(body, "draining"))) c.a->pa.excluded = 1;   /* leaving: place nothing more */
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
    sched_unlock(s);
    return rc;
}

/*
 * sched_tick.c — the scheduler core's periodic tick (sched_tick, called
 * about every 100 ms by cron.c; sched_int.h): it scales the heartbeat
 * intervals to the number of agents, declares agents silent past
 * agent_timeout_ms LOST (their ranks end), fails assignments never
 * acknowledged within assign_timeout_ms, and runs a dispatch pass at
 * least once a second. One transaction per tick, then one bounded batch
 * of the purge of deleted experiments in a transaction of its own
 * (sched_purge.c).
 */
#include "scheduler/core/sched_int.h"

#include "hf_log.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void sched_post_event(sched *s, const char *type, const char *detail)
{
    pthread_mutex_lock(&s->post_mu);
    if (s->nposted == SCHED_POSTED_MAX) {   /* drop the oldest */
        memmove(&s->posted[0], &s->posted[1], (SCHED_POSTED_MAX - 1) * sizeof s->posted[0]);
        s->nposted--;
        s->posted_dropped++;
    }
    struct sched_posted *p = &s->posted[s->nposted++];
    p->time = hf_wall_ms();
    snprintf(p->type, sizeof p->type, "%s", type);
    snprintf(p->detail, sizeof p->detail, "%s", detail ? detail : "");
    pthread_mutex_unlock(&s->post_mu);
}

uint64_t sched_posted_dropped(sched *s)
{
    pthread_mutex_lock(&s->post_mu);
    uint64_t n = s->posted_dropped;
    pthread_mutex_unlock(&s->post_mu);
    return n;
}

/* The posted events as rows of the tick's transaction. Caller holds the
 * core lock (post_mu is taken inside it, never the other way round). */
static void tick_posted(sched *s)
{
    struct sched_posted got[SCHED_POSTED_MAX];
    pthread_mutex_lock(&s->post_mu);
    int n = s->nposted;
    memcpy(got, s->posted, (size_t)n * sizeof got[0]);
    s->nposted = 0;
    pthread_mutex_unlock(&s->post_mu);
    for (int i = 0; i < n; i++) row_event_at(s, got[i].time, 0, 0, got[i].type, got[i].detail[0] ? got[i].detail : NULL);
}

void sched_tick(sched *s)
{
    sched_lock(s);
    int64_t mono = hf_mono_ms();
    tick_scale_heartbeats(s);
    txn_begin(s);
    for (size_t i = 0; i < s->nagents; i++) {
        agent *a = s->agents[i];
        if (a->alive && mono - a->last_hb_mono > s->cfg.agent_timeout_ms) tick_agent_lost(s, a, mono);
    }
    tick_assign_timeouts(s, mono);
    tick_posted(s);
    /* The pass runs after changes; the tick also runs one every second
     * whatever happened (nothing should need it; it bounds a miss). */
    if (mono - s->last_pass_mono >= 1000) s->dispatch_dirty = 1;
    dispatch_pass(s);
    txn_end(s);
    sched_unlock(s);
    /* A deleted experiment's rows, a bounded batch per tick (its own
     * transaction: the lock is released in between for whoever waits). */
    exp_purge_step(s);
}

/*
 * sched_register.c — agent registration in the scheduler core
 * (docs/protocol.md "Registration"; sched_int.h): the agent's record and
 * row created or updated, bound to its token's holder (sched_token.c), its
 * placed ranks reconciled with what it says it runs, and the processes it
 * runs for attempts the core no longer has there counted as stale.
 *
 * Stale processes (agent_runs_attempt, agent_stale_update; also used by
 * every heartbeat, sched_heartbeat.c): a process an agent lists for an
 * attempt that has no live rank there any more gets a kill and keeps its
 * slots counted as used until the agent stops listing it, so nothing is
 * placed on top of a process still being killed.
 *
 * One transaction per registration, ending with a dispatch pass.
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

/* ---------- stale processes ---------- */

/* Does a still have a live rank of (tid, att)? Processes it lists that
 * fail this are stale: they get a kill and hold their slots until gone. */
int agent_runs_attempt(sched *s, const agent *a, int64_t tid, int64_t att, trial **out)
{
    trial *t = trial_find(s, tid);
    *out = t;
    if (t && t->attempt == att && t->ranks)
        for (int r = 0; r < t->nranks; r++)
            if (t->ranks[r].agent_id == a->id && !t->ranks[r].exited) return 1;
    return 0;
}

/* Count the slots of the stale processes in running[] as used on a. */
void agent_stale_update(sched *s, agent *a, const json_t *running)
{
    HF_ASSERT(sched_lock_held(s));
    size_t i;
    json_t *it;
    int stale = 0;
    json_array_foreach(running, i, it) {
        trial *t;
        if (agent_runs_attempt(s, a, json_integer_value(json_object_get(it, "trial_id")),
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
    a->pa.excluded = 0;   /* a drained agent that registers again takes trials again */
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
    sched_lock(s);
    if ((rc = agent_may_register(s, r.name, holder, e))) {
        hf_warn("registration of agent '%s' refused (403): %s", r.name, e->msg);
        actor_set(s, holder);
        agent_refused_note(s, "registration", e);
        actor_set(s, NULL);
        goto end;
    }
    if (holder && agent_holder_shared(holder))
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
        agent_bind_holder(s, a, holder);
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
    sched_unlock(s);
    return rc;
}

/*
 * sched_pending.c — the doorbell's side of the scheduler core (sched.h):
 * the hook rung after a commit for agents that got an assignment or a kill
 * (sched_set_doorbell; doorbell.c parks their long-polls), the query a
 * long-poll makes when it starts: has this agent work waiting
 * (sched_agent_pending)?, and the push: the assignments themselves handed
 * to a long-poll that asked for them (sched_agent_take_assign), so an idle
 * agent starts its trials without a heartbeat round trip first
 * (docs/scheduler.md, "Cold dispatch"). One agent's `on` list each; the
 * push changes ranks in memory only and writes no row.
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "hf_time.h"

void sched_set_doorbell(sched *s, void (*ring)(void *ctx, int64_t agent_id), void *ctx)
{
    sched_lock(s);
    s->bell = ring;
    s->bell_ctx = ctx;
    sched_unlock(s);
}

int sched_agent_pending(sched *s, int64_t agent_id, int *pending)
{
    int rc = 0;
    *pending = 0;
    sched_lock(s);
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
    sched_unlock(s);
    return rc;
}

int sched_agent_take_assign(sched *s, int64_t agent_id, json_t **assign)
{
    int rc = 0;
    json_t *out = json_array();
    *assign = NULL;
    if (!out) return HF_ENOMEM;
    sched_lock(s);
    /* Only what is durable goes out: deferred heartbeats may hold an open
     * transaction whose pass placed ranks here (txn_begin does the same). */
    if (s->grp_open) txn_end(s);
    agent *a = agent_find(s, agent_id);
    if (!a) {
        rc = HF_ENOTFOUND;
        goto end;
    }
    int64_t mono = hf_mono_ms();
    for (size_t k = 0; k < a->non; k++) {
        trial *t = a->on[k];
        if (!t->ranks || t->kill_state >= 0) continue;
        for (int r = 0; r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != agent_id || tr->exited || tr->st != R_NEW) continue;
            json_t *as = proto_assignment(s, t, tr);
            if (!as || json_array_append_new(out, as)) {
                rc = HF_ENOMEM;
                goto end;
            }
            /* Sent, in memory only: the row keeps R_NEW, which after a
             * restart means "send again" (the agent ignores a duplicate). */
            tr->st = R_SENT;
            tr->sent_mono = mono;
            tr->sent_batch = 0;
            tr->pushed = 1;
        }
    }
end:
    sched_unlock(s);
    if (rc) json_decref(out);
    else *assign = out;
    return rc;
}

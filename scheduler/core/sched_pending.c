/*
 * sched_pending.c — the doorbell's side of the scheduler core (sched.h):
 * the hook rung after a commit for agents that got an assignment or a kill
 * (sched_set_doorbell; doorbell.c parks their long-polls), and the query a
 * long-poll makes when it starts: has this agent work waiting
 * (sched_agent_pending)? Read-only on the model, one agent's `on` list.
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"

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

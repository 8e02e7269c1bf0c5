/*
 * sched_state.c — the trial and experiment state machine of the scheduler
 * core (sched_int.h): the tables of legal transitions, the one setter of
 * each (trial_set_state, exp_set_state) that enforces them, and the ends
 * of attempts (kills, rank exits, restarts).
 *
 *   QUEUED -> ASSIGNED -> RUNNING -> COMPLETED | FAILED | STOPPED | CANCELED
 *   (PAUSED while its experiment is paused; FAILED with restarts left goes
 *   back to QUEUED; an ASHA promotion sends a STOPPED/COMPLETED trial back
 *   to QUEUED with a larger budget, to resume from its own checkpoint.)
 *
 *   ACTIVE <-> PAUSED, ACTIVE -> COMPLETED | FAILED (search finished: FAILED
 *   when no trial completed or stopped and at least one failed), ACTIVE |
 *   PAUSED -> FAILED (trial.max_failures trials failed in a row: the rest
 *   are canceled), COMPLETED | FAILED -> ACTIVE (extend), ACTIVE | PAUSED
 *   -> CANCELED. An ended experiment keeps the reason in end_reason
 *   (docs/scheduler.md "End states").
 *
 * The exact tables are trial_next[] and exp_next[] below (the same in
 * docs/scheduler.md "State machine"); a transition not in them is refused
 * (HF_ESTATE, nothing changed) and is an HF_ASSERT failure: no caller
 * asks for one, so one that does is a bug.
 *
 * Every state change goes through trial_set_state / exp_set_state, which
 * write the record's row and an events row in the current transaction and
 * queue an SSE event that is published only after the commit. A placed
 * trial ends through kills (trial_request_kill: sent in its agents' next
 * heartbeat replies) and rank exits (rank_exited); when its last rank has
 * exited, trial_finish releases its slots and applies the restart rules.
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- the tables ---------- */

#define B(st) (1u << (st))
/* trial_next[from]: the states a trial in `from` may go to. Who asks:
 * QUEUED -> ASSIGNED dispatch (placed); -> FAILED a PBT child whose parent
 * has no checkpoint (sched_ckpt.c); -> CANCELED, PAUSED a kill of an
 * unplaced trial (trial_request_kill). ASSIGNED -> RUNNING the agent's
 * `started` or a re-registration; ASSIGNED | RUNNING -> an end state,
 * or QUEUED | PAUSED (a pause kill, by the experiment's state), when the
 * attempt is over (trial_finish). A FAILED attempt with restarts left ->
 * QUEUED | PAUSED; COMPLETED | STOPPED -> QUEUED an ASHA promotion; PAUSED
 * -> QUEUED resume, -> CANCELED cancel. CANCELED is final. */
static const unsigned trial_next[T__N] = {
    [T_QUEUED]    = B(T_ASSIGNED) | B(T_FAILED) | B(T_CANCELED) | B(T_PAUSED),
    [T_ASSIGNED]  = B(T_RUNNING) | B(T_QUEUED) | B(T_PAUSED) | B(T_COMPLETED) | B(T_FAILED) | B(T_STOPPED) |
                    B(T_CANCELED),
    [T_RUNNING]   = B(T_QUEUED) | B(T_PAUSED) | B(T_COMPLETED) | B(T_FAILED) | B(T_STOPPED) | B(T_CANCELED),
    [T_COMPLETED] = B(T_QUEUED),
    [T_FAILED]    = B(T_QUEUED) | B(T_PAUSED),
    [T_STOPPED]   = B(T_QUEUED),
    [T_CANCELED]  = 0,
    [T_PAUSED]    = B(T_QUEUED) | B(T_CANCELED),
};
/* exp_next[from]: ACTIVE -> PAUSED pause, -> COMPLETED | FAILED the search
 * finished (dispatch.c), -> FAILED trial.max_failures, -> CANCELED cancel;
 * PAUSED -> ACTIVE resume, -> FAILED max_failures, -> CANCELED cancel;
 * COMPLETED | FAILED -> ACTIVE extend; CANCELED is final. Setting the
 * state an experiment already has is a no-op, not a transition. */
static const unsigned exp_next[E__N] = {
    [E_ACTIVE]    = B(E_PAUSED) | B(E_COMPLETED) | B(E_FAILED) | B(E_CANCELED),
    [E_PAUSED]    = B(E_ACTIVE) | B(E_FAILED) | B(E_CANCELED),
    [E_COMPLETED] = B(E_ACTIVE),
    [E_FAILED]    = B(E_ACTIVE),
    [E_CANCELED]  = 0,
};

int trial_transition_ok(int from, int to)
{
    return from >= 0 && from < T__N && to >= 0 && to < T__N && (trial_next[from] & B(to));
}

int exp_transition_ok(int from, int to)
{
    return from >= 0 && from < E__N && to >= 0 && to < E__N && (exp_next[from] & B(to));
}
#undef B

/* ---------- experiments ---------- */

void exp_save(sched *s, experiment *x)
{
    HF_ASSERT(sched_lock_held(s));
    row_exp_update(s, x);
    s->dispatch_dirty = 1;
    txn_emit(s, "experiment", exp_summary(x));
}

int exp_set_state(sched *s, experiment *x, int st, const char *detail)
{
    HF_ASSERT(sched_lock_held(s));
    if (x->state == st) return 0;
    if (!HF_ALWAYS(exp_transition_ok(x->state, st))) {
        hf_error("experiment %lld: %s -> %s refused (not a legal transition)", (long long)x->id,
                 x->state >= 0 && x->state < E__N ? exp_state_names[x->state] : "?",
                 st >= 0 && st < E__N ? exp_state_names[st] : "?");
        return HF_ESTATE;
    }
    x->state = st;
    s->dispatch_dirty = 1;
    if (exp_state_ended(st)) {
        x->ended_at = hf_wall_ms();
        snprintf(x->end_reason, sizeof x->end_reason, "%s", detail ? detail : "");
    } else {
        x->ended_at = 0;
        x->end_reason[0] = 0;
        x->fail_run = 0;   /* extended or resumed: count failures afresh */
    }
    exp_save(s, x);
    row_event(s, x->id, 0, exp_state_names[st], detail);
    hf_info("experiment %lld -> %s%s%s", (long long)x->id, exp_state_names[st], detail ? ": " : "",
            detail ? detail : "");
    return 0;
}

/* The search has nothing left to run and no trial is active or paused. */
void exp_search_finished(sched *s, experiment *x)
{
    int64_t failed = x->counts[T_FAILED], good = x->counts[T_COMPLETED] + x->counts[T_STOPPED];
    if (good > 0 || failed == 0) {
        exp_set_state(s, x, E_COMPLETED, "search finished");
        return;
    }
    char why[256];
    snprintf(why, sizeof why, "%s%lld trial%s failed%s%.160s", failed > 1 ? "all " : "", (long long)failed,
             failed > 1 ? "s" : "", x->last_fail[0] ? "; the last: " : "", x->last_fail);
    exp_set_state(s, x, E_FAILED, why);
}

/* t ended for good in st (no restart follows): count failures in a row and
 * end the experiment FAILED at trial.max_failures (0 = never). */
static void exp_trial_ended(sched *s, trial *t, int st, const char *detail)
{
    experiment *x = t->exp;
    if (st == T_COMPLETED || st == T_STOPPED) {
        x->fail_run = 0;
        return;
    }
    if (st != T_FAILED) return;
    x->fail_run++;
    snprintf(x->last_fail, sizeof x->last_fail, "%s", detail ? detail : "");
    if (!x->spec.max_failures || x->fail_run < x->spec.max_failures) return;
    if (x->state != E_ACTIVE && x->state != E_PAUSED) return;
    char why[256];
    snprintf(why, sizeof why, "%lld trials failed in a row (trial.max_failures)%s%.160s", (long long)x->fail_run,
             x->last_fail[0] ? "; the last: " : "", x->last_fail);
    exp_set_state(s, x, E_FAILED, why);
    for (size_t i = 0; i < x->ntrials; i++)
        if (!trial_state_terminal(x->trials[i]->state)) trial_request_kill(s, x->trials[i], T_CANCELED, "max_failures");
}

/* ---------- trials ---------- */

/* trial_set_state with the events row typed ev (NULL: the state's name).
 * RET 0, or HF_ESTATE (an HF_ASSERT failure; nothing changed) when st is
 * not a legal next state of t's. */
static int trial_set_state_ev(sched *s, trial *t, int st, const char *ev, const char *detail)
{
    int old = t->state;
    HF_ASSERT(sched_lock_held(s));
    if (!HF_ALWAYS(trial_transition_ok(old, st))) {
        hf_error("trial %lld: %s -> %s refused (not a legal transition)", (long long)t->id,
                 old >= 0 && old < T__N ? sched_trial_state_names[old] : "?",
                 st >= 0 && st < T__N ? sched_trial_state_names[st] : "?");
        return HF_ESTATE;
    }
    HF_ASSERT(t->exp->counts[old] > 0);
    t->exp->counts[old]--;
    t->exp->counts[st]++;
    t->state = st;
    s->dispatch_dirty = 1;
    if (st == T_QUEUED) t->ready_mono = hf_mono_ms();
    if (trial_state_terminal(st)) t->ended_at = hf_wall_ms();
    else if (trial_state_terminal(old)) t->ended_at = 0;
    row_trial_update(s, t);
    row_event(s, t->exp->id, t->id, ev ? ev : sched_trial_state_names[st], detail);
    if (txn_watched(s)) txn_emit(s, "trial", trial_view(s, t));
    hf_debug("trial %lld %s -> %s%s%s", (long long)t->id, sched_trial_state_names[old], sched_trial_state_names[st],
             detail ? ": " : "", detail ? detail : "");
    return 0;
}

int trial_set_state(sched *s, trial *t, int st, const char *detail)
{
    return trial_set_state_ev(s, t, st, NULL, detail);
}

/* ---------- ends of attempts ---------- */

/* Give t's slots and GPUs back to its agents and close its allocations. */
static void ranks_release(sched *s, trial *t)
{
    for (int r = 0; r < t->nranks; r++) {
        agent *a = agent_find(s, t->ranks[r].agent_id);
        if (!a) continue;
        place_rank pr = {.agent = 0, .ngpu = t->ranks[r].ngpu};
        memcpy(pr.gpu, t->ranks[r].gpu, sizeof pr.gpu);
        placement_release(&a->pa, 1, 1, t->ranks[r].slots, &pr);
        t->exp->slots_in_use -= t->ranks[r].slots;
    }
    if (t->nranks) row_alloc_release(s, t);
    if (t->ranks) { agent_unlink(s, t); live_del(s, t); }
    s->dispatch_dirty = 1;
    free(t->ranks);
    t->ranks = NULL;
    t->nranks = 0;
}

/* The attempt is over (all ranks exited, or it was never started). target
 * is the state asked for by a kill, or the outcome of the exit codes. */
static void trial_finish(sched *s, trial *t, int target, const char *detail)
{
    experiment *x = t->exp;
    int64_t agent_id = t->agent_id;
    ranks_release(s, t);
    t->kill_state = -1;
    t->kill_reason[0] = 0;
    if (target == T_FAILED) {
        if (agent_id > 0 && agent_id == t->fail_agent) t->fail_streak++;
        else { t->fail_agent = agent_id; t->fail_streak = 1; }
        if (t->restarts < x->spec.max_restarts && (x->state == E_ACTIVE || x->state == E_PAUSED)) {
            char d[160];
            /* An attempt with a restart left: its events row is
             * ATTEMPT_FAILED, so trial.FAILED (a webhook) means the trial
             * failed for good (docs/scheduler.md "End states"). */
            trial_set_state_ev(s, t, T_FAILED, "ATTEMPT_FAILED", detail);
            t->restarts++;
            snprintf(d, sizeof d, "restart %lld of %lld from the newest checkpoint", (long long)t->restarts,
                     (long long)x->spec.max_restarts);
            trial_set_state(s, t, x->state == E_PAUSED ? T_PAUSED : T_QUEUED, d);
            return;
        }
    } else if (target == T_COMPLETED) {
        t->fail_streak = 0;
    }
    if (target == T_PAUSED && x->state != E_PAUSED) target = T_QUEUED;
    if (target == T_QUEUED || target == T_PAUSED) {
        trial_set_state(s, t, target, detail);
        return;
    }
    trial_set_state(s, t, target, detail);
    trial_done_notify(t, target);
    exp_trial_ended(s, t, target, detail);
}

/* Is tr a holder rank of a launcher (mpirun) trial whose rank 0 still
 * runs? Such a rank is not sent kills yet: mpirun's daemons use its agent. */
int trial_holder_waits(const trial *t, const trial_rank *tr)
{
    return t->exp->spec.launcher_mpirun && tr->rank != 0 && t->ranks && !t->ranks[0].exited;
}

/* Ask for the trial to end in state target (STOPPED, CANCELED, PAUSED or
 * FAILED). Unplaced trials change at once; placed ones get a kill in
 * their agents' next heartbeat replies and change when they exit. */
void trial_request_kill(sched *s, trial *t, int target, const char *reason)
{
    HF_ASSERT(sched_lock_held(s));
    if (trial_state_terminal(t->state)) return;
    if (t->state == T_QUEUED || t->state == T_PAUSED) {
        trial_set_state(s, t, target, reason);
        if (trial_state_terminal(target)) {
            trial_done_notify(t, target);
            exp_trial_ended(s, t, target, reason);
        }
        return;
    }
    int any_sent = 0;
    for (int r = 0; r < t->nranks; r++)
        if (t->ranks[r].st != R_NEW && !t->ranks[r].exited) any_sent = 1;
    if (!any_sent) {                       /* nothing reached an agent yet */
        trial_finish(s, t, target, reason);
        return;
    }
    /* A pause or user kill overrides a weaker pending one (stop -> cancel),
     * except once mpirun (rank 0 of a launcher trial) has ended: its exit
     * decided the outcome, and only the holders are left to release. */
    if (t->kill_state >= 0 && !(target == T_CANCELED && t->kill_state != T_CANCELED)) return;
    if (t->kill_state >= 0 && t->exp->spec.launcher_mpirun && t->ranks && t->ranks[0].exited) return;
    t->kill_state = target;
    snprintf(t->kill_reason, sizeof t->kill_reason, "%s", reason);
    for (int r = 0; r < t->nranks; r++) {
        t->ranks[r].kill_sent_mono = 0;
        if (t->ranks[r].st != R_NEW && !t->ranks[r].exited && !trial_holder_waits(t, &t->ranks[r]))
            txn_ring_note(s, t->ranks[r].agent_id);
    }
    row_trial_update(s, t);
    row_event(s, t->exp->id, t->id, "KILL_REQUESTED", reason);
}

/* One rank ended (exit, start failure, lost agent). */
void rank_exited(sched *s, trial *t, trial_rank *r, int code, const char *why)
{
    HF_ASSERT(sched_lock_held(s));
    if (r->exited) return;
    r->exited = 1;
    r->exit_code = code;
    row_alloc_update(s, t, r);
    int others = 0;
    for (int k = 0; k < t->nranks; k++)
        if (!t->ranks[k].exited && t->ranks[k].st != R_NEW) others = 1;
    if (t->exp->spec.launcher_mpirun && r->rank == 0 && others) {
        /* mpirun (rank 0) ended: its exit code is the trial's outcome, and
         * the holders on the other agents are released now. A kill already
         * pending (STOP, cancel, pause) was held back from them until now. */
        if (t->kill_state < 0)
            trial_request_kill(s, t, code == 0 ? T_COMPLETED : T_FAILED,
                               code == 0 ? "mpirun exited" : why ? why : "mpirun failed");
        for (int k = 0; k < t->nranks; k++)
            if (!t->ranks[k].exited && t->ranks[k].st != R_NEW) {
                t->ranks[k].kill_sent_mono = 0;
                txn_ring_note(s, t->ranks[k].agent_id);
            }
    } else if (code != 0 && t->kill_state < 0 && others) {
        /* A failed worker fails the gang: stop the others, then restart. */
        trial_request_kill(s, t, T_FAILED, why ? why : "worker failed");
    }
    for (int k = 0; k < t->nranks; k++)
        if (!t->ranks[k].exited && t->ranks[k].st != R_NEW) return;   /* others still running */
    int all_ok = 1;
    for (int k = 0; k < t->nranks; k++)
        if (!t->ranks[k].exited || t->ranks[k].exit_code != 0) all_ok = 0;
    if (t->exp->spec.launcher_mpirun) all_ok = t->ranks[0].exited && t->ranks[0].exit_code == 0;
    t->has_exit = 1;
    t->exit_code = t->ranks[0].exited ? t->ranks[0].exit_code : code;
    char d[160];
    snprintf(d, sizeof d, "%s%sexit code %d", why ? why : "", why ? ", " : "", code);
    int target = t->kill_state >= 0 ? t->kill_state : all_ok ? T_COMPLETED : T_FAILED;
    trial_finish(s, t, target, t->kill_state >= 0 ? t->kill_reason : d);
}


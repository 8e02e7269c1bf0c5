/*
 * sched_ckpt.c — the scheduler core's view of the checkpoint store
 * (docs/scheduler.md, "The checkpoint store"; sched_int.h): which stored
 * checkpoint a trial must start from, and which agents already hold it.
 *
 * The rows are written by ckstore.c on its own connection once an object
 * is complete and verified; the core reads them here, on its connection,
 * under s->lock, only when it places or assigns a trial that ran before
 * or is a PBT child (one indexed query, checkpoints(trial_id, id)), so a
 * fresh trial costs nothing.
 *
 * Rule (docs/scheduler.md): a trial restores its own newest stored
 * checkpoint; when it has none and is a PBT child, its parent's newest. A
 * PBT child whose parent has none stored yet is not placed (the parent's
 * upload is normally a second away); after cfg.pbt_parent_wait_ms it
 * FAILS with that reason instead of ever starting without the weights.
 *
 * Who may store a checkpoint (sched_ckpt_may_store; docs/protocol.md,
 * "Agent tokens"): with a token file, only the agent the attempt
 * was assigned to (allocations), through a token that speaks for it
 * (sched_token.c), and only while the attempt runs there, or later for a
 * step the attempt reported a checkpoint of while it ran (the agent
 * uploads a checkpoint only after its metric report was acknowledged, so
 * the last one of a finished trial still arrives). Anything else is
 * refused before a byte is stored: no row, so retention and restores never
 * see it.
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

/* The newest stored checkpoint of trial id. RET 1 (found), 0, or -1 (DB). */
static int newest_of(sched *s, int64_t id, ckpt_ref *out)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_CKPT_NEWEST);
    int found = -1;
    sqlite3_bind_int64(st, 1, id);
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE) found = 0;
    if (src != SQLITE_ROW) goto end;
    const char *sha = (const char *)sqlite3_column_text(st, 0), *name = (const char *)sqlite3_column_text(st, 2);
    if (!sha || strlen(sha) != 64) { found = 0; goto end; }
    memcpy(out->sha256, sha, 65);
    out->size = sqlite3_column_int64(st, 1);
    /* rows recorded without a name (older agents): a name the agent and
     * the trainer accept, in the checkpoint directory */
    if (name && *name) snprintf(out->name, sizeof out->name, "%s", name);
    else snprintf(out->name, sizeof out->name, "restored-%.16s.ckpt", sha);
    out->step = sqlite3_column_int64(st, 3);
    out->agent_id = sqlite3_column_int64(st, 4);
    out->trial_id = id;
    found = 1;
end:
    if (found < 0) hf_error("checkpoints of trial %lld: %s", (long long)id, sqlite3_errmsg(store_db(s->st)));
    sqlite3_reset(st);
    return found;
}

int ckpt_restore_of(sched *s, const trial *t, ckpt_ref *out)
{
    memset(out, 0, sizeof *out);
    if (t->attempt == 0 && t->parent <= 0) return 0;    /* never ran, no parent: nothing to restore */
    int rc = newest_of(s, t->id, out);
    if (rc == 0 && t->parent > 0) rc = newest_of(s, t->parent, out);
    return rc < 0 ? 0 : rc;
}

int ckpt_agent_holds(const agent *a, const ckpt_ref *ref)
{
    if (ref->agent_id == a->id) return 1;
    size_t i;
    json_t *h;
    json_array_foreach(a->cached, i, h)
        if (strcmp(json_string_value(h), ref->sha256) == 0) return 1;
    return 0;
}

int ckpt_pbt_wait(sched *s, trial *t, const ckpt_ref *ref, int found)
{
    char d[200];
    if (found || t->parent <= 0) return 0;
    int64_t waited = hf_mono_ms() - t->ready_mono;
    if (waited < s->cfg.pbt_parent_wait_ms) return 1;
    (void)ref;
    snprintf(d, sizeof d, "PBT parent trial %lld has no checkpoint in the store after %lld s: not started "
             "without the parent's weights", (long long)t->parent, (long long)(waited / 1000));
    hf_warn("trial %lld: %s", (long long)t->id, d);
    trial_set_state(s, t, T_FAILED, d);
    trial_done_notify(t, T_FAILED);
    return 1;
}

json_t *ckpt_restore_json(const ckpt_ref *ref)
{
    return json_pack("{sssIsssIsI}", "sha256", ref->sha256, "size", (json_int_t)ref->size, "name", ref->name, "step",
                     (json_int_t)ref->step, "trial", (json_int_t)ref->trial_id);
}

/* Does attempt att of t still run on agent a (a live rank there)? */
static int attempt_runs_on(const trial *t, int64_t att, const agent *a)
{
    if (t->attempt != att || !t->ranks) return 0;
    for (int r = 0; r < t->nranks; r++)
        if (t->ranks[r].agent_id == a->id && !t->ranks[r].exited) return 1;
    return 0;
}

/* Did attempt att of trial tid report a checkpoint at step (a metric
 * report's "checkpoint", stored as a 'reported' row; a report without a
 * step matches any)? RET 1, 0, or -1 (DB). */
static int reported_at(sched *s, int64_t tid, int64_t att, int64_t step)
{
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT 1 FROM checkpoints WHERE trial_id=? AND attempt=? AND "
                                             "state='reported' AND (step=? OR step IS NULL) LIMIT 1", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, tid);
        sqlite3_bind_int64(st, 2, att);
        sqlite3_bind_int64(st, 3, step);
        int src = sqlite3_step(st);
        found = src == SQLITE_ROW ? 1 : src == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(st);
    return found;
}

/* The agent attempt att of tid was assigned to that holder may speak for
 * (an upload that names no agent: older agents, the shared token), or
 * NULL. One indexed query (allocations' key starts with trial_id, attempt). */
static agent *assignee_of(sched *s, int64_t tid, int64_t att, const char *holder)
{
    sqlite3_stmt *st = NULL;
    agent *found = NULL;
    hf_jerr ignore;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT agent_id FROM allocations WHERE trial_id=? AND attempt=?", -1, &st,
                           NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, tid);
    sqlite3_bind_int64(st, 2, att);
    while (!found && sqlite3_step(st) == SQLITE_ROW) {
        agent *a = agent_find(s, sqlite3_column_int64(st, 0));
        if (a && agent_may_speak_locked(s, a, holder, &ignore) == 0) found = a;
    }
end:
    sqlite3_finalize(st);
    return found;
}

/* The refusal in e: logged, and an event of the trial with holder as its
 * user, in a transaction of its own. */
static void note_refusal(sched *s, trial *t, const char *holder, int rc, const hf_jerr *e)
{
    char d[300];
    hf_warn("checkpoint for trial %lld refused (%d) to the token of '%s': %s", (long long)t->id,
            rc == HF_EPERM ? 403 : 409, holder ? holder : "-", e->msg);
    snprintf(d, sizeof d, "checkpoint upload refused: %s", e->msg);
    txn_begin(s);
    actor_set(s, holder);
    row_event(s, t->exp->id, t->id, "CHECKPOINT_REFUSED", d);
    actor_set(s, NULL);
    txn_end(s);
}

int sched_ckpt_may_store(sched *s, int64_t tid, int64_t att, int64_t step, const char *holder, int64_t *agent_id,
                         hf_jerr *e)
{
    int rc = 0;
    agent *a = NULL;
    sched_lock(s);
    trial *t = trial_find(s, tid);
    if (!t) {
        hf_jerr_set(e, "", NULL, "no such trial %lld", (long long)tid);
        rc = HF_ENOTFOUND;
        goto end;
    }
    if (*agent_id > 0) {   /* the uploader the request names */
        a = agent_find(s, *agent_id);
        if (!a) {
            hf_jerr_set(e, "agent", NULL, "no agent %lld is registered", (long long)*agent_id);
            rc = HF_EPERM;
        } else {
            rc = agent_may_speak_locked(s, a, holder, e);
        }
    } else if (holder && strcmp(holder, SCHED_SHARED_AGENT_HOLDER) != 0) {   /* a named token: its agent */
        a = agent_by_name(s, holder);
        if (!a) {
            hf_jerr_set(e, "", NULL, "no agent named '%.64s' is registered: register before uploading", holder);
            rc = HF_EPERM;
        }
    } else if (!(a = assignee_of(s, tid, att, holder))) {
        hf_jerr_set(e, "attempt", NULL, "attempt %lld of trial %lld was not assigned to an agent this token speaks for",
                    (long long)att, (long long)tid);
        rc = HF_ESTATE;
    }
    if (rc) goto refused;
    if (alloc_was_assigned(s, tid, att, a->id) != 1) {
        hf_jerr_set(e, "attempt", NULL, "attempt %lld of trial %lld was not assigned to agent '%.64s' (id %lld): only "
                    "the agent that runs an attempt stores its checkpoints", (long long)att, (long long)tid, a->name,
                    (long long)a->id);
        rc = HF_ESTATE;
        goto refused;
    }
    if (!attempt_runs_on(t, att, a) && reported_at(s, tid, att, step) != 1) {
        hf_jerr_set(e, "step", NULL, "attempt %lld of trial %lld no longer runs on agent '%.64s' and reported no "
                    "checkpoint at step %lld while it ran", (long long)att, (long long)tid, a->name, (long long)step);
        rc = HF_ESTATE;
        goto refused;
    }
    *agent_id = a->id;
    goto end;
refused:
    note_refusal(s, t, holder, rc, e);
end:
    sched_unlock(s);
    return rc;
}

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
 */
#include "scheduler/sched_int.h"

#include "hf_log.h"
#include "hf_time.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

/* The newest stored checkpoint of trial id. RET 1 (found), 0, or -1 (DB). */
static int newest_of(sched *s, int64_t id, ckpt_ref *out)
{
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT sha256,size,name,step,agent_id FROM checkpoints WHERE trial_id=? "
                                             "AND state='stored' ORDER BY id DESC LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        goto end;
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
    sqlite3_finalize(st);
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

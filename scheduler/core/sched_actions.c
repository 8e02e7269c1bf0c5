/*
 * sched_actions.c — the public calls that change experiments and trials on
 * a user's request (sched.h): submit, pause / resume / cancel, extend, and
 * kill of one trial. Each validates first, then runs one transaction that
 * ends with a dispatch pass when capacity or work may have changed; a
 * request refused on the model's state (HF_ESTATE) rolls back whatever it
 * had started and changes nothing.
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "hf_time.h"
#include "scheduler/core/expmeta.h"
#include "scheduler/search/warmstart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The warm-start history of x (warmstart.h), taken from the model now:
 * the COMPLETED and STOPPED trials of the experiments x names whose
 * hyperparameters fit x's space and that have a value for x's objective
 * metric (their objective when the metric is the same, else their latest
 * value of it), the newest WARM_MAX_HISTORY kept. Sets x->warm (NULL when
 * none is named) and *skipped (trials that did not fit the space).
 * RET 0, or HF_EINVAL naming an unknown experiment. */
static int warm_snapshot(sched *s, experiment *x, int64_t *skipped, hf_jerr *e)
{
    json_t *ids = warm_experiments(x->config), *hist;
    *skipped = 0;
    if (!json_array_size(ids)) return 0;
    if (!(hist = json_array())) return HF_ENOMEM;
    for (size_t i = 0; i < json_array_size(ids); i++) {
        experiment *src = exp_find(s, json_integer_value(json_array_get(ids, i)));
        char path[64];
        if (!src) {
            json_decref(hist);
            hf_jpath_index(path, sizeof path, "warm_start.experiments", i);
            return hf_jerr_set(e, path, NULL, "no such experiment %lld",
                               (long long)json_integer_value(json_array_get(ids, i)));
        }
        int same = strcmp(src->spec.metric, x->spec.metric) == 0;
        for (size_t k = 0; k < src->ntrials; k++) {
            const trial *t = src->trials[k];
            const json_t *lv = json_object_get(t->latest, x->spec.metric);
            hf_jerr ign;
            if (!(t->state == T_COMPLETED || t->state == T_STOPPED)) continue;
            if (same ? !t->has_obj : !json_is_number(lv)) continue;
            if (warm_point_check(x->spec.sp, t->hparams, "hparams", &ign)) { (*skipped)++; continue; }
            int64_t level = t->budget > 0 ? t->budget : src->spec.max_epochs;
            json_array_append_new(hist, json_pack("{sIsIsOsfsI}", "experiment_id", (json_int_t)src->id,
                                                  "trial_id", (json_int_t)t->id, "hparams", t->hparams,
                                                  "value", same ? t->obj : json_number_value(lv),
                                                  "level", (json_int_t)level));
        }
    }
    while (json_array_size(hist) > WARM_MAX_HISTORY) json_array_remove(hist, 0);
    x->warm = hist;
    return 0;
}

/* The event that says what a warm start brought (in the open transaction). */
static void warm_event(sched *s, const experiment *x, size_t observed, int64_t skipped)
{
    char d[200];
    if (!x->warm && !x->spec.n_enqueue) return;
    snprintf(d, sizeof d, "%zu earlier trials observed%s, %lld outside the space; %lld configurations enqueued",
             observed, x->warm && !x->srch->ops->observe ? " (this searcher fits no model: ignored)" : "",
             (long long)skipped, (long long)x->spec.n_enqueue);
    row_event(s, x->id, 0, "WARM_START", d);
}

int sched_experiment_submit(sched *s, const json_t *cfg, int64_t *id, hf_jerr *e)
{
    return sched_experiment_submit_as(s, cfg, NULL, 0, id, e);
}

int sched_experiment_submit_as(sched *s, const json_t *cfg_in, const char *user, int64_t parent, int64_t *id,
                               hf_jerr *e)
{
    json_t *cfg = json_deep_copy(cfg_in);
    char *text = NULL;
    int64_t skipped = 0;
    if (!cfg) return HF_ENOMEM;
    int rc = expmeta_tags_check(json_object_get(cfg, "tags"), "tags", e);
    if (rc) { json_decref(cfg); return rc; }
    experiment *x = exp_build(cfg, e);   /* validates; cfg now owned by x */
    if (!x) return e->msg[0] ? HF_EINVAL : HF_ENOMEM;
    if (user && !(x->submitted_by = strdup(user))) { exp_free(x); return HF_ENOMEM; }
    if (!(text = hf_json_dump(x->config))) { exp_free(x); return HF_ENOMEM; }
    sched_lock(s);
    actor_set(s, user);
    if (parent > 0 && !exp_find(s, parent)) {
        rc = HF_ENOTFOUND;
        hf_jerr_set(e, "", NULL, "no such experiment %lld to fork", (long long)parent);
        goto end;
    }
    x->parent_id = parent;
    if ((rc = warm_snapshot(s, x, &skipped, e))) goto end;
    size_t observed = x->warm ? warm_observe(x->srch, x->warm, x->spec.goal_max) : 0;
    rc = sched_grow((void **)&s->exps, &s->cexps, s->nexps + 1, sizeof *s->exps);
    if (rc) goto end;
    txn_begin(s);
    x->created_at = hf_wall_ms();
    x->state = E_ACTIVE;
    int64_t xid = row_exp_insert(s, x, text);
    if (s->txn_rc == 0) {
        x->id = xid;
        s->exps[s->nexps++] = x;
        x = NULL;
        experiment *nx = s->exps[s->nexps - 1];
        *id = nx->id;
        char d[64];
        if (parent > 0) snprintf(d, sizeof d, "forked from experiment %lld", (long long)parent);
        row_event(s, nx->id, 0, "ACTIVE", parent > 0 ? d : "submitted");
        warm_event(s, nx, observed, skipped);
        txn_emit(s, "experiment", exp_summary(nx));
        s->dispatch_dirty = 1;
        dispatch_pass(s);
    }
    rc = txn_end(s);   /* on failure the reload drops the unsaved experiment */
end:
    actor_set(s, NULL);
    sched_unlock(s);
    if (x) exp_free(x);
    free(text);
    return rc;
}

/* End an action's transaction; on success *out = the experiment's summary
 * (looked up again: a failed commit reloads the model). RET 0 or HF_E*. */
static int txn_end_summary(sched *s, int64_t id, json_t **out)
{
    int rc = txn_end(s);
    experiment *x = exp_find(s, id);
    if (rc == 0 && x) *out = exp_summary(x);
    return rc;
}

/* The experiment actions: each checks x's state (HF_ESTATE with a message
 * in e) and changes it in the open transaction. */
/* Pause and resume apply to an ACTIVE or PAUSED experiment only. */
static int exp_check_pausable(const experiment *x, const char *only, hf_jerr *e)
{
    if (x->state == E_ACTIVE || x->state == E_PAUSED) return 0;
    hf_jerr_set(e, "", NULL, "experiment is %s; %s", exp_state_names[x->state], only);
    return HF_ESTATE;
}

static int exp_pause(sched *s, experiment *x, hf_jerr *e)
{
    int rc = exp_check_pausable(x, "only an ACTIVE experiment can be paused", e);
    if (rc || x->state == E_PAUSED) return rc;
    exp_set_state(s, x, E_PAUSED, "paused by user");
    for (size_t i = 0; i < x->ntrials; i++)
        if (trial_state_active(x->trials[i]->state)) trial_request_kill(s, x->trials[i], T_PAUSED, "pause");
    return 0;
}

static int exp_resume(sched *s, experiment *x, hf_jerr *e)
{
    int rc = exp_check_pausable(x, "only a PAUSED experiment can be resumed (use extend)", e);
    if (rc || x->state == E_ACTIVE) return rc;
    if (x->archived) {
        hf_jerr_set(e, "", NULL, "experiment is archived: its checkpoints were dropped, it cannot be resumed");
        return HF_ESTATE;
    }
    exp_set_state(s, x, E_ACTIVE, "resumed by user");
    for (size_t i = 0; i < x->ntrials; i++)
        if (x->trials[i]->state == T_PAUSED) trial_set_state(s, x->trials[i], T_QUEUED, "resume");
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    return 0;
}

static int exp_cancel(sched *s, experiment *x, hf_jerr *e)
{
    if (x->state == E_COMPLETED || x->state == E_CANCELED || x->state == E_FAILED) {
        hf_jerr_set(e, "", NULL, "experiment is already %s", exp_state_names[x->state]);
        return HF_ESTATE;
    }
    exp_set_state(s, x, E_CANCELED, "canceled by user");
    for (size_t i = 0; i < x->ntrials; i++)
        if (!trial_state_terminal(x->trials[i]->state)) trial_request_kill(s, x->trials[i], T_CANCELED, "cancel");
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    return 0;
}

/* Archive and delete need an experiment that runs nothing and will not
 * by itself: COMPLETED, FAILED or CANCELED, or PAUSED, with no trial placed (a
 * trial still stopping holds its ranks until its agent confirms). */
static int exp_check_idle(const experiment *x, const char *what, hf_jerr *e)
{
    int placed = 0;
    for (size_t i = 0; i < x->ntrials; i++) placed |= x->trials[i]->ranks != NULL;
    if (x->state == E_ACTIVE || placed || exp_active_count(x)) {
        hf_jerr_set(e, "", NULL, "experiment %lld is %s%s: cancel or pause it and wait for its trials to stop before %s",
                    (long long)x->id, exp_state_names[x->state], placed ? " with trials on agents" : "", what);
        return HF_ESTATE;
    }
    return 0;
}

static int exp_archive(sched *s, experiment *x, hf_jerr *e)
{
    int rc = exp_check_idle(x, "archiving it", e);
    if (rc || x->archived) return rc;
    x->archived = 1;
    exp_save(s, x);
    row_event(s, x->id, 0, "ARCHIVED", "archived by user: checkpoints dropped");
    return 0;
}

static int exp_unarchive(sched *s, experiment *x, hf_jerr *e)
{
    (void)e;
    if (!x->archived) return 0;
    x->archived = 0;
    exp_save(s, x);
    row_event(s, x->id, 0, "UNARCHIVED", "unarchived by user");
    return 0;
}

static const struct {
    const char *name;
    int (*run)(sched *s, experiment *x, hf_jerr *e);
} exp_actions[] = {
    {"pause", exp_pause},
    {"resume", exp_resume},
    {"cancel", exp_cancel},
    {"archive", exp_archive},
    {"unarchive", exp_unarchive},
};

int sched_experiment_action(sched *s, int64_t id, const char *action, json_t **out, hf_jerr *e)
{
    return sched_experiment_action_as(s, id, action, NULL, out, e);
}

int sched_experiment_action_as(sched *s, int64_t id, const char *action, const char *user, json_t **out,
                               hf_jerr *e)
{
    int rc = 0;
    sched_lock(s);
    actor_set(s, user);
    experiment *x = exp_find(s, id);
    if (!x) { rc = HF_ENOTFOUND; goto end; }
    size_t k = 0;
    while (k < sizeof exp_actions / sizeof exp_actions[0] && strcmp(action, exp_actions[k].name) != 0) k++;
    if (k == sizeof exp_actions / sizeof exp_actions[0]) {
        hf_jerr_set(e, "", NULL, "unknown action \"%s\"", action);
        rc = HF_ENOTFOUND;
        goto end;
    }
    txn_begin(s);
    if ((rc = exp_actions[k].run(s, x, e))) { txn_abort(s); goto end; }
    rc = txn_end_summary(s, id, out);
end:
    actor_set(s, NULL);
    sched_unlock(s);
    return rc;
}

int sched_experiment_delete(sched *s, int64_t id, hf_jerr *e) { return sched_experiment_delete_as(s, id, NULL, e); }

int sched_experiment_delete_as(sched *s, int64_t id, const char *user, hf_jerr *e)
{
    int rc;
    char d[600];
    sched_lock(s);
    actor_set(s, user);
    experiment *x = exp_find(s, id);
    if (!x) { rc = HF_ENOTFOUND; goto end; }
    if ((rc = exp_check_idle(x, "deleting it", e))) goto end;
    /* One small transaction: the experiment is queued for the purge of
     * its rows (the tick's bounded batches, sched_purge.c) and leaves the
     * model; an experiment in the queue is never loaded again. */
    txn_begin(s);
    row_exp_purge_queue(s, id);
    /* its own events go with it; who deleted it stays (no experiment id) */
    snprintf(d, sizeof d, "experiment %lld (%.500s) deleted", (long long)id, x->name ? x->name : "");
    row_event(s, 0, 0, "DELETED", d);
    txn_emit(s, "experiment", json_pack("{sIsb}", "id", (json_int_t)id, "deleted", 1));
    rc = txn_end(s);   /* on failure the model is reloaded: the experiment stays */
    if (rc == 0 && (x = exp_find(s, id)) != NULL) {
        exp_forget(s, x);
        s->npurge++;
        s->dispatch_dirty = 1;
    }
end:
    actor_set(s, NULL);
    sched_unlock(s);
    return rc;
}

int sched_experiment_extend(sched *s, int64_t id, const json_t *body, json_t **out, hf_jerr *e)
{
    return sched_experiment_extend_as(s, id, body, NULL, out, e);
}

int sched_experiment_extend_as(sched *s, int64_t id, const json_t *body, const char *user, json_t **out,
                               hf_jerr *e)
{
    static const char *const keys[] = {"max_trials", "add_trials", NULL};
    int64_t mt = 0, add = 0;
    int rc;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "max_trials", 0, 1, 1000000, &mt, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "add_trials", 0, 1, 1000000, &add, e))) return rc;
    if (!mt && !add) return hf_jerr_set(e, "", "max_trials", "give max_trials (new total) or add_trials");
    sched_lock(s);
    actor_set(s, user);
    experiment *x = exp_find(s, id);
    if (!x) { rc = HF_ENOTFOUND; goto end; }
    if (x->state == E_CANCELED) {
        hf_jerr_set(e, "", NULL, "a CANCELED experiment cannot be extended");
        rc = HF_ESTATE;
        goto end;
    }
    int64_t nm = mt ? mt : x->max_trials + add;
    if (nm <= x->max_trials) {
        rc = hf_jerr_set(e, "", "max_trials", "must exceed the current max_trials (%lld)", (long long)x->max_trials);
        goto end;
    }
    int64_t old_max = x->max_trials;
    x->max_trials = nm;
    if ((rc = sched_searcher_rebuild(s, x))) { x->max_trials = old_max; goto end; }
    txn_begin(s);
    x->searcher_done = 0;
    if (x->state == E_COMPLETED || x->state == E_FAILED) exp_set_state(s, x, E_ACTIVE, "extended");
    else exp_save(s, x);
    char d[64];
    snprintf(d, sizeof d, "max_trials %lld", (long long)nm);
    row_event(s, x->id, 0, "EXTENDED", d);
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    rc = txn_end_summary(s, id, out);
end:
    actor_set(s, NULL);
    sched_unlock(s);
    return rc;
}

int sched_trial_kill(sched *s, int64_t id, json_t **out, hf_jerr *e)
{
    return sched_trial_kill_as(s, id, NULL, out, e);
}

int sched_trial_kill_as(sched *s, int64_t id, const char *user, json_t **out, hf_jerr *e)
{
    int rc = 0;
    sched_lock(s);
    actor_set(s, user);
    trial *t = trial_find(s, id);
    if (!t) { rc = HF_ENOTFOUND; goto end; }
    if (trial_state_terminal(t->state)) {
        hf_jerr_set(e, "", NULL, "trial is already %s", sched_trial_state_names[t->state]);
        rc = HF_ESTATE;
        goto end;
    }
    txn_begin(s);
    trial_request_kill(s, t, T_CANCELED, "user");
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    rc = txn_end(s);
    t = trial_find(s, id);
    if (rc == 0 && t) *out = trial_view(s, t);
end:
    actor_set(s, NULL);
    sched_unlock(s);
    return rc;
}

int sched_experiment_patch(sched *s, int64_t id, const json_t *body, const char *user, json_t **out, hf_jerr *e)
{
    json_t *tags = NULL;
    const char *desc = NULL;
    char *dcopy = NULL, d[96];
    int desc_set = 0, rc;
    sched_lock(s);
    actor_set(s, user);
    experiment *x = exp_find(s, id);
    if (!x) { rc = HF_ENOTFOUND; goto end; }
    if ((rc = expmeta_patch_experiment(body, x->tags, &tags, &desc_set, &desc, e))) goto end;
    if (desc && !(dcopy = strdup(desc))) { rc = HF_ENOMEM; goto end; }
    txn_begin(s);
    if (desc_set) { free(x->description); x->description = dcopy; dcopy = NULL; }
    if (tags) { json_decref(x->tags); x->tags = tags; tags = NULL; }
    row_exp_meta(s, x);
    snprintf(d, sizeof d, "%s%s%s", desc_set ? "description" : "", desc_set && json_object_size(body) > 1 ? ", " : "",
             json_object_size(body) > (size_t)desc_set ? "tags" : "");
    row_event(s, x->id, 0, "EDITED", d);
    txn_emit(s, "experiment", exp_summary(x));
    rc = txn_end_summary(s, id, out);
end:
    actor_set(s, NULL);
    sched_unlock(s);
    json_decref(tags);
    free(dcopy);
    return rc;
}

int sched_trial_patch(sched *s, int64_t id, const json_t *body, const char *user, json_t **out, hf_jerr *e)
{
    const char *notes = NULL;
    char *copy = NULL;
    int rc;
    if ((rc = expmeta_patch_trial(body, &notes, e))) return rc;
    if (notes && !(copy = strdup(notes))) return HF_ENOMEM;
    sched_lock(s);
    actor_set(s, user);
    trial *t = trial_find(s, id);
    if (!t) { rc = HF_ENOTFOUND; goto end; }
    txn_begin(s);
    free(t->notes);
    t->notes = copy;
    copy = NULL;
    row_trial_notes(s, t);
    row_event(s, t->exp->id, t->id, "NOTES", t->notes ? "notes edited" : "notes cleared");
    json_t *v = trial_view(s, t);
    if (v) json_object_set_new(v, "notes", t->notes ? json_string(t->notes) : json_null());
    txn_emit(s, "trial", trial_view(s, t));
    rc = txn_end(s);
    if (rc == 0) *out = v;
    else json_decref(v);
end:
    actor_set(s, NULL);
    sched_unlock(s);
    free(copy);
    return rc;
}

/* ---------- owners (docs/api.md "Roles") ---------- */

int sched_owner_of(sched *s, int64_t id, int is_trial, int64_t *exp_id, char *owner, size_t len)
{
    int rc = 0;
    sched_lock(s);
    const experiment *x = NULL;
    if (is_trial) {
        const trial *t = trial_find(s, id);
        x = t ? t->exp : NULL;
    } else {
        x = exp_find(s, id);
    }
    if (x) {
        *exp_id = x->id;
        snprintf(owner, len, "%s", x->submitted_by ? x->submitted_by : SCHED_OWNER_UNKNOWN);
    } else {
        rc = HF_ENOTFOUND;
    }
    sched_unlock(s);
    return rc;
}

int sched_refused_as(sched *s, int64_t exp_id, int64_t trial_id, const char *user, const char *detail)
{
    sched_lock(s);
    actor_set(s, user);
    txn_begin(s);
    row_event(s, exp_id, trial_id, "REFUSED", detail);
    int rc = txn_end(s);
    actor_set(s, NULL);
    sched_unlock(s);
    return rc;
}

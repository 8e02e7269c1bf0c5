/*
 * sched_actions.c — the public calls that change experiments and trials on
 * a user's request (sched.h): submit, pause / resume / cancel, extend, and
 * kill of one trial. Each validates first, then runs one transaction that
 * ends with a dispatch pass when capacity or work may have changed; a
 * request refused on the model's state (HF_ESTATE) rolls back whatever it
 * had started and changes nothing.
 */
#include "scheduler/sched_int.h"

#include "hf_err.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sched_experiment_submit(sched *s, const json_t *cfg_in, int64_t *id, hf_jerr *e)
{
    json_t *cfg = json_deep_copy(cfg_in);
    if (!cfg) return HF_ENOMEM;
    experiment *x = exp_build(cfg, e);   /* validates; cfg now owned by x */
    if (!x) return e->msg[0] ? HF_EINVAL : HF_ENOMEM;
    char *text = hf_json_dump(x->config);
    if (!text) { exp_free(x); return HF_ENOMEM; }
    pthread_mutex_lock(&s->lock);
    int rc = sched_grow((void **)&s->exps, &s->cexps, s->nexps + 1, sizeof *s->exps);
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
        row_event(s, nx->id, 0, "ACTIVE", "submitted");
        txn_emit(s, "experiment", exp_summary(nx));
        s->dispatch_dirty = 1;
        dispatch_pass(s);
    }
    rc = txn_end(s);   /* on failure the reload drops the unsaved experiment */
end:
    pthread_mutex_unlock(&s->lock);
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
    exp_set_state(s, x, E_ACTIVE, "resumed by user");
    for (size_t i = 0; i < x->ntrials; i++)
        if (x->trials[i]->state == T_PAUSED) trial_set_state(s, x->trials[i], T_QUEUED, "resume");
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    return 0;
}

static int exp_cancel(sched *s, experiment *x, hf_jerr *e)
{
    if (x->state == E_COMPLETED || x->state == E_CANCELED) {
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

static const struct {
    const char *name;
    int (*run)(sched *s, experiment *x, hf_jerr *e);
} exp_actions[] = {
    {"pause", exp_pause},
    {"resume", exp_resume},
    {"cancel", exp_cancel},
};

int sched_experiment_action(sched *s, int64_t id, const char *action, json_t **out, hf_jerr *e)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
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
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_experiment_extend(sched *s, int64_t id, const json_t *body, json_t **out, hf_jerr *e)
{
    static const char *const keys[] = {"max_trials", "add_trials", NULL};
    int64_t mt = 0, add = 0;
    int rc;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "max_trials", 0, 1, 1000000, &mt, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "add_trials", 0, 1, 1000000, &add, e))) return rc;
    if (!mt && !add) return hf_jerr_set(e, "", "max_trials", "give max_trials (new total) or add_trials");
    pthread_mutex_lock(&s->lock);
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
    txn_begin(s);
    x->max_trials = nm;
    x->searcher_done = 0;
    if (x->state == E_COMPLETED) exp_set_state(s, x, E_ACTIVE, "extended");
    else exp_save(s, x);
    char d[64];
    snprintf(d, sizeof d, "max_trials %lld", (long long)nm);
    row_event(s, x->id, 0, "EXTENDED", d);
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    rc = txn_end_summary(s, id, out);
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_trial_kill(sched *s, int64_t id, json_t **out, hf_jerr *e)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
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
    pthread_mutex_unlock(&s->lock);
    return rc;
}

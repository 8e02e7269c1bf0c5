/*
 * sched_report.c — objective and metric reports entering the scheduler
 * core (sched_int.h): a reported value updates the trial's latest and best
 * values, its objective (best or, with objective.aggregate "last", latest),
 * the experiment's best trial, and is shown to the searcher and the median
 * rule, whose STOP decision ends a running trial (trial_request_kill).
 *
 * Called from the heartbeat (sched_heartbeat.c) for every value of a
 * metric report, objective last; the rows of the points are written by
 * the caller, the trial's latest/best row once per transaction
 * (s->dirty). Above the state machine in the core's layers (it may stop
 * the trial), below the heartbeat.
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"
#include "scheduler/api/metrics.h"

#include <stdatomic.h>
#include <string.h>

/* Recompute x's best trial from its trials' objectives (ties: the lower
 * id). Needed when objective.aggregate is "last" and the best trial's
 * objective went down. */
static void exp_best_rescan(experiment *x)
{
    x->best_trial = 0;
    for (size_t i = 0; i < x->ntrials; i++) {
        const trial *u = x->trials[i];
        if (!u->has_obj || (x->best_trial && exp_norm(x, u->obj) <= x->best_norm)) continue;
        x->best_trial = u->id;
        x->best_norm = exp_norm(x, u->obj);
        x->best_raw = u->obj;
    }
}

void trial_report(sched *s, trial *t, const char *name, double v, double x_pos)
{
    HF_ASSERT(sched_lock_held(s));
    experiment *x = t->exp;
    json_object_set_new(t->latest, name, json_real(v));
    t->mver++;
    json_t *b = json_object_get(t->best, name);
    int is_obj = strcmp(name, x->spec.metric) == 0;
    int lower = metric_minimized(x, name);
    /* Other objectives and constraints: recorded by the searcher whatever
     * the trial's state, exactly as the replay feeds them. */
    exp_feed_slots(x, t->id, name, x_pos, v);
    if (!b || (lower ? v < json_number_value(b) : v > json_number_value(b)))
        json_object_set_new(t->best, name, json_real(v));
    if (!t->dirty_metrics && !sched_grow((void **)&s->dirty, &s->cdirty, s->ndirty + 1, sizeof *s->dirty)) {
        t->dirty_metrics = 1;
        s->dirty[s->ndirty++] = t;
    }
    if (!is_obj) return;
    if (x->waits_report) s->dispatch_dirty = 1;   /* the searcher may want to run something now */
    /* The trial's objective: its best report, or with objective.aggregate
     * "last" its latest (docs/guide.md "The objective"). */
    if (!t->has_obj || x->spec.agg_last || exp_norm(x, v) > exp_norm(x, t->obj)) {
        t->has_obj = 1;
        t->obj = v;
    }
    if (x->best_trial == t->id && x->spec.agg_last && exp_norm(x, v) < x->best_norm) {
        exp_best_rescan(x);   /* the best trial's last value got worse */
        txn_emit(s, "experiment", exp_summary(x));
    } else if (x->best_trial == 0 || exp_norm(x, v) > x->best_norm) {
        x->best_trial = t->id;
        x->best_norm = exp_norm(x, v);
        x->best_raw = v;
        txn_emit(s, "experiment", exp_summary(x));
    }
    /* The searcher and the median rule see every objective report, as the
     * replay after a restart feeds them (one that arrives while the trial
     * is already being stopped included); only a running trial's
     * decision is acted on. */
    int d = SEARCH_CONTINUE;
    const char *why = x->spec.searcher_name;
    if (x->srch->ops->on_report) d = x->srch->ops->on_report(x->srch, t->id, x_pos, exp_norm(x, v));
    if (x->med) {
        int dm = search_median_on_report(x->med, t->id, x_pos, exp_norm(x, v));
        if (d == SEARCH_CONTINUE && dm == SEARCH_STOP) {
            d = dm;
            why = "median";
        }
    }
    if (t->state != T_RUNNING || t->kill_state >= 0) return;
    if (d == SEARCH_STOP) {
        atomic_fetch_add(&metrics.searcher_stops, 1);
        trial_request_kill(s, t, T_STOPPED, why);
    }
}

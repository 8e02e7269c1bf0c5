/*
 * sched_feed.c — what the scheduler core tells an experiment's searcher
 * and median rule about its trials (sched_int.h): that a trial ended and
 * how (trial_done_notify), the reports of metrics other than the
 * objective (exp_feed_slots: other objectives, constraints, the cost and
 * time metrics), and whether a metric is minimized (metric_minimized).
 *
 * Shared by the live path (sched_state.c, sched_report.c) and the replay
 * after a restart (sched_load.c), which must feed the searchers exactly
 * as the live path did. A bottom layer of the core: these functions touch
 * one experiment and its searcher and call no other file of the core, so
 * the loader, below the state machine, can use them.
 */
#include "scheduler/core/sched_int.h"

#include "hf_metric.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

void trial_done_notify(trial *t, int st)
{
    experiment *x = t->exp;
    int outcome = st == T_COMPLETED ? SEARCH_COMPLETED : st == T_FAILED ? SEARCH_FAILED
                : st == T_STOPPED ? SEARCH_STOPPED : SEARCH_CANCELED;
    double v = t->has_obj ? exp_norm(x, t->obj) : NAN;
    if (x->srch && x->srch->ops->on_done) x->srch->ops->on_done(x->srch, t->id, outcome, v);
    if (x->med) search_median_on_done(x->med, t->id, outcome);
}

/* docs/guide.md "The objective": an objective uses its goal; any other
 * metric is minimized when its name (any case) contains loss, err,
 * perplexity, latency, time, second or _ms, unless it is a rate (contains
 * throughput, or ends in per_s, per_sec, per_second, per_ms or /s);
 * else maximized. */
int metric_minimized(const experiment *x, const char *name)
{
    for (int k = 0; k < x->spec.mo.n_obj; k++)
        if (!strcmp(name, x->spec.obj_metric[k])) return !x->spec.obj_goal_max[k];
    char low[HF_METRIC_NAME_MAX + 1];
    size_t i = 0;
    for (; name[i] && i < sizeof low - 1; i++) low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = '\0';
    static const char *const rates[] = {"per_s", "per_sec", "per_second", "per_ms", "/s", NULL};
    if (strstr(low, "throughput")) return 0;
    for (const char *const *r = rates; *r; r++)
        if (i >= strlen(*r) && !strcmp(low + i - strlen(*r), *r)) return 0;
    static const char *const mins[] = {"loss", "err", "perplexity", "latency", "time", "second", "_ms", NULL};
    for (const char *const *m = mins; *m; m++)
        if (strstr(low, *m)) return 1;
    return 0;
}

void exp_feed_slots(experiment *x, int64_t trial_id, const char *name, double x_pos, double v)
{
    const exp_spec *sp = &x->spec;
    if (!x->srch || !x->srch->ops->on_metric) return;
    for (int k = 1; k < sp->mo.n_obj; k++)
        if (!strcmp(name, sp->obj_metric[k]))
            x->srch->ops->on_metric(x->srch, trial_id, k, x_pos, sp->obj_goal_max[k] ? v : -v);
    for (int c = 0; c < sp->mo.n_con; c++)
        if (!strcmp(name, sp->con_metric[c])) x->srch->ops->on_metric(x->srch, trial_id, sp->mo.n_obj + c, x_pos, v);
    /* The cost may also be an objective or constrained: then it fills both. */
    if (sp->cost_metric && !strcmp(name, sp->cost_metric))
        x->srch->ops->on_metric(x->srch, trial_id, SEARCH_COST_SLOT(&sp->mo), x_pos, v);
    if (sp->time_metric && !strcmp(name, sp->time_metric))
        x->srch->ops->on_metric(x->srch, trial_id, SEARCH_TIME_SLOT(&sp->mo), x_pos, v);
}

/*
 * sched_pareto.c — the Pareto front of an experiment (GET
 * /api/v1/experiments/{id}/pareto, docs/search.md "Multi-objective search
 * and constraints"): its COMPLETED trials that are feasible and not
 * dominated by another feasible COMPLETED trial.
 *
 * A trial's point is the LAST reported value of each objective (what it
 * ended with, the same values the searchers rank), and it is feasible when
 * the last reported value of every constrained metric lies within its
 * bounds; a trial missing an objective is left out, one missing a
 * constrained metric is infeasible. Works for one objective too (the
 * front is then the best value, ties included). Read under the core lock
 * from the in-memory trials; nothing is stored.
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "scheduler/search/search_mo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The last value of metric name in t, or NAN. */
static double last_of(const trial *t, const char *name)
{
    const json_t *v = json_object_get(t->latest, name);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int trial_feasible(const exp_spec *sp, const trial *t)
{
    for (int c = 0; c < sp->mo.n_con; c++) {
        double v = last_of(t, sp->con_metric[c]);
        if (!(v >= sp->mo.con_min[c] && v <= sp->mo.con_max[c])) return 0;
    }
    return 1;
}

static json_t *bound(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The objectives and constraints as the API shows them. New reference. */
static json_t *pareto_header(const exp_spec *sp)
{
    json_t *objs = json_array(), *cons = json_array();
    for (int k = 0; k < sp->mo.n_obj; k++)
        json_array_append_new(objs, json_pack("{ssss}", "metric", sp->obj_metric[k], "goal",
                                              sp->obj_goal_max[k] ? "maximize" : "minimize"));
    for (int c = 0; c < sp->mo.n_con; c++)
        json_array_append_new(cons, json_pack("{sssoso}", "metric", sp->con_metric[c], "min",
                                              bound(sp->mo.con_min[c]), "max", bound(sp->mo.con_max[c])));
    return json_pack("{soso}", "objectives", objs, "constraints", cons);
}

typedef struct { double v; int64_t idx; size_t i; } front_pt;

/* Best first objective first, then creation order. */
static int cmp_front(const void *a, const void *b)
{
    const front_pt *p = a, *q = b;
    if (p->v != q->v) return p->v > q->v ? -1 : 1;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}

/* Fill out with x's front, best first objective first. Caller holds the core lock. RET 0 or HF_ENOMEM. */
static int pareto_build(const experiment *x, json_t *out)
{
    const exp_spec *sp = &x->spec;
    int m = sp->mo.n_obj, rc = HF_ENOMEM;
    size_t n = 0, ncomp = 0;
    const trial **tv = malloc((x->ntrials + 1) * sizeof *tv);
    double *y = malloc((x->ntrials + 1) * (size_t)m * sizeof *y);
    int *rank = malloc((x->ntrials + 1) * sizeof *rank);
    front_pt *fp = malloc((x->ntrials + 1) * sizeof *fp);
    json_t *arr = json_array();
    size_t nf = 0;
    if (!tv || !y || !rank || !fp || !arr) goto end;
    for (size_t i = 0; i < x->ntrials; i++) {
        const trial *t = x->trials[i];
        if (t->state != T_COMPLETED) continue;
        ncomp++;
        int ok = trial_feasible(sp, t);
        for (int k = 0; ok && k < m; k++) {
            double v = last_of(t, sp->obj_metric[k]);
            if (!isfinite(v)) ok = 0;
            y[n * m + k] = sp->obj_goal_max[k] ? v : -v;   /* higher is better */
        }
        if (ok) tv[n++] = t;
    }
    if ((rc = search_mo_nds(y, n, m, rank))) goto end;
    for (size_t i = 0; i < n; i++)
        if (rank[i] == 0) fp[nf++] = (front_pt){y[i * m], tv[i]->idx, i};
    qsort(fp, nf, sizeof *fp, cmp_front);
    for (size_t f = 0; f < nf; f++) {
        size_t i = fp[f].i;
        json_t *vals = json_array();
        for (int k = 0; k < m; k++) json_array_append_new(vals, json_real(sp->obj_goal_max[k] ? y[i * m + k]
                                                                                              : -y[i * m + k]));
        json_t *cons = json_object();
        for (int c = 0; c < sp->mo.n_con; c++)
            json_object_set_new(cons, sp->con_metric[c], json_real(last_of(tv[i], sp->con_metric[c])));
        json_array_append_new(arr, json_pack("{sIsIsOsoso}", "trial_id", (json_int_t)tv[i]->id, "idx",
                                             (json_int_t)tv[i]->idx, "hparams", tv[i]->hparams, "values", vals,
                                             "constraints", cons));
    }
    json_object_set_new(out, "completed", json_integer((json_int_t)ncomp));
    json_object_set_new(out, "feasible", json_integer((json_int_t)n));
    json_object_set(out, "trials", arr);
    rc = 0;
end:
    json_decref(arr);
    free(tv); free(y); free(rank); free(fp);
    return rc;
}

int sched_experiment_pareto(sched *s, int64_t id, json_t **out)
{
    int rc = HF_ENOTFOUND;
    *out = NULL;
    sched_lock(s);
    experiment *x = exp_find(s, id);
    if (x) {
        json_t *o = pareto_header(&x->spec);
        rc = o ? pareto_build(x, o) : HF_ENOMEM;
        if (rc == 0) {
            json_object_set_new(o, "experiment_id", json_integer((json_int_t)id));
            *out = o;
        } else {
            json_decref(o);
        }
    }
    sched_unlock(s);
    return rc;
}

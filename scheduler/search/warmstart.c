/*
 * warmstart.c — validation of an experiment file's "warm_start" and the
 * replay of its history into a searcher (see warmstart.h).
 *
 * Invariant: a configuration accepted here is one the searcher could have
 * proposed itself (same keys, values inside the space), so enqueued trials
 * and observed history never carry a value a searcher's encoding
 * (search_space_to_unit) cannot place.
 */
#include "scheduler/search/warmstart.h"

#include "hf_err.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const warm_keys[] = {"experiments", "enqueue", NULL};

/* Is v inside the domain of p? RET NULL when it is, else why not. */
static const char *param_misfit(const space_param *p, const json_t *v, char *why, size_t len)
{
    switch (p->kind) {
    case SPACE_UNIFORM:
    case SPACE_LOG:
    case SPACE_INT: {
        if (!json_is_number(v)) return "must be a number";
        double x = json_number_value(v);
        if (p->kind == SPACE_INT && !json_is_integer(v)) return "must be an integer";
        if (!(x >= p->min && x <= p->max)) {
            snprintf(why, len, "%g is outside the space [%g, %g]", x, p->min, p->max);
            return why;
        }
        return NULL;
    }
    case SPACE_CATEGORICAL: {
        size_t i;
        json_t *c;
        json_array_foreach(p->values, i, c) if (json_equal(c, v)) return NULL;
        return "is not one of the parameter's values";
    }
    default:
        return json_equal(p->values, v) ? NULL : "must equal the parameter's constant value";
    }
}

int warm_point_check(const search_space *sp, const json_t *hp, const char *path, hf_jerr *e)
{
    char fp[300], why[160];
    if (!json_is_object(hp)) return hf_jerr_set(e, path, NULL, "must be an object of parameter values");
    for (size_t i = 0; i < sp->n; i++) {
        const space_param *p = &sp->p[i];
        json_t *v = json_object_get(hp, p->name);
        hf_jpath(fp, sizeof fp, path, p->name);
        int active = search_space_active(sp, i, hp);
        if (!active && v) return hf_jerr_set(e, fp, NULL, "not active: its condition is not met by this point");
        if (!active) continue;
        if (!v) return hf_jerr_set(e, path, NULL, "missing parameter \"%s\"", p->name);
        const char *m = param_misfit(p, v, why, sizeof why);
        if (m) return hf_jerr_set(e, fp, NULL, "%s", m);
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)hp, k, v) {
        if (search_space_find(sp, k) < 0) {
            hf_jpath(fp, sizeof fp, path, k);
            return hf_jerr_set(e, fp, NULL, "not a parameter of this experiment's hyperparameters");
        }
    }
    return 0;
}

/* Fill in the const parameters an enqueued point left out (active ones). */
static void fill_consts(const search_space *sp, json_t *hp)
{
    for (size_t i = 0; i < sp->n; i++) {
        const space_param *p = &sp->p[i];
        if (p->kind == SPACE_CONST && !json_object_get(hp, p->name) && search_space_active(sp, i, hp))
            json_object_set(hp, p->name, p->values);
    }
}

int warm_parse(json_t *cfg, const search_space *sp, int64_t *n_enqueue, hf_jerr *e)
{
    json_t *w = NULL, *ids = NULL, *enq = NULL;
    char path[64];
    int rc;
    *n_enqueue = 0;
    if ((rc = hf_json_get_object(cfg, "", "warm_start", 0, &w, e)) || !w) return rc;
    if ((rc = hf_json_only_keys(w, "warm_start", warm_keys, e))) return rc;
    if ((rc = hf_json_get_array(w, "warm_start", "experiments", 0, WARM_MAX_EXPERIMENTS, &ids, e))) return rc;
    if ((rc = hf_json_get_array(w, "warm_start", "enqueue", 0, WARM_MAX_ENQUEUE, &enq, e))) return rc;
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *v = json_array_get(ids, i);
        hf_jpath_index(path, sizeof path, "warm_start.experiments", i);
        if (!json_is_integer(v) || json_integer_value(v) <= 0)
            return hf_jerr_set(e, path, NULL, "must be an experiment id (a positive integer)");
        for (size_t j = 0; j < i; j++)
            if (json_equal(json_array_get(ids, j), v)) return hf_jerr_set(e, path, NULL, "listed twice");
    }
    for (size_t i = 0; i < json_array_size(enq); i++) {
        json_t *hp = json_array_get(enq, i);
        hf_jpath_index(path, sizeof path, "warm_start.enqueue", i);
        if (json_is_object(hp)) fill_consts(sp, hp);
        if ((rc = warm_point_check(sp, hp, path, e))) return rc;
    }
    *n_enqueue = (int64_t)json_array_size(enq);
    return 0;
}

json_t *warm_experiments(const json_t *cfg)
{
    return json_object_get(json_object_get(cfg, "warm_start"), "experiments");
}

json_t *warm_enqueue(const json_t *cfg)
{
    return json_object_get(json_object_get(cfg, "warm_start"), "enqueue");
}

size_t warm_observe(searcher *s, const json_t *history, int goal_max)
{
    size_t n = json_array_size(history), k = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *h = json_array_get(history, i);
        const json_t *hp = json_object_get(h, "hparams");
        double v = json_number_value(json_object_get(h, "value"));
        if (!json_is_object(hp) || !isfinite(v)) continue;
        search_observe(s, (int64_t)i - (int64_t)n, hp, json_integer_value(json_object_get(h, "level")),
                       goal_max ? v : -v);
        k++;
    }
    return k;
}

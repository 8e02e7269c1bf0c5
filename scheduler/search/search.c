/*
 * search.c — the searcher registry and the helpers every algorithm shares
 * (config reading, validation of the "searcher" object as a whole).
 *
 * Adding an algorithm: write search_<name>.c defining a const searcher_ops
 * search_<name>_ops, and add it to the table below. Only algorithms whose
 * file exists are listed, so the scheduler library always links.
 */
#include "search.h"
#include "search_space.h"
#include "hf_err.h"
#include "hf_metric.h"

#include <math.h>
#include <string.h>

extern const searcher_ops search_grid_ops;
extern const searcher_ops search_random_ops;
extern const searcher_ops search_tpe_ops;
extern const searcher_ops search_asha_ops;
extern const searcher_ops search_pbt_ops;

static const searcher_ops *const registry[] = {
    &search_grid_ops,
    &search_random_ops,
    &search_tpe_ops,
    &search_asha_ops,
    &search_pbt_ops,
};
#define N_REG (sizeof registry / sizeof registry[0])

const searcher_ops *search_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < N_REG; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

const char *const *search_names(void)
{
    static const char *names[N_REG + 1];
    for (size_t i = 0; i < N_REG; i++) names[i] = registry[i]->name;
    names[N_REG] = NULL;
    return names;
}

void search_observe(searcher *s, int64_t index, const json_t *hparams, int64_t level, double value)
{
    if (s && s->ops && s->ops->observe) s->ops->observe(s, index, hparams, level, value);
}

void search_cost_add(search_cost *c, double v)
{
    if (!isfinite(v) || v <= 0) return;
    c->sum += v;
    c->n++;
}

double search_cost_mean(const search_cost *c)
{
    return c->n > 0 ? c->sum / (double)c->n : NAN;
}

/* search.h. */
double search_cost_cooled(int cooling, int64_t n_created, int64_t n_startup, int64_t max_trials)
{
    if (!cooling) return 0.0;
    if (max_trials <= n_startup) return 1.0;
    double f = (double)(n_created - n_startup) / (double)(max_trials - n_startup);
    return f < 0 ? 0.0 : f > 1 ? 1.0 : f;
}

int64_t search_cfg_int(const json_t *cfg, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_integer(v)) return json_integer_value(v);
    if (json_is_real(v)) return (int64_t)json_real_value(v);
    return dflt;
}

double search_cfg_num(const json_t *cfg, const char *key, double dflt)
{
    const json_t *v = json_object_get(cfg, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

int search_cfg_only_keys(const json_t *cfg, const char *const *own, hf_jerr *e)
{
    static const char *const common[] = {SEARCH_COMMON_KEYS};
    const char *allowed[64];
    size_t n = 0;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) allowed[n++] = common[i];
    for (size_t i = 0; own && own[i] && n < 63; i++) allowed[n++] = own[i];
    allowed[n] = NULL;
    return hf_json_only_keys(cfg, "searcher", allowed, e);
}

int search_validate(const json_t *cfg, const struct search_space *sp, hf_jerr *e)
{
    int rc;
    const char *name = NULL;
    int64_t x;
    json_t *ms = NULL;

    if (!json_is_object(cfg)) return hf_jerr_set(e, "searcher", NULL, "must be an object");
    if ((rc = hf_json_get_string(cfg, "searcher", "name", 1, 32, &name, e))) return rc;
    const searcher_ops *ops = search_find(name);
    if (!ops) {
        char list[256] = "";
        for (const char *const *n = search_names(); *n; n++) {
            if (list[0]) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, *n, sizeof list - strlen(list) - 1);
        }
        return hf_jerr_set(e, "searcher", "name", "unknown searcher \"%s\": one of %s", name, list);
    }
    if ((rc = hf_json_get_int(cfg, "searcher", "max_trials", 0, 1, 1000000, &x, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "max_concurrent_trials", 0, 1, 100000, &x, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "seed", 0, 0, INT64_MAX, &x, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "max_epochs", 0, 1, 1000000, &x, e))) return rc;
    if ((rc = hf_json_get_object(cfg, "searcher", "median_stopping", 0, &ms, e))) return rc;
    if (ms && (rc = search_median_validate(ms, e))) return rc;
    if (json_object_get(cfg, "cost_metric")) {
        /* Checked here for every searcher, so the ones without a model get
         * an error naming the field rather than "unknown field". asha
         * checks its sampler itself. */
        const char *cm = NULL;
        if (strcmp(name, "tpe") && strcmp(name, "asha"))
            return hf_jerr_set(e, "searcher", "cost_metric", "only with tpe, or asha with \"sampler\": \"tpe\" "
                               "(%s fits no model to weigh the cost against)", name);
        if ((rc = hf_json_get_string(cfg, "searcher", "cost_metric", 0, HF_METRIC_NAME_MAX, &cm, e))) return rc;
        if (!hf_metric_name_ok(cm))
            return hf_jerr_set(e, "searcher", "cost_metric", "not a valid metric name ([A-Za-z0-9_.:/-], 1..64 bytes)");
    }
    if (json_object_get(cfg, "time_metric") && strcmp(name, "asha"))
        return hf_jerr_set(e, "searcher", "time_metric", "only with asha (rungs in seconds of training; %s has "
                           "no rungs)", name);
    if (json_object_get(cfg, "cost_cooling")) {
        int b;
        if ((rc = hf_json_get_bool(cfg, "searcher", "cost_cooling", 0, &b, e))) return rc;
        if (b && !json_object_get(cfg, "cost_metric"))
            return hf_jerr_set(e, "searcher", "cost_cooling", "needs \"cost_metric\" (there is no cost to cool)");
        if (b && search_cfg_int(cfg, "max_trials", 0) <= 0)
            return hf_jerr_set(e, "searcher", "cost_cooling", "needs \"max_trials\": the cost's weight falls from 1 "
                               "to 0 as the trials are created");
    }
    return ops->validate ? ops->validate(cfg, sp, e) : 0;
}

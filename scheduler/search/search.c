/*
 * search.c — the searcher registry and the validation of the "searcher"
 * object as a whole. The helpers every algorithm shares (config reading,
 * the cost mean) live one layer down in search_cfg.c, so the registry
 * calls the algorithms and they never call back into it.
 *
 * Adding an algorithm: write search_<name>.c defining a const searcher_ops
 * search_<name>_ops, and add it to the table below. Only algorithms whose
 * file exists are listed, so the scheduler library always links.
 */
#include "search.h"
#include "search_space.h"
#include "hf_err.h"
#include "hf_metric.h"

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

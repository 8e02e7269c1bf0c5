/*
 * search_cfg.c — the small helpers every search algorithm shares: reading
 * optional members of the "searcher" object, checking that it holds only
 * known keys, and the running cost mean of cost-aware proposals
 * (docs/search.md "Cost-aware proposals").
 *
 * The lowest layer of scheduler/search: it calls nothing else of the room,
 * so the algorithms (search_<name>.c, search_median.c) and the registry
 * (search.c) that lists them all call down into it and never around a
 * loop. Pure functions, no state.
 */
#include "search.h"
#include "hf_err.h"

#include <math.h>

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

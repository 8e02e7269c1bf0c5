/*
 * search_grid.c — exhaustive grid search: trial n is grid point n
 * (search_space_grid_point), in nested-loop order with the first parameter
 * varying slowest. Numeric axes have "count" points (default 5; an integer
 * range of at most 10 values is enumerated fully); categorical axes all
 * their values; conditional parameters appear only under the parent values
 * that enable them, so no point is repeated. Done after the last point or
 * max_trials, whichever comes first. Stateless, so replay is trivial.
 */
#include "search.h"
#include "search_space.h"
#include "hf_err.h"

#include <stdlib.h>

#define GRID_MAX_POINTS 1000000

typedef struct grid_searcher {
    searcher             base;
    const search_space  *sp;
    uint64_t             size;
    int64_t              max_trials;
} grid_searcher;

static int grid_validate(const json_t *cfg, const search_space *sp, hf_jerr *e)
{
    int rc = search_cfg_only_keys(cfg, NULL, e);
    if (rc) return rc;
    if (sp && search_space_grid_size(sp, GRID_MAX_POINTS) == 0)
        return hf_jerr_set(e, "searcher", "name",
                           "the grid of \"hyperparameters\" has more than %d points; lower the \"count\"s",
                           GRID_MAX_POINTS);
    return 0;
}

static searcher *grid_create(const json_t *cfg, const search_space *sp, int goal_maximize,
                             uint64_t seed)
{
    (void)goal_maximize; (void)seed;
    grid_searcher *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->sp = sp;
    s->size = search_space_grid_size(sp, GRID_MAX_POINTS);
    s->max_trials = search_cfg_int(cfg, "max_trials", 0);
    return &s->base;
}

static void grid_destroy(searcher *base)
{
    free(base);
}

static int grid_next(searcher *base, int64_t n_created, int64_t n_active, search_new *out)
{
    grid_searcher *s = (grid_searcher *)base;
    (void)n_active;
    if (n_created < 0 || (uint64_t)n_created >= s->size) return SEARCH_DONE;
    if (s->max_trials > 0 && n_created >= s->max_trials) return SEARCH_DONE;
    out->hparams = search_space_grid_point(s->sp, (uint64_t)n_created);
    if (!out->hparams) return SEARCH_WAIT;
    out->budget = 0;
    out->parent_trial = 0;
    out->resume_trial = 0;
    return SEARCH_CREATE;
}

static void grid_on_created(searcher *s, int64_t trial_id, int64_t index, const json_t *hp,
                            int64_t budget, int64_t parent)
{
    (void)s; (void)trial_id; (void)index; (void)hp; (void)budget; (void)parent;
}

static int grid_on_report(searcher *s, int64_t trial_id, double epoch, double value)
{
    (void)s; (void)trial_id; (void)epoch; (void)value;
    return SEARCH_CONTINUE;
}

static void grid_on_done(searcher *s, int64_t trial_id, int outcome, double value)
{
    (void)s; (void)trial_id; (void)outcome; (void)value;
}

static json_t *grid_describe(searcher *base)
{
    grid_searcher *s = (grid_searcher *)base;
    return json_pack("{s:s, s:I}", "algorithm", "grid", "points", (json_int_t)s->size);
}

const searcher_ops search_grid_ops = {
    .name = "grid",
    .validate = grid_validate,
    .create = grid_create,
    .destroy = grid_destroy,
    .next = grid_next,
    .on_created = grid_on_created,
    .on_report = grid_on_report,
    .on_done = grid_on_done,
    .describe = grid_describe,
};

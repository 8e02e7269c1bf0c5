/*
 * search_random.c — random search: trial n gets a point drawn from the
 * priors with an RNG seeded from (seed, n). Nothing else is kept, so a
 * replay after a restart changes nothing and any trial can be reproduced
 * from the experiment's seed and its index alone.
 */
#include "search.h"
#include "search_space.h"
#include "hf_err.h"

#include <stdlib.h>

typedef struct random_searcher {
    searcher             base;
    const search_space  *sp;
    uint64_t             seed;
    int64_t              max_trials;   /* 0 = until the dispatcher stops asking */
} random_searcher;

static int random_validate(const json_t *cfg, const search_space *sp, hf_jerr *e)
{
    (void)sp;
    return search_cfg_only_keys(cfg, NULL, e);
}

static searcher *random_create(const json_t *cfg, const search_space *sp, int goal_maximize,
                               uint64_t seed)
{
    (void)goal_maximize;
    random_searcher *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->sp = sp;
    s->seed = seed;
    s->max_trials = search_cfg_int(cfg, "max_trials", 0);
    return &s->base;
}

static void random_destroy(searcher *base)
{
    free(base);
}

static int random_next(searcher *base, int64_t n_created, int64_t n_active, search_new *out)
{
    random_searcher *s = (random_searcher *)base;
    (void)n_active;
    if (s->max_trials > 0 && n_created >= s->max_trials) return SEARCH_DONE;
    uint64_t rng = search_rng_derive(s->seed, (uint64_t)n_created);
    out->hparams = search_space_sample(s->sp, &rng);
    if (!out->hparams) return SEARCH_WAIT;       /* OOM: try again later */
    out->budget = 0;
    out->parent_trial = 0;
    out->resume_trial = 0;
    return SEARCH_CREATE;
}

static void random_on_created(searcher *s, int64_t trial_id, int64_t index, const json_t *hp,
                              int64_t budget, int64_t parent)
{
    (void)s; (void)trial_id; (void)index; (void)hp; (void)budget; (void)parent;
}

static int random_on_report(searcher *s, int64_t trial_id, double epoch, double value)
{
    (void)s; (void)trial_id; (void)epoch; (void)value;
    return SEARCH_CONTINUE;
}

static void random_on_done(searcher *s, int64_t trial_id, int outcome, double value)
{
    (void)s; (void)trial_id; (void)outcome; (void)value;
}

const searcher_ops search_random_ops = {
    .name = "random",
    .validate = random_validate,
    .create = random_create,
    .destroy = random_destroy,
    .next = random_next,
    .on_created = random_on_created,
    .on_report = random_on_report,
    .on_done = random_on_done,
    .describe = NULL,
};

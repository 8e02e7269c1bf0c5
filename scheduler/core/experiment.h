/*
 * experiment.h — validation of an experiment file (docs/design.md §5) before
 * anything is stored. experiment_parse checks every field (types, ranges,
 * min < max through search_space_parse, a known searcher and its own
 * fields through search_validate, a non-empty argv of strings, resources,
 * max_restarts) and fills an exp_spec the dispatcher uses. On rejection the
 * hf_jerr names the field path ("trial.command[2]") and the reason; the
 * API answers 400 {"error", "field"}.
 */
#ifndef HF_EXPERIMENT_H
#define HF_EXPERIMENT_H

#include "hf_json.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_mo.h"
#include "scheduler/search/search_space.h"

#include <stdint.h>

#define EXP_MAX_NAME        128
#define EXP_MAX_ARGV        256
#define EXP_MAX_ARG_LEN     4096
#define EXP_MAX_ENV         64
#define EXP_MAX_WORKERS     256
#define EXP_MAX_SLOTS       64
#define EXP_MAX_KEEP        100000   /* checkpoint_policy counts */
#define EXP_DEFAULT_KEEP_LATEST 1    /* checkpoint_policy defaults (Determined's) */
#define EXP_DEFAULT_KEEP_BEST   1
#define EXP_DEFAULT_MAX_FAILURES 20  /* trial.max_failures (docs/scheduler.md "End states") */
#define EXP_MAX_DESCRIPTION 16384    /* bytes of Markdown (also through PATCH) */

typedef struct exp_spec {
    /* Borrowed from the config object the spec was parsed from. */
    const char *name;
    const char *metric;          /* objective.metric (the first one of a list) */
    int         goal_max;        /* objective.goal == "maximize" */
    int         agg_last;        /* objective.aggregate == "last": a trial's objective is its last
                                    report, not its best (docs/guide.md "The objective") */
    /* "objective" as a list and "constraints" (docs/search.md): mo.n_obj
     * objectives, obj_metric[0] == metric; mo.n_con constrained metrics. */
    search_objectives mo;
    const char *obj_metric[SEARCH_MO_MAX_OBJ];
    int         obj_goal_max[SEARCH_MO_MAX_OBJ];
    const char *con_metric[SEARCH_MO_MAX_CON];
    const char *cost_metric;     /* searcher.cost_metric (tpe, asha + tpe sampler), NULL when absent:
                                    fed to the searcher as slot SEARCH_COST_SLOT(&mo) */
    int         prompt_reports;  /* the searcher or the median rule may stop a trial on any report:
                                    assignments name the objective as "prompt_metric" (docs/protocol.md) */
    const char *time_metric;     /* searcher.time_metric (asha: rungs in its summed reports), NULL when
                                    absent: fed to the searcher as slot SEARCH_TIME_SLOT(&mo) */
    const char *searcher_name;
    const searcher_ops *ops;
    json_t     *searcher_cfg;
    json_t     *median_cfg;      /* NULL when absent */
    json_t     *argv;            /* array of strings */
    json_t     *env;             /* object string->string, NULL when absent */
    int64_t     max_trials;
    int64_t     max_concurrent;
    int64_t     max_epochs;      /* 0 when absent */
    uint64_t    seed;
    int64_t     workers;
    int64_t     slots_per_worker;
    int64_t     max_restarts;
    int64_t     max_failures;    /* trial.max_failures: failed trials in a row that end it, 0 = off */
    int64_t     priority;        /* higher is placed first */
    double      weight;          /* fair-share weight among experiments of equal priority */
    int64_t     grace_ms;        /* SIGTERM grace before SIGKILL */
    int64_t     keep_latest;     /* checkpoint_policy.keep_latest (default 1) */
    int64_t     keep_best_trials;/* checkpoint_policy.keep_best_trials (default 1) */
    const char *context;         /* SHA-256 of the code context, NULL when absent */
    int         launcher_mpirun; /* trial.launcher == "mpirun": rank 0 runs the command
                                    with a host file of the placement, other ranks hold */
    int64_t     n_enqueue;       /* warm_start.enqueue: the first n_enqueue trials run these */
    /* Owned. */
    search_space *sp;
} exp_spec;

/* Validate cfg (borrowed; must outlive spec) and fill spec. When cfg has
 * no searcher.seed one is chosen and written into cfg, so a replay after a
 * restart draws the same trials. RET 0, or HF_EINVAL with e filled. */
int  experiment_parse(json_t *cfg, exp_spec *spec, hf_jerr *e);
void experiment_spec_free(exp_spec *spec);

#endif

/*
 * warmstart.h — an experiment file's "warm_start" object (docs/search.md,
 * "Warm start"): earlier experiments whose finished trials the new
 * searcher observes as history (Optuna's add_trials), and configurations
 * run before anything the searcher proposes (Optuna's enqueue_trial).
 *
 *   "warm_start": {
 *     "experiments": [3, 7],                      ids of earlier experiments
 *     "enqueue": [{"lr": 0.01, "optimizer": "adam"}, ...]
 *   }
 *
 * This module is pure: it validates the object against the new search
 * space (warm_parse, called by experiment_parse), checks one point
 * against a space (warm_point_check), and feeds a stored history snapshot
 * into a searcher (warm_observe). Which experiments exist and which of
 * their trials fit is the core's business (sched_actions.c), which takes
 * the snapshot once, at submission, and stores it with the experiment, so
 * a restart replays the same history whatever happened to the sources.
 */
#ifndef HF_WARMSTART_H
#define HF_WARMSTART_H

#include "hf_json.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"

#define WARM_MAX_EXPERIMENTS 64      /* ids in warm_start.experiments */
#define WARM_MAX_ENQUEUE     1000    /* configurations in warm_start.enqueue */
#define WARM_MAX_HISTORY     20000   /* trials observed (the newest kept) */

/* Validate cfg's "warm_start" (absent is fine) against sp: the shape, the
 * ids (positive, distinct), and every enqueued configuration
 * (warm_point_check; a "const" parameter left out is filled in, so cfg is
 * changed). *n_enqueue = the number of configurations (0 when none).
 * RET 0 or HF_EINVAL with e naming the field ("warm_start.enqueue[1].lr"). */
int warm_parse(json_t *cfg, const search_space *sp, int64_t *n_enqueue, hf_jerr *e);

/* Does the point hp fit sp? Every parameter active for hp's values is
 * present and inside its domain (min..max, an integer for "int", one of
 * the values of a categorical, the value of a const); no other key is
 * present. path names hp in the error. RET 0 or HF_EINVAL. */
int warm_point_check(const search_space *sp, const json_t *hp, const char *path, hf_jerr *e);

/* warm_start.experiments / warm_start.enqueue of a validated cfg (borrowed),
 * NULL when absent. */
json_t *warm_experiments(const json_t *cfg);
json_t *warm_enqueue(const json_t *cfg);

/* Feed a history snapshot into s: history is an array of {"hparams",
 * "value" (raw, in the new experiment's objective metric), "level"}; each
 * goes to the searcher's observe (search.h) with value oriented higher is
 * better (negated unless goal_max) and indexes -n..-1 (older than every
 * trial of the experiment). RET the number observed. */
size_t warm_observe(searcher *s, const json_t *history, int goal_max);

#endif

/*
 * experiment.c — complete validation of an experiment file (see
 * experiment.h). The order of checks follows the file, so the first
 * offending field in reading order is the one reported.
 */
#include "scheduler/core/experiment.h"

#include "hf_trial.h"
#include "hf_err.h"
#include "hf_metric.h"
#include "hf_time.h"
#include "scheduler/search/warmstart.h"
#include "scheduler/store/ckstore.h"

#include <ctype.h>
#include <string.h>
#include <unistd.h>

static const char *const top_keys[] = {"name", "description", "objective", "searcher", "hyperparameters",
                                       "trial", "priority", "weight", "tags", "checkpoint_policy", "warm_start",
                                       "context", "constraints", NULL};
static const char *const trial_keys[] = {"command", "resources", "distributed", "max_restarts", "max_failures",
                                         "env", "grace_period_ms", "launcher", NULL};
static const char *const resources_keys[] = {"workers", "slots_per_worker", NULL};
static const char *const distributed_keys[] = {"mode", "backend", "ps", "staleness", NULL};
static const char *const policy_keys[] = {"keep_latest", "keep_best_trials", NULL};

static int env_name_ok(const char *s)
{
    if (!*s || strlen(s) > 128 || !(isupper((unsigned char)*s) || *s == '_')) return 0;
    for (; *s; s++)
        if (!(isupper((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return 0;
    return 1;
}

static int one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

static int parse_trial(json_t *tr, exp_spec *spec, hf_jerr *e)
{
    int rc;
    json_t *res = NULL, *dist = NULL;
    if ((rc = hf_json_only_keys(tr, "trial", trial_keys, e))) return rc;
    if ((rc = hf_json_get_array(tr, "trial", "command", 1, EXP_MAX_ARGV, &spec->argv, e))) return rc;
    if (json_array_size(spec->argv) == 0)
        return hf_jerr_set(e, "trial", "command", "must be a non-empty array of strings (argv)");
    for (size_t i = 0; i < json_array_size(spec->argv); i++) {
        json_t *a = json_array_get(spec->argv, i);
        char path[64];
        hf_jpath_index(path, sizeof path, "trial.command", i);
        if (!json_is_string(a)) return hf_jerr_set(e, path, NULL, "must be a string");
        size_t n = json_string_length(a);
        if (n > EXP_MAX_ARG_LEN) return hf_jerr_set(e, path, NULL, "longer than %d bytes", EXP_MAX_ARG_LEN);
        if (memchr(json_string_value(a), '\0', n)) return hf_jerr_set(e, path, NULL, "contains a NUL byte");
        if (i == 0 && n == 0) return hf_jerr_set(e, path, NULL, "the program name must not be empty");
    }
    if ((rc = hf_json_get_object(tr, "trial", "resources", 0, &res, e))) return rc;
    if (res) {
        if ((rc = hf_json_only_keys(res, "trial.resources", resources_keys, e))) return rc;
        if ((rc = hf_json_get_int(res, "trial.resources", "workers", 0, 1, EXP_MAX_WORKERS, &spec->workers, e)))
            return rc;
        if ((rc = hf_json_get_int(res, "trial.resources", "slots_per_worker", 0, 1, EXP_MAX_SLOTS,
                                  &spec->slots_per_worker, e)))
            return rc;
    }
    if ((rc = hf_json_get_object(tr, "trial", "distributed", 0, &dist, e))) return rc;
    if (dist) {
        static const char *const modes[] = {"sync", "async", "pipeline", NULL};
        static const char *const backends[] = {"tcp", "mpi", "nccl", NULL};
        const char *s = NULL;
        int64_t x;
        if ((rc = hf_json_only_keys(dist, "trial.distributed", distributed_keys, e))) return rc;
        if ((rc = hf_json_get_string(dist, "trial.distributed", "mode", 0, 16, &s, e))) return rc;
        if (s && !one_of(s, modes))
            return hf_jerr_set(e, "trial.distributed", "mode", "must be one of sync, async, pipeline");
        s = NULL;
        if ((rc = hf_json_get_string(dist, "trial.distributed", "backend", 0, 16, &s, e))) return rc;
        if (s && !one_of(s, backends))
            return hf_jerr_set(e, "trial.distributed", "backend", "must be one of tcp, mpi, nccl");
        if ((rc = hf_json_get_int(dist, "trial.distributed", "ps", 0, 1, 64, &x, e))) return rc;
        if ((rc = hf_json_get_int(dist, "trial.distributed", "staleness", 0, 0, 1000, &x, e))) return rc;
    }
    if (json_object_get(tr, "launcher")) {
        const char *l = NULL;
        if ((rc = hf_json_get_string(tr, "trial", "launcher", 1, 16, &l, e))) return rc;
        if (strcmp(l, "mpirun"))
            return hf_jerr_set(e, "trial", "launcher", "must be \"mpirun\" (or absent), got \"%s\"", l);
        spec->launcher_mpirun = 1;
    }
    if ((rc = hf_json_get_int(tr, "trial", "max_restarts", 0, 0, 100, &spec->max_restarts, e))) return rc;
    /* Trials failed for good in a row that end the experiment FAILED
     * (docs/scheduler.md "End states"); 0 = never. */
    spec->max_failures = EXP_DEFAULT_MAX_FAILURES;
    if ((rc = hf_json_get_int(tr, "trial", "max_failures", 0, 0, 1000000, &spec->max_failures, e))) return rc;
    if ((rc = hf_json_get_int(tr, "trial", "grace_period_ms", 0, 0, 3600000, &spec->grace_ms, e))) return rc;
    if ((rc = hf_json_get_object(tr, "trial", "env", 0, &spec->env, e))) return rc;
    if (spec->env) {
        const char *k;
        json_t *v;
        if (json_object_size(spec->env) > EXP_MAX_ENV)
            return hf_jerr_set(e, "trial", "env", "more than %d variables", EXP_MAX_ENV);
        json_object_foreach(spec->env, k, v) {
            char path[200];
            hf_jpath(path, sizeof path, "trial.env", k);
            if (!env_name_ok(k)) return hf_jerr_set(e, path, NULL, "variable names are [A-Z_][A-Z0-9_]*");
            if (hf_trial_env_reserved(k)) return hf_jerr_set(e, path, NULL, "%s", hf_trial_env_reserved(k));
            if (!json_is_string(v)) return hf_jerr_set(e, path, NULL, "must be a string");
            if (json_string_length(v) > EXP_MAX_ARG_LEN)
                return hf_jerr_set(e, path, NULL, "longer than %d bytes", EXP_MAX_ARG_LEN);
        }
    }
    return HF_OK;
}

/* checkpoint_policy (docs/scheduler.md, "Checkpoint retention"). */
static int parse_policy(json_t *cfg, exp_spec *spec, hf_jerr *e)
{
    json_t *pol = NULL;
    int rc;
    if ((rc = hf_json_get_object(cfg, "", "checkpoint_policy", 0, &pol, e))) return rc;
    if (!pol) return HF_OK;
    if ((rc = hf_json_only_keys(pol, "checkpoint_policy", policy_keys, e))) return rc;
    if ((rc = hf_json_get_int(pol, "checkpoint_policy", "keep_latest", 0, 0, EXP_MAX_KEEP, &spec->keep_latest, e)))
        return rc;
    return hf_json_get_int(pol, "checkpoint_policy", "keep_best_trials", 0, 0, EXP_MAX_KEEP, &spec->keep_best_trials,
                           e);
}

/* Several objectives or constraints with a searcher that ranks by one
 * objective only. RET 0 or HF_EINVAL with e filled. */
static int mo_searcher_check(const exp_spec *spec, hf_jerr *e)
{
    if (!strcmp(spec->searcher_name, "pbt") && (spec->mo.n_obj > 1 || spec->mo.n_con > 0))
        return hf_jerr_set(e, "searcher", "name", "pbt ranks its population by one objective without "
                           "constraints: a list objective or \"constraints\" need grid, random, tpe or asha");
    if (spec->median_cfg && spec->mo.n_obj > 1)
        return hf_jerr_set(e, "searcher", "median_stopping", "the median rule ranks by one objective: "
                           "not with a list objective (asha ranks rungs by non-dominated sorting)");
    return 0;
}

/* objective.aggregate (docs/guide.md "The objective"): "best" (the
 * default with one objective) or "last". A list is always "last": the
 * Pareto front and MOTPE rank each objective's last value, so a list's
 * objectives may name only "last". RET 0 or HF_EINVAL with e filled. */
static int aggregate_parse(const json_t *objective, int n_obj, int *agg_last, hf_jerr *e)
{
    char path[64];
    *agg_last = json_is_array(objective);
    for (size_t k = 0; k < (size_t)n_obj; k++) {
        const json_t *o = json_is_array(objective) ? json_array_get(objective, k) : objective;
        const json_t *a = json_object_get(o, "aggregate");
        if (json_is_array(objective)) hf_jpath_index(path, sizeof path, "objective", k);
        else snprintf(path, sizeof path, "objective");
        if (!a) continue;
        const char *v = json_string_value(a);
        if (!v || (strcmp(v, "best") && strcmp(v, "last")))
            return hf_jerr_set(e, path, "aggregate", "must be \"best\" or \"last\"");
        if (json_is_array(objective) && strcmp(v, "last"))
            return hf_jerr_set(e, path, "aggregate", "a list of objectives is ranked by each one's last value "
                               "(the Pareto front): only \"last\"");
        *agg_last = strcmp(v, "last") == 0;
    }
    return 0;
}

/* Who decides on every report, not only at a trial's end: the median
 * rule, pbt (a segment past its generation), asha in stop mode or with
 * rungs in time. */
static int reports_prompt(const exp_spec *spec)
{
    const char *mode = json_string_value(json_object_get(spec->searcher_cfg, "mode"));
    int asha = !strcmp(spec->searcher_name, "asha");
    return spec->median_cfg || !strcmp(spec->searcher_name, "pbt") ||
           (asha && ((mode && !strcmp(mode, "stop")) || spec->time_metric));
}

/* max_trials (a grid's size when not given), max_concurrent_trials,
 * max_epochs and the seed (drawn and written into the config when not
 * given, so a restart replays the same searcher). RET 0 or HF_EINVAL. */
static int searcher_limits(exp_spec *spec, hf_jerr *e)
{
    const json_t *sc = spec->searcher_cfg;
    spec->max_trials = search_cfg_int(sc, "max_trials", 0);
    if (spec->max_trials <= 0) {
        uint64_t g = strcmp(spec->searcher_name, "grid") == 0 ? search_space_grid_size(spec->sp, 1000000) : 0;
        if (g == 0) return hf_jerr_set(e, "searcher", "max_trials", "required");
        spec->max_trials = (int64_t)g + spec->n_enqueue;   /* the whole grid after the enqueued */
    }
    if (spec->n_enqueue > spec->max_trials)
        return hf_jerr_set(e, "warm_start", "enqueue", "%lld configurations, more than searcher.max_trials (%lld)",
                           (long long)spec->n_enqueue, (long long)spec->max_trials);
    /* Default concurrency. The dispatcher creates a trial only when it can
     * be placed at once, so free slots bound every experiment anyway; this
     * cap is what one experiment may take of a large farm. Grid and random
     * lose nothing by running everything at once (max_trials); PBT runs
     * one generation of population_size members. TPE and ASHA decide from
     * results: every trial started before earlier ones report is one TPE
     * draws with less knowledge, and one bottom-rung trial ASHA starts
     * where a promotion might have gone; they default to
     * SEARCH_DEFAULT_CONCURRENCY in flight. */
    int64_t dflt = spec->max_trials;
    if (!strcmp(spec->searcher_name, "pbt")) dflt = search_cfg_int(sc, "population_size", 8);
    else if (!strcmp(spec->searcher_name, "tpe") || !strcmp(spec->searcher_name, "asha"))
        dflt = SEARCH_DEFAULT_CONCURRENCY;
    if (dflt > spec->max_trials) dflt = spec->max_trials;
    if (dflt < 1) dflt = 1;
    spec->max_concurrent = search_cfg_int(sc, "max_concurrent_trials", dflt);
    spec->max_epochs = search_cfg_int(sc, "max_epochs", 0);
    if (json_is_integer(json_object_get(sc, "seed"))) {
        spec->seed = (uint64_t)json_integer_value(json_object_get(sc, "seed"));
    } else {
        spec->seed = (uint64_t)(hf_wall_ms() ^ ((int64_t)getpid() << 20)) & INT64_MAX;
        json_object_set_new(spec->searcher_cfg, "seed", json_integer((json_int_t)spec->seed));
    }
    return 0;
}

int experiment_parse(json_t *cfg, exp_spec *spec, hf_jerr *e)
{
    int rc;
    json_t *hp = NULL, *tr = NULL;
    const char *goal = NULL;
    memset(spec, 0, sizeof *spec);
    spec->workers = 1;
    spec->slots_per_worker = 1;
    spec->weight = 1.0;
    spec->grace_ms = 10000;
    spec->keep_latest = EXP_DEFAULT_KEEP_LATEST;
    spec->keep_best_trials = EXP_DEFAULT_KEEP_BEST;
    hf_jerr_clear(e);

    if (!json_is_object(cfg)) return hf_jerr_set(e, "", NULL, "the experiment must be a JSON object");
    if ((rc = hf_json_only_keys(cfg, "", top_keys, e))) goto end;
    if ((rc = hf_json_get_string(cfg, "", "name", 1, EXP_MAX_NAME, &spec->name, e))) goto end;
    if (!spec->name[0]) { rc = hf_jerr_set(e, "", "name", "must not be empty"); goto end; }

    /* One objective (an object) or several (a list); constraints. */
    if ((rc = search_mo_parse(json_object_get(cfg, "objective"), json_object_get(cfg, "constraints"),
                              spec->obj_metric, spec->obj_goal_max, spec->con_metric, &spec->mo, e)))
        goto end;
    spec->metric = spec->obj_metric[0];
    spec->goal_max = spec->obj_goal_max[0];
    if ((rc = aggregate_parse(json_object_get(cfg, "objective"), spec->mo.n_obj, &spec->agg_last, e))) goto end;

    /* The space first: the searcher's validation may depend on it (grid). */
    if ((rc = hf_json_get_object(cfg, "", "hyperparameters", 1, &hp, e))) goto end;
    if ((rc = hf_json_get_object(cfg, "", "searcher", 1, &spec->searcher_cfg, e))) goto end;
    if ((rc = search_space_parse(hp, &spec->sp, e))) { rc = HF_EINVAL; goto end; }
    if ((rc = search_validate(spec->searcher_cfg, spec->sp, e))) { rc = HF_EINVAL; goto end; }
    if ((rc = warm_parse(cfg, spec->sp, &spec->n_enqueue, e))) { rc = HF_EINVAL; goto end; }
    json_t *sc = spec->searcher_cfg;
    spec->searcher_name = json_string_value(json_object_get(sc, "name"));
    spec->ops = search_find(spec->searcher_name);
    if (!spec->ops) { rc = hf_jerr_set(e, "searcher", "name", "unknown searcher"); goto end; }
    spec->median_cfg = json_object_get(sc, "median_stopping");
    spec->cost_metric = json_string_value(json_object_get(sc, "cost_metric"));   /* search_validate checked it */
    spec->time_metric = json_string_value(json_object_get(sc, "time_metric"));   /* asha's validate checked it */
    spec->prompt_reports = reports_prompt(spec);
    if ((rc = mo_searcher_check(spec, e))) goto end;
    if ((rc = searcher_limits(spec, e))) goto end;

    if ((rc = hf_json_get_object(cfg, "", "trial", 1, &tr, e))) goto end;
    if ((rc = parse_trial(tr, spec, e))) goto end;
    if ((rc = hf_json_get_int(cfg, "", "priority", 0, -1000, 1000, &spec->priority, e))) goto end;
    if ((rc = hf_json_get_number(cfg, "", "weight", 0, 0.001, 1000.0, &spec->weight, e))) goto end;
    if ((rc = parse_policy(cfg, spec, e))) goto end;
    /* The code context (docs/scheduler.md, "Code contexts"): here only its
     * form; that the object exists is the API's check (it has the store). */
    if ((rc = hf_json_get_string(cfg, "", "context", 0, CKSTORE_HASH_LEN + 1, &spec->context, e))) goto end;
    if (spec->context && !ckstore_hash_valid(spec->context)) {
        rc = hf_jerr_set(e, "", "context", "must be a SHA-256 (64 lowercase hex characters) from PUT /api/v1/contexts");
        goto end;
    }
    if (json_object_get(cfg, "description") &&
        (rc = hf_json_get_string(cfg, "", "description", 0, EXP_MAX_DESCRIPTION, &goal, e)))
        goto end;
end:
    if (rc) {
        experiment_spec_free(spec);
        return HF_EINVAL;
    }
    return HF_OK;
}

void experiment_spec_free(exp_spec *spec)
{
    if (!spec) return;
    search_space_free(spec->sp);
    spec->sp = NULL;
}

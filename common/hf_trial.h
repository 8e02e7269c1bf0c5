/*
 * hf_trial.h — the trial contract (docs/design.md §4, "Trial contract"):
 * the one table of the environment variables a trial process sees, the
 * typed fields of an assignment that feed them, and the one function that
 * writes them.
 *
 * Who does what:
 *   - the scheduler fills an hf_trial_vars from its model and puts it into
 *     the assignment with hf_trial_encode: typed JSON members ("seed": 7,
 *     "hparams": "{...}"), never a variable's name (docs/protocol.md);
 *   - the agent reads them back with hf_trial_decode, which validates every
 *     field as untrusted input, and hf_trial_env turns them, together with
 *     what only the agent knows (its paths, its PATH), into the "NAME=value"
 *     entries of the trial's environment. Nothing else writes a name of
 *     hf_trial_var_table into a trial's environment;
 *   - nobody overrides a contract variable silently: hf_trial_env_reserved
 *     names the ones an experiment's trial.env may not set (refused at
 *     submission) and that an assignment's "env" may not carry (refused by
 *     the agent with a start_failed naming the field).
 *
 * Values are the ones trials have always seen: integers in decimal, the
 * hyperparameters as the scheduler encoded them (the JSON text travels as
 * a string, so no re-encoding changes a digit), "host:port", GPU indices
 * joined with ','.
 *
 * Pure functions, no I/O, no global state (the table is constant).
 */
#ifndef HF_TRIAL_H
#define HF_TRIAL_H

#include "hf_json.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define HF_TRIAL_MAX_GPUS    64
#define HF_TRIAL_MASTER_MAX  300          /* "host:port" bytes, with the NUL */
#define HF_TRIAL_DIST_MAX    16           /* a distributed mode or backend, with the NUL */
#define HF_TRIAL_HPARAMS_MAX (256 * 1024) /* bytes of the hyperparameters' JSON text */
#define HF_TRIAL_MAX_ENV     32           /* entries hf_trial_env writes at most */

/* One variable of the contract. */
typedef struct hf_trial_var {
    const char *name;      /* e.g. "HYPERFARM_TRIAL_ID" */
    const char *meaning;   /* one line: what docs/design.md §4 says of it */
} hf_trial_var;

/* Every variable the agent may write into a trial's environment, in the
 * order of docs/design.md §4 (tests/unit/test_common_trial.c compares the
 * two); the last entry has name NULL. */
extern const hf_trial_var hf_trial_var_table[];

/* The assignment's fields that become variables. Integers < 0 or "" mean
 * "not given" where the comment says so; the scheduler gives all but
 * budget and the dist_* fields always. */
typedef struct hf_trial_vars {
    int64_t trial_id, experiment_id, attempt;       /* "trial_id", "experiment_id", "attempt" */
    int64_t rank, world_size, local_rank;           /* "rank", "world_size", "local_rank" */
    int64_t seed;                                   /* "seed"; < 0 = not given */
    int64_t budget;                                 /* "budget" (epochs); <= 0 = not given */
    char    master[HF_TRIAL_MASTER_MAX];            /* "master": "host:port"; "" = not given */
    const char *hparams;                            /* "hparams": a JSON object's text; NULL = not
                                                       given ("{}" is written). Borrowed in encode,
                                                       owned (free) after decode */
    char    dist_mode[HF_TRIAL_DIST_MAX];           /* "distributed": {"mode", "backend", "ps", */
    char    dist_backend[HF_TRIAL_DIST_MAX];        /*   "staleness"}: "" / < 0 = not given */
    int64_t dist_ps, dist_staleness;
    int     gpus[HF_TRIAL_MAX_GPUS];                /* "gpus" */
    int     ngpus;
} hf_trial_vars;

/* What only the agent knows, on the trial's host. */
typedef struct hf_trial_local {
    const char *checkpoint_dir;   /* absolute */
    const char *control_file;     /* absolute */
    const char *hostfile;         /* NULL unless rank 0 of an mpirun-launcher trial */
    const char *data_cache;       /* the sandbox's data cache ("off" if none); NULL without a sandbox
                                     (the agent's own HYPERFARM_DATA_CACHE passes through) */
    const char *path;             /* the PATH value: the agent's directory first */
} hf_trial_local;

/* Set every "not given" field of v (gpus none, dist_* and seed and budget
 * not given, world_size 1). */
void hf_trial_vars_init(hf_trial_vars *v);

/* Put v's fields into the assignment object as (IN v: hparams borrowed).
 * RET 0, or HF_ENOMEM. */
int hf_trial_encode(const hf_trial_vars *v, json_t *as);

/* Read and validate v's fields from the assignment a (borrowed; path names
 * it in errors, e.g. "assign[0]").
 * OUT v: filled; v->hparams a copy the caller frees (hf_trial_vars_free).
 * RET 0, or HF_EINVAL / HF_ENOMEM with e naming the offending field. */
int hf_trial_decode(const json_t *a, const char *path, hf_trial_vars *v, hf_jerr *e);

/* Free what decode allocated (v->hparams) and clear it; accepts NULL. */
void hf_trial_vars_free(hf_trial_vars *v);

/* The trial's contract variables, as "NAME=value" strings.
 * IN  v, l: borrowed.
 * OUT out[0..n-1]: new strings (free each); out has room for
 *     HF_TRIAL_MAX_ENV entries.
 * RET n (>= 0), or -1 on OOM (nothing left allocated). */
int hf_trial_env(const hf_trial_vars *v, const hf_trial_local *l, char **out);

/* Is name (without "=value") one of the contract's, so that an
 * experiment's trial.env or an assignment's "env" may not set it? True for
 * every HYPERFARM_* name (the prefix is the contract's), for
 * CUDA_VISIBLE_DEVICES and for PATH. RET a one-line reason, or NULL when
 * the name is free. */
const char *hf_trial_env_reserved(const char *name);

#endif

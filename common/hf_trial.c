/*
 * hf_trial.c — the trial contract: its table of variables, the typed
 * assignment fields that feed them, and the writer of the trial's
 * environment (see hf_trial.h; docs/design.md §4, docs/protocol.md
 * "Agents").
 *
 * The workload is one assignment at a time: a handful of fields, at most
 * HF_TRIAL_MAX_ENV strings. Every field read from the wire is bounded and
 * checked here, so the agent never writes a value into a trial's
 * environment that it has not validated.
 */
#include "hf_trial.h"

#include "hf_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rows of docs/design.md §4, in its order (test_common_trial.c checks
 * that the two agree, name for name and word for word). */
const hf_trial_var hf_trial_var_table[] = {
    {"HYPERFARM_TRIAL_ID", "the trial's id"},
    {"HYPERFARM_EXPERIMENT_ID", "its experiment's id"},
    {"HYPERFARM_ATTEMPT", "the attempt: 1 at the first start, one more at every later start (restart, promotion, resume)"},
    {"HYPERFARM_HPARAMS", "the trial's hyperparameters as a JSON object"},
    {"HYPERFARM_SEED", "the trial's seed (0..2^31-1), from the experiment's searcher.seed and the trial's index"},
    {"HYPERFARM_RANK", "this worker's rank in a multi-worker trial (0 with one worker)"},
    {"HYPERFARM_WORLD_SIZE", "the number of workers of the trial"},
    {"HYPERFARM_LOCAL_RANK", "this worker's index among the trial's workers on the same agent"},
    {"HYPERFARM_MASTER", "host:port where rank 0 listens for the rendezvous"},
    {"HYPERFARM_MAX_EPOCHS", "the training budget the searcher grants, in epochs (ASHA rungs raise it); unset when none"},
    {"HYPERFARM_BUDGET", "the same budget, under a second name"},
    {"HYPERFARM_DIST_MODE", "trial.distributed.mode (sync, async, pipeline), when the experiment gives it"},
    {"HYPERFARM_DIST_BACKEND", "trial.distributed.backend (tcp, mpi, nccl), when the experiment gives it"},
    {"HYPERFARM_DIST_PS", "trial.distributed.ps (parameter servers of async mode), when the experiment gives it"},
    {"HYPERFARM_DIST_STALENESS", "trial.distributed.staleness (async mode), when the experiment gives it"},
    {"HYPERFARM_CHECKPOINT_DIR", "where to write and find checkpoints (survives restarts)"},
    {"HYPERFARM_CONTROL_FILE", "the control file the agent maintains ({\"should_stop\": ...}), next to the checkpoint directory"},
    {"HYPERFARM_HOSTFILE", "rank 0 of an mpirun-launcher trial only: the host file of the placement"},
    {"HYPERFARM_DATA_CACHE", "in the trial sandbox: the data cache it shows (off if none); else the agent's own, if set"},
    {"CUDA_VISIBLE_DEVICES", "the GPUs assigned, comma-separated (empty for CPU trials)"},
    {"PATH", "the agent's PATH with the agent's own directory first"},
    {NULL, NULL},
};

void hf_trial_vars_init(hf_trial_vars *v)
{
    memset(v, 0, sizeof *v);
    v->world_size = 1;
    v->seed = -1;
    v->dist_ps = v->dist_staleness = -1;
}

void hf_trial_vars_free(hf_trial_vars *v)
{
    if (!v) return;
    free((char *)v->hparams);
    v->hparams = NULL;
}

/* ------------------------------------------------------------ encode */

/* Set k to a new value n in o; a NULL n is out of memory. */
static int set_new(json_t *o, const char *k, json_t *n)
{
    return n && json_object_set_new(o, k, n) == 0 ? HF_OK : HF_ENOMEM;
}

int hf_trial_encode(const hf_trial_vars *v, json_t *as)
{
    int rc = 0;
    rc |= set_new(as, "trial_id", json_integer(v->trial_id));
    rc |= set_new(as, "experiment_id", json_integer(v->experiment_id));
    rc |= set_new(as, "attempt", json_integer(v->attempt));
    rc |= set_new(as, "rank", json_integer(v->rank));
    rc |= set_new(as, "world_size", json_integer(v->world_size));
    rc |= set_new(as, "local_rank", json_integer(v->local_rank));
    rc |= set_new(as, "hparams", json_string(v->hparams ? v->hparams : "{}"));
    if (v->seed >= 0) rc |= set_new(as, "seed", json_integer(v->seed));
    if (v->budget > 0) rc |= set_new(as, "budget", json_integer(v->budget));
    if (v->master[0]) rc |= set_new(as, "master", json_string(v->master));
    if (v->dist_mode[0] || v->dist_backend[0] || v->dist_ps >= 0 || v->dist_staleness >= 0) {
        json_t *d = json_object();
        rc |= d ? 0 : HF_ENOMEM;
        if (d && v->dist_mode[0]) rc |= set_new(d, "mode", json_string(v->dist_mode));
        if (d && v->dist_backend[0]) rc |= set_new(d, "backend", json_string(v->dist_backend));
        if (d && v->dist_ps >= 0) rc |= set_new(d, "ps", json_integer(v->dist_ps));
        if (d && v->dist_staleness >= 0) rc |= set_new(d, "staleness", json_integer(v->dist_staleness));
        if (d) rc |= set_new(as, "distributed", d);
    }
    json_t *g = json_array();
    for (int k = 0; g && k < v->ngpus; k++)
        if (json_array_append_new(g, json_integer(v->gpus[k]))) rc = HF_ENOMEM;
    rc |= set_new(as, "gpus", g);
    return rc ? HF_ENOMEM : HF_OK;
}

/* ------------------------------------------------------------ decode */

/* A distributed mode or backend: 1..15 of [a-z0-9_-] (it is written into
 * the trial's environment as is). */
static int word_ok(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < HF_TRIAL_DIST_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* No control character (a value goes into the environment as is). */
static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
    return 1;
}

/* "distributed" (optional): {"mode", "backend", "ps", "staleness"}. */
static int decode_dist(const json_t *a, const char *path, hf_trial_vars *v, hf_jerr *e)
{
    json_t *d = NULL;
    const char *mode = NULL, *backend = NULL;
    char fp[256];
    int rc;
    if ((rc = hf_json_get_object(a, path, "distributed", 0, &d, e)) || !d) return rc;
    hf_jpath(fp, sizeof fp, path, "distributed");
    if ((rc = hf_json_get_string(d, fp, "mode", 0, HF_TRIAL_DIST_MAX - 1, &mode, e)) ||
        (rc = hf_json_get_string(d, fp, "backend", 0, HF_TRIAL_DIST_MAX - 1, &backend, e)) ||
        (rc = hf_json_get_int(d, fp, "ps", 0, 0, 1000000, &v->dist_ps, e)) ||
        (rc = hf_json_get_int(d, fp, "staleness", 0, 0, 1000000, &v->dist_staleness, e)))
        return rc;
    if (mode && !word_ok(mode)) return hf_jerr_set(e, fp, "mode", "must be 1-15 characters of [a-z0-9_-]");
    if (backend && !word_ok(backend)) return hf_jerr_set(e, fp, "backend", "must be 1-15 characters of [a-z0-9_-]");
    if (mode) snprintf(v->dist_mode, sizeof v->dist_mode, "%s", mode);
    if (backend) snprintf(v->dist_backend, sizeof v->dist_backend, "%s", backend);
    return HF_OK;
}

/* "gpus" (optional): indices below HF_TRIAL_MAX_GPUS. */
static int decode_gpus(const json_t *a, const char *path, hf_trial_vars *v, hf_jerr *e)
{
    json_t *gpus = NULL;
    char fp[256], ip[256];
    int64_t x;
    int rc;
    if ((rc = hf_json_get_array(a, path, "gpus", 0, HF_TRIAL_MAX_GPUS, &gpus, e))) return rc;
    hf_jpath(fp, sizeof fp, path, "gpus");
    for (size_t i = 0; gpus && i < json_array_size(gpus); i++) {
        json_t *g = json_array_get(gpus, i);
        hf_jpath_index(ip, sizeof ip, fp, i);
        if (!json_is_integer(g) || (x = json_integer_value(g)) < 0 || x >= HF_TRIAL_MAX_GPUS)
            return hf_jerr_set(e, ip, NULL, "must be a GPU index between 0 and %d", HF_TRIAL_MAX_GPUS - 1);
        v->gpus[v->ngpus++] = (int)x;
    }
    return HF_OK;
}

/* "hparams" (optional): the text of a JSON object, kept as it came. */
static int decode_hparams(const json_t *a, const char *path, hf_trial_vars *v, hf_jerr *e)
{
    const char *hp = NULL;
    json_t *doc = NULL;
    hf_jerr pe;
    int rc;
    if ((rc = hf_json_get_string(a, path, "hparams", 0, HF_TRIAL_HPARAMS_MAX, &hp, e)) || !hp) return rc;
    hf_jerr_clear(&pe);
    if (hf_json_parse(hp, strlen(hp), HF_JSON_MAX_DEPTH, 1, &doc, &pe)) {
        json_decref(doc);
        return hf_jerr_set(e, path, "hparams", "must be the text of a JSON object");
    }
    json_decref(doc);
    if (!(v->hparams = strdup(hp))) return hf_jerr_set(e, path, NULL, "out of memory");
    return HF_OK;
}

int hf_trial_decode(const json_t *a, const char *path, hf_trial_vars *v, hf_jerr *e)
{
    const char *master = NULL;
    int rc;
    hf_trial_vars_init(v);
    if ((rc = hf_json_get_int(a, path, "trial_id", 1, 1, INT64_MAX, &v->trial_id, e)) ||
        (rc = hf_json_get_int(a, path, "attempt", 1, 0, INT32_MAX, &v->attempt, e)) ||
        (rc = hf_json_get_int(a, path, "experiment_id", 0, 0, INT64_MAX, &v->experiment_id, e)) ||
        (rc = hf_json_get_int(a, path, "rank", 0, 0, 100000, &v->rank, e)) ||
        (rc = hf_json_get_int(a, path, "world_size", 0, 1, 100000, &v->world_size, e)) ||
        (rc = hf_json_get_int(a, path, "local_rank", 0, 0, 100000, &v->local_rank, e)) ||
        (rc = hf_json_get_int(a, path, "seed", 0, 0, INT64_MAX, &v->seed, e)) ||
        (rc = hf_json_get_int(a, path, "budget", 0, 1, INT64_MAX, &v->budget, e)) ||
        (rc = hf_json_get_string(a, path, "master", 0, HF_TRIAL_MASTER_MAX - 1, &master, e)))
        return rc;
    if (master && (!*master || !printable(master) || !strchr(master, ':')))
        return hf_jerr_set(e, path, "master", "must be host:port");
    if (master) snprintf(v->master, sizeof v->master, "%s", master);
    if ((rc = decode_dist(a, path, v, e)) || (rc = decode_gpus(a, path, v, e)) ||
        (rc = decode_hparams(a, path, v, e)))
        return rc;
    return HF_OK;
}

/* ------------------------------------------------------------ environment */

/* out[(*n)++] = "NAME=value" from a format. RET 0 or -1 (OOM). */
static int put(char **out, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int put(char **out, int *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vasprintf(&out[*n], fmt, ap);
    va_end(ap);
    if (w < 0) {
        out[*n] = NULL;
        return -1;
    }
    (*n)++;
    return 0;
}

/* The variables from the assignment's fields (the first rows of the
 * table). RET 0 or -1. */
static int env_assigned(const hf_trial_vars *v, char **out, int *n)
{
    if (put(out, n, "HYPERFARM_TRIAL_ID=%lld", (long long)v->trial_id) ||
        put(out, n, "HYPERFARM_EXPERIMENT_ID=%lld", (long long)v->experiment_id) ||
        put(out, n, "HYPERFARM_ATTEMPT=%lld", (long long)v->attempt) ||
        put(out, n, "HYPERFARM_HPARAMS=%s", v->hparams ? v->hparams : "{}") ||
        (v->seed >= 0 && put(out, n, "HYPERFARM_SEED=%lld", (long long)v->seed)) ||
        put(out, n, "HYPERFARM_RANK=%lld", (long long)v->rank) ||
        put(out, n, "HYPERFARM_WORLD_SIZE=%lld", (long long)v->world_size) ||
        put(out, n, "HYPERFARM_LOCAL_RANK=%lld", (long long)v->local_rank) ||
        (v->master[0] && put(out, n, "HYPERFARM_MASTER=%s", v->master)))
        return -1;
    if (v->budget > 0 && (put(out, n, "HYPERFARM_MAX_EPOCHS=%lld", (long long)v->budget) ||
                          put(out, n, "HYPERFARM_BUDGET=%lld", (long long)v->budget)))
        return -1;
    if ((v->dist_mode[0] && put(out, n, "HYPERFARM_DIST_MODE=%s", v->dist_mode)) ||
        (v->dist_backend[0] && put(out, n, "HYPERFARM_DIST_BACKEND=%s", v->dist_backend)) ||
        (v->dist_ps >= 0 && put(out, n, "HYPERFARM_DIST_PS=%lld", (long long)v->dist_ps)) ||
        (v->dist_staleness >= 0 && put(out, n, "HYPERFARM_DIST_STALENESS=%lld", (long long)v->dist_staleness)))
        return -1;
    return 0;
}

int hf_trial_env(const hf_trial_vars *v, const hf_trial_local *l, char **out)
{
    char gpus[HF_TRIAL_MAX_GPUS * 4 + 1] = "";
    int n = 0;
    for (int i = 0, w = 0; i < v->ngpus && i < HF_TRIAL_MAX_GPUS; i++)
        w += snprintf(gpus + w, sizeof gpus - (size_t)w, "%s%d", i ? "," : "", v->gpus[i]);
    if (env_assigned(v, out, &n) ||
        put(out, &n, "HYPERFARM_CHECKPOINT_DIR=%s", l->checkpoint_dir) ||
        put(out, &n, "HYPERFARM_CONTROL_FILE=%s", l->control_file) ||
        (l->hostfile && put(out, &n, "HYPERFARM_HOSTFILE=%s", l->hostfile)) ||
        (l->data_cache && put(out, &n, "HYPERFARM_DATA_CACHE=%s", l->data_cache)) ||
        put(out, &n, "CUDA_VISIBLE_DEVICES=%s", gpus) ||
        put(out, &n, "PATH=%s", l->path)) {
        while (n > 0) free(out[--n]);
        return -1;
    }
    return n;
}

const char *hf_trial_env_reserved(const char *name)
{
    if (!strncmp(name, "HYPERFARM_", 10))
        return "reserved: HYPERFARM_* variables are the trial contract's, set by the agent (docs/design.md §4)";
    if (!strcmp(name, "CUDA_VISIBLE_DEVICES")) return "reserved: set by the agent from the GPUs it assigns";
    if (!strcmp(name, "PATH")) return "reserved: set by the agent (its own PATH, with its directory first)";
    return NULL;
}

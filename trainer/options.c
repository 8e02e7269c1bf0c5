/*
 * options.c — the option table of hyperfarm-train and its three sources:
 * flags, HYPERFARM_HPARAMS (JSON) and the trial environment.
 *
 * One table (as Redis's config.c): name, type, where it lands in
 * tr_options, bounds, help. Flags and JSON keys are both looked up in it,
 * so every flag is a key and no source can set something the other cannot.
 */
#include "options.h"

#include "hf_err.h"
#include "hf_json.h"
#include "hf_log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OT_INT, OT_DOUBLE, OT_STR, OT_BOOL, OT_LIST, OT_U64 } opt_type;

typedef struct opt_def {
    const char *name;        /* flag name without "--" */
    opt_type    type;
    size_t      off;         /* offset in tr_options */
    size_t      size;        /* OT_STR: buffer size */
    double      min, max;    /* OT_INT/OT_DOUBLE/OT_LIST elements */
    const char *choices;     /* OT_STR: "a|b|c" or NULL (free text) */
    const char *help;
} opt_def;

#define OFF(f) offsetof(tr_options, f)
#define SZ(f)  sizeof(((tr_options *)0)->f)
#define BIG 1e18

static const opt_def opt_table[] = {
    {"model", OT_STR, OFF(model), SZ(model), 0, 0, "mlp|cnn", "model family"},
    {"hidden", OT_LIST, OFF(hidden), 0, 1, 65536, NULL, "MLP hidden widths, e.g. 256,128"},
    {"channels", OT_LIST, OFF(channels), 0, 1, 4096, NULL, "CNN conv channels per block, e.g. 32,64"},
    {"fc", OT_INT, OFF(fc), 0, 0, 65536, NULL, "CNN dense head width (0 = none)"},
    {"dropout", OT_DOUBLE, OFF(dropout), 0, 0, 0.95, NULL, "dropout probability"},
    {"batch-norm", OT_BOOL, OFF(batch_norm), 0, 0, 0, NULL, "batch norm after conv/hidden layers"},
    {"epochs", OT_INT, OFF(epochs), 0, 1, 100000, NULL, "epochs (and LR schedule horizon)"},
    {"batch-size", OT_INT, OFF(batch_size), 0, 1, 65536, NULL, "global mini-batch size"},
    {"lr", OT_DOUBLE, OFF(lr), 0, 0, 100, NULL, "learning rate"},
    {"optimizer", OT_STR, OFF(optimizer), SZ(optimizer), 0, 0, "sgd|adam|adamw", "optimizer"},
    {"momentum", OT_DOUBLE, OFF(momentum), 0, 0, 0.9999, NULL, "SGD momentum"},
    {"nesterov", OT_BOOL, OFF(nesterov), 0, 0, 0, NULL, "Nesterov momentum"},
    {"beta1", OT_DOUBLE, OFF(beta1), 0, 0, 0.9999999, NULL, "Adam beta1"},
    {"beta2", OT_DOUBLE, OFF(beta2), 0, 0, 0.9999999, NULL, "Adam beta2"},
    {"eps", OT_DOUBLE, OFF(eps), 0, 1e-30, 1, NULL, "Adam epsilon"},
    {"weight-decay", OT_DOUBLE, OFF(weight_decay), 0, 0, 10, NULL, "weight decay"},
    {"lr-schedule", OT_STR, OFF(lr_schedule), SZ(lr_schedule), 0, 0, "none|cosine|step", "LR decay"},
    {"warmup-epochs", OT_DOUBLE, OFF(warmup_epochs), 0, 0, 1000, NULL, "linear LR warm-up"},
    {"step-size", OT_INT, OFF(step_size), 0, 1, 100000, NULL, "step schedule: epochs per decay"},
    {"step-gamma", OT_DOUBLE, OFF(step_gamma), 0, 0, 1, NULL, "step schedule: decay factor"},
    {"min-lr", OT_DOUBLE, OFF(min_lr), 0, 0, 100, NULL, "cosine schedule floor"},
    {"clip-norm", OT_DOUBLE, OFF(clip_norm), 0, 0, BIG, NULL, "clip gradient L2 norm (0 = off)"},
    {"data", OT_STR, OFF(data), SZ(data), 0, 0, NULL, "directory of the IDX .gz files"},
    {"val-size", OT_INT, OFF(val_size), 0, 0, 1000000, NULL, "training samples held out for validation"},
    {"limit-train", OT_INT, OFF(limit_train), 0, 0, 100000000, NULL, "use the first N training samples"},
    {"limit-test", OT_INT, OFF(limit_test), 0, 0, 100000000, NULL, "use the first N test samples"},
    {"flip", OT_BOOL, OFF(flip), 0, 0, 0, NULL, "random horizontal flips"},
    {"shift", OT_INT, OFF(shift), 0, 0, 8, NULL, "random shifts up to N pixels"},
    {"threads", OT_INT, OFF(threads), 0, 0, 1024, NULL, "BLAS threads (0 = all CPUs)"},
    {"device", OT_STR, OFF(device), SZ(device), 0, 0, "cpu|cuda|auto", "compute device"},
    {"seed", OT_U64, OFF(seed), 0, 0, 0, NULL, "random seed"},
    {"checkpoint-dir", OT_STR, OFF(checkpoint_dir), SZ(checkpoint_dir), 0, 0, NULL, "checkpoint directory"},
    {"resume", OT_BOOL, OFF(resume), 0, 0, 0, NULL, "resume from the newest valid checkpoint"},
    {"checkpoint-every", OT_INT, OFF(checkpoint_every), 0, 0, 1e9, NULL, "also checkpoint every N steps"},
    {"keep-checkpoints", OT_INT, OFF(keep_checkpoints), 0, 1, 1000, NULL, "checkpoints kept"},
    {"log-every", OT_INT, OFF(log_every), 0, 0, 1e9, NULL, "metric line every N steps (0 = per epoch)"},
    {"max-steps", OT_INT, OFF(max_steps), 0, 0, 2e9, NULL, "stop after N steps (0 = no limit)"},
    {"eval-test", OT_BOOL, OFF(eval_test), 0, 0, 0, NULL, "report test_acc every epoch"},
    {"nproc", OT_INT, OFF(nproc), 0, 1, 1024, NULL, "local workers to launch"},
    {"mode", OT_STR, OFF(mode), SZ(mode), 0, 0, "sync|async|pipeline", "distributed mode"},
    {"backend", OT_STR, OFF(backend), SZ(backend), 0, 0, "tcp|mpi|nccl", "collective transport"},
    {"ps", OT_INT, OFF(ps), 0, 0, 1024, NULL, "parameter servers (async)"},
    {"staleness", OT_INT, OFF(staleness), 0, -1, 1e9, NULL, "SSP staleness bound (-1 = unbounded)"},
    {"timeout", OT_DOUBLE, OFF(timeout), 0, 0.001, 1e6, NULL, "collective timeout, seconds"},
    {"log-level", OT_STR, OFF(log_level), SZ(log_level), 0, 0, "debug|info|warn|error|off", "log level"},
    {NULL, OT_INT, 0, 0, 0, 0, NULL, NULL},
};

void tr_options_defaults(tr_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "mlp");
    o->hidden[0] = 256; o->hidden[1] = 128; o->n_hidden = 2;
    o->channels[0] = 32; o->channels[1] = 64; o->n_channels = 2;
    o->fc = 128;
    o->dropout = 0.0;
    o->epochs = 10;
    o->batch_size = 128;
    o->lr = 0.001;
    snprintf(o->optimizer, sizeof o->optimizer, "adam");
    o->momentum = 0.9;
    o->beta1 = 0.9; o->beta2 = 0.999; o->eps = 1e-8;
    snprintf(o->lr_schedule, sizeof o->lr_schedule, "none");
    o->step_size = 10; o->step_gamma = 0.1;
    snprintf(o->data, sizeof o->data, "/usr/share/datasets/fashion-mnist");
    o->val_size = 5000;
    o->threads = 0;
    snprintf(o->device, sizeof o->device, "cpu");
    o->seed = 1;
    o->keep_checkpoints = 2;
    o->eval_test = 1;
    o->nproc = 1;
    snprintf(o->backend, sizeof o->backend, "tcp");
    o->staleness = -1;
    o->timeout = 60;
    o->rank = 0; o->world = 1;
    snprintf(o->log_level, sizeof o->log_level, "info");
}

/* "batch_size" and "batch-size" both find "batch-size". */
static const opt_def *opt_find(const char *name, size_t len)
{
    char norm[64];
    if (len == 0 || len >= sizeof norm) return NULL;
    for (size_t i = 0; i < len; i++) norm[i] = name[i] == '_' ? '-' : name[i];
    norm[len] = '\0';
    for (const opt_def *d = opt_table; d->name; d++)
        if (strcmp(d->name, norm) == 0) return d;
    return NULL;
}

static int choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int set_str(tr_options *o, const opt_def *d, const char *name, const char *v, const char *src, char *err,
                   size_t el)
{
    if (d->choices && !choice_ok(d->choices, v))
        return snprintf(err, el, "%s '%s': '%s' is not one of %s", src, name, v, d->choices), HF_EINVAL;
    if (strlen(v) >= d->size)
        return snprintf(err, el, "%s '%s': value longer than %zu bytes", src, name, d->size - 1), HF_EINVAL;
    snprintf((char *)o + d->off, d->size, "%s", v);
    return 0;
}

static int check_range(const opt_def *d, const char *name, double v, const char *src, char *err, size_t el)
{
    if (!isfinite(v) || v < d->min || v > d->max)
        return snprintf(err, el, "%s '%s': %g is outside [%g, %g]", src, name, v, d->min, d->max), HF_EINVAL;
    return 0;
}

static int set_int(tr_options *o, const opt_def *d, const char *name, double v, const char *src, char *err,
                   size_t el)
{
    if (v != floor(v))
        return snprintf(err, el, "%s '%s': expected an integer, got %g", src, name, v), HF_EINVAL;
    int rc = check_range(d, name, v, src, err, el);
    if (rc) return rc;
    *(int *)((char *)o + d->off) = (int)v;
    return 0;
}

/* List element count lives right after the array: hidden -> n_hidden. */
static int *list_count(tr_options *o, const opt_def *d)
{
    if (d->off == OFF(hidden)) return &o->n_hidden;
    return &o->n_channels;
}

static int set_list_text(tr_options *o, const opt_def *d, const char *name, const char *v, const char *src,
                         char *err, size_t el)
{
    int *arr = (int *)((char *)o + d->off), n = 0;
    const char *p = v;
    if (!*p) { *list_count(o, d) = 0; return 0; }   /* "" = no hidden layer */
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || x < d->min || x > d->max)
            return snprintf(err, el, "%s '%s': '%s' is not a comma-separated list of integers in [%g, %g]",
                            src, name, v, d->min, d->max), HF_EINVAL;
        if (n >= TR_MAX_HIDDEN)
            return snprintf(err, el, "%s '%s': more than %d entries", src, name, TR_MAX_HIDDEN), HF_EINVAL;
        arr[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    *list_count(o, d) = n;
    return 0;
}

static int parse_bool_text(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) return *out = 1, 0;
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) return *out = 0, 0;
    return HF_EINVAL;
}

/* Set from text (a flag's value). */
static int set_text(tr_options *o, const opt_def *d, const char *v, char *err, size_t el)
{
    char *end;
    switch (d->type) {
    case OT_STR: return set_str(o, d, d->name, v, "flag", err, el);
    case OT_LIST: return set_list_text(o, d, d->name, v, "flag", err, el);
    case OT_BOOL: {
        int b;
        if (parse_bool_text(v, &b))
            return snprintf(err, el, "flag '%s': '%s' is not a boolean", d->name, v), HF_EINVAL;
        *(int *)((char *)o + d->off) = b;
        return 0;
    }
    case OT_U64: {
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno || v[0] == '-')
            return snprintf(err, el, "flag '%s': '%s' is not an unsigned integer", d->name, v), HF_EINVAL;
        *(uint64_t *)((char *)o + d->off) = (uint64_t)x;
        return 0;
    }
    case OT_INT:
    case OT_DOUBLE: {
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end || errno)
            return snprintf(err, el, "flag '%s': '%s' is not a number", d->name, v), HF_EINVAL;
        if (d->type == OT_INT) return set_int(o, d, d->name, x, "flag", err, el);
        int rc = check_range(d, d->name, x, "flag", err, el);
        if (rc) return rc;
        *(double *)((char *)o + d->off) = x;
        return 0;
    }
    }
    return HF_EINVAL;
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

#define HP "HYPERFARM_HPARAMS: key"

static int set_json(tr_options *o, const opt_def *d, const char *key, const json_t *v, char *err, size_t el)
{
    switch (d->type) {
    case OT_STR:
        if (!json_is_string(v)) break;
        return set_str(o, d, key, json_string_value(v), HP, err, el);
    case OT_BOOL:
        if (!json_is_boolean(v)) break;
        *(int *)((char *)o + d->off) = json_is_true(v);
        return 0;
    case OT_U64:
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            if (json_is_integer(v))
                return snprintf(err, el, HP " '%s': must be >= 0", key), HF_EINVAL;
            break;
        }
        *(uint64_t *)((char *)o + d->off) = (uint64_t)json_integer_value(v);
        return 0;
    case OT_INT:
        if (!json_is_number(v)) break;
        if (set_int(o, d, key, json_number_value(v), HP, err, el)) return HF_EINVAL;
        return 0;
    case OT_DOUBLE: {
        if (!json_is_number(v)) break;
        double x = json_number_value(v);
        if (check_range(d, key, x, HP, err, el)) return HF_EINVAL;
        *(double *)((char *)o + d->off) = x;
        return 0;
    }
    case OT_LIST:
        if (json_is_string(v)) return set_list_text(o, d, key, json_string_value(v), HP, err, el);
        if (json_is_number(v)) {
            double x = json_number_value(v);
            if (x != floor(x) || x < d->min || x > d->max)
                return snprintf(err, el, HP " '%s': %g is not an integer in [%g, %g]", key, x, d->min, d->max),
                       HF_EINVAL;
            ((int *)((char *)o + d->off))[0] = (int)x;
            *list_count(o, d) = 1;
            return 0;
        }
        if (json_is_array(v)) {
            size_t n = json_array_size(v);
            if (n > TR_MAX_HIDDEN)
                return snprintf(err, el, HP " '%s': more than %d entries", key, TR_MAX_HIDDEN), HF_EINVAL;
            for (size_t i = 0; i < n; i++) {
                const json_t *e = json_array_get(v, i);
                double x = json_is_number(e) ? json_number_value(e) : NAN;
                if (!json_is_number(e) || x != floor(x) || x < d->min || x > d->max)
                    return snprintf(err, el, HP " '%s'[%zu]: expected an integer in [%g, %g]", key, i, d->min,
                                    d->max), HF_EINVAL;
                ((int *)((char *)o + d->off))[i] = (int)x;
            }
            *list_count(o, d) = (int)n;
            return 0;
        }
        break;
    }
    static const char *want[] = {"a number (integer)", "a number", "a string", "a boolean",
                                 "an integer, an array of integers or a string \"256,128\"", "an integer >= 0"};
    snprintf(err, el, HP " '%s': expected %s, got %s", key, want[d->type], json_type_name(v));
    return HF_EINVAL;
}

static int parse_hparams(tr_options *o, const char *text, char *err, size_t el)
{
    json_t *root = NULL;
    hf_jerr je;
    int rc = hf_json_parse(text, strlen(text), 8, 1, &root, &je);
    if (rc) {
        snprintf(err, el, "HYPERFARM_HPARAMS: not a JSON object: %s", je.msg);
        return HF_EINVAL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        const opt_def *d = opt_find(key, strlen(key));
        if (!d) {
            snprintf(err, el, HP " '%s': unknown hyperparameter (hyperfarm-train --help lists them)", key);
            rc = HF_EINVAL;
            goto end;
        }
        if ((rc = set_json(o, d, key, v, err, el))) goto end;
    }
end:
    json_decref(root);
    return rc;
}

int tr_options_parse(tr_options *o, int argc, char **argv, const char *hparams, char *err, size_t el)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return snprintf(err, el, "unexpected argument '%s'", a), HF_EINVAL;
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const opt_def *d = opt_find(name, nlen);
        int negated = 0;
        if (!d && nlen > 3 && !strncmp(name, "no-", 3)) {
            d = opt_find(name + 3, nlen - 3);
            if (d && d->type == OT_BOOL && !eq) negated = 1;
            else d = NULL;
        }
        if (!d) return snprintf(err, el, "unknown flag '--%.*s' (see --help)", (int)nlen, name), HF_EINVAL;
        if (d->type == OT_BOOL && !eq) {
            *(int *)((char *)o + d->off) = !negated;
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) return snprintf(err, el, "flag '--%s' needs a value", d->name), HF_EINVAL;
            val = argv[++i];
        }
        int rc = set_text(o, d, val, err, el);
        if (rc) return rc;
    }
    if (hparams && *hparams) {
        int rc = parse_hparams(o, hparams, err, el);
        if (rc) return rc;
    }
    return 0;
}

static int env_int(const char *name, int min, int max, int *out, char *err, size_t el)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < min || x > max)
        return snprintf(err, el, "%s='%s': expected an integer in [%d, %d]", name, v, min, max), HF_EINVAL;
    *out = (int)x;
    return 0;
}

int tr_options_from_env(tr_options *o, char *err, size_t el)
{
    int rc;
    if ((rc = env_int("HYPERFARM_BUDGET", 1, 1000000, &o->budget_epochs, err, el))) return rc;
    if ((rc = env_int("HYPERFARM_MAX_EPOCHS", 1, 1000000, &o->budget_epochs, err, el))) return rc;
    const char *tid = getenv("HYPERFARM_TRIAL_ID");
    o->under_agent = tid && *tid;
    const char *cd = getenv("HYPERFARM_CHECKPOINT_DIR");
    if (cd && *cd && !o->checkpoint_dir[0]) {
        if (strlen(cd) >= sizeof o->checkpoint_dir)
            return snprintf(err, el, "HYPERFARM_CHECKPOINT_DIR: path too long"), HF_EINVAL;
        snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "%s", cd);
        if (o->under_agent) o->resume = 1;
    }
    int world = 1, rank = 0;
    if ((rc = env_int("OMPI_COMM_WORLD_SIZE", 1, 1 << 20, &world, err, el))) return rc;
    if ((rc = env_int("OMPI_COMM_WORLD_RANK", 0, 1 << 20, &rank, err, el))) return rc;
    if ((rc = env_int("HYPERFARM_WORLD_SIZE", 1, 1 << 20, &world, err, el))) return rc;
    if ((rc = env_int("HYPERFARM_RANK", 0, 1 << 20, &rank, err, el))) return rc;
    if (rank >= world)
        return snprintf(err, el, "rank %d is not below world size %d", rank, world), HF_EINVAL;
    o->world = world;
    o->rank = rank;
    return 0;
}

/* HYPERFARM_SEED (docs/trainer.md "Options"): the trial's seed, which the
 * scheduler derives from the experiment's seed and the trial id, used when
 * neither --seed nor HYPERFARM_HPARAMS gave one. */
static int env_seed(uint64_t *seed, char *err, size_t el)
{
    const char *v = getenv("HYPERFARM_SEED");
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno || *v == '-')
        return snprintf(err, el, "HYPERFARM_SEED='%s': expected an unsigned integer", v), HF_EINVAL;
    *seed = x;
    return 0;
}

int tr_options_load(tr_options *o, int argc, char **argv, char *err, size_t el)
{
    tr_options_defaults(o);
    uint64_t dflt = o->seed;
    o->seed = TR_SEED_UNSET;
    int rc = tr_options_parse(o, argc, argv, getenv("HYPERFARM_HPARAMS"), err, el);
    if (rc) return rc;
    if (o->seed == TR_SEED_UNSET) {
        o->seed = dflt;
        if ((rc = env_seed(&o->seed, err, el))) return rc;
    }
    return tr_options_from_env(o, err, el);
}

int tr_options_target_epochs(const tr_options *o)
{
    return o->budget_epochs > 0 ? o->budget_epochs : o->epochs;
}

int tr_options_is_distributed(const tr_options *o)
{
    return o->nproc > 1 || o->mode[0] || o->world > 1;
}

int tr_options_mode(const tr_options *o, int *mode)
{
    if (!o->mode[0] || !strcmp(o->mode, "sync")) *mode = TR_MODE_SYNC;
    else if (!strcmp(o->mode, "async")) *mode = TR_MODE_ASYNC;
    else if (!strcmp(o->mode, "pipeline")) *mode = TR_MODE_PIPELINE;
    else return HF_EINVAL;
    return 0;
}

const char *tr_options_mode_name(int mode)
{
    return mode == TR_MODE_ASYNC ? "async" : mode == TR_MODE_PIPELINE ? "pipeline" : "sync";
}

/* A positive integer from the environment, else def. */
static int env_positive(const char *name, int def)
{
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : def;
}

void tr_options_tuning(tr_dist_tuning *t)
{
    t->bucket_kib = env_positive("HF_BUCKET_KIB", 128);
    t->microbatches = env_positive("HF_MICROBATCHES", 0);
}

void tr_options_usage(FILE *f)
{
    fprintf(f, "usage: hyperfarm-train [--flag value]...\n"
               "Every flag is also a key of HYPERFARM_HPARAMS (JSON; '-' written '_').\n\n");
    tr_options d;
    tr_options_defaults(&d);
    for (const opt_def *x = opt_table; x->name; x++) {
        char def[64] = "";
        const char *p = (const char *)&d + x->off;
        switch (x->type) {
        case OT_INT: snprintf(def, sizeof def, "%d", *(const int *)p); break;
        case OT_DOUBLE: snprintf(def, sizeof def, "%g", *(const double *)p); break;
        case OT_STR: snprintf(def, sizeof def, "%s", p); break;
        case OT_BOOL: snprintf(def, sizeof def, "%s", *(const int *)p ? "on" : "off"); break;
        case OT_U64: snprintf(def, sizeof def, "%llu", (unsigned long long)*(const uint64_t *)p); break;
        case OT_LIST: snprintf(def, sizeof def, "%s", x->off == OFF(hidden) ? "256,128" : "32,64"); break;
        }
        fprintf(f, "  --%-18s %s%s%s [%s]\n", x->name, x->help, x->choices ? ": " : "",
                x->choices ? x->choices : "", def);
    }
    fprintf(f, "\nEnvironment: HYPERFARM_HPARAMS, HYPERFARM_MAX_EPOCHS, HYPERFARM_SEED, HYPERFARM_CHECKPOINT_DIR,\n"
               "HYPERFARM_RANK, HYPERFARM_WORLD_SIZE, HYPERFARM_DATA_CACHE, OPENBLAS_CORETYPE.\n"
               "Exit: 0 done (or stopped at the searcher's request), 143 stopped by SIGTERM\n"
               "(checkpoint written), 1 error.\n");
}

void tr_options_print(FILE *f, const tr_options *o)
{
    json_t *j = json_object();
    for (const opt_def *x = opt_table; x->name; x++) {
        const char *p = (const char *)o + x->off;
        json_t *v = NULL;
        switch (x->type) {
        case OT_INT: v = json_integer(*(const int *)p); break;
        case OT_DOUBLE: v = json_real(*(const double *)p); break;
        case OT_STR: v = json_string(p); break;
        case OT_BOOL: v = json_boolean(*(const int *)p); break;
        case OT_U64: v = json_integer((json_int_t) * (const uint64_t *)p); break;
        case OT_LIST: {
            v = json_array();
            const int *arr = (const int *)p;
            int n = x->off == OFF(hidden) ? o->n_hidden : o->n_channels;
            for (int i = 0; i < n; i++) json_array_append_new(v, json_integer(arr[i]));
            break;
        }
        }
        char key[64];
        snprintf(key, sizeof key, "%s", x->name);
        for (char *c = key; *c; c++) if (*c == '-') *c = '_';
        json_object_set_new(j, key, v);
    }
    json_object_set_new(j, "budget_epochs", json_integer(o->budget_epochs));
    json_object_set_new(j, "rank", json_integer(o->rank));
    json_object_set_new(j, "world", json_integer(o->world));
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    if (s) fprintf(f, "%s\n", s);
    free(s);
    json_decref(j);
}

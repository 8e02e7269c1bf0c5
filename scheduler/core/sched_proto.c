/*
 * sched_proto.c — the scheduler's side of the agent protocol
 * (docs/protocol.md, sched_int.h): validation of registration and
 * heartbeat bodies, the trial and rank a reported item refers to, and the
 * assignment sent to an agent for one rank.
 *
 * Nothing from an agent is trusted: a body is validated as a whole, with
 * the offending field's path in the error, before the core applies any of
 * it (sched_agents.c), so a bad item never leaves a heartbeat half-applied.
 * Array sizes are bounded (MAX_HB_ITEMS items per kind and heartbeat).
 */
#include "scheduler/core/sched_int.h"

#include "scheduler/core/expmeta.h"

#include "hf_err.h"
#include "hf_metric.h"
#include "hf_trial.h"
#include "scheduler/store/store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HB_ITEMS 200000
#define PROTO_MAX_CACHED 4096   /* hashes an agent may list as cached */

/* ---------- validation ---------- */

static int name_ok(const char *n)
{
    if (!*n) return 0;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || *n == '-' ||
              *n == '_' || *n == '.' || *n == ':'))
            return 0;
    return 1;
}

/* Validate a "running" array (registration and heartbeat). */
static int check_running(const json_t *body, hf_jerr *e, json_t **out)
{
    int rc;
    *out = NULL;
    if ((rc = hf_json_get_array(body, "", "running", 0, 100000, out, e))) return rc;
    size_t i;
    json_t *it;
    json_array_foreach(*out, i, it) {
        char p[48];
        int64_t x;
        hf_jpath_index(p, sizeof p, "running", i);
        if (!json_is_object(it)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(it, p, "trial_id", 1, 1, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "attempt", 1, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "pid", 0, 0, INT32_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "rank", 0, 0, 100000, &x, e))) return rc;
    }
    return 0;
}

/* "cached": the object hashes in the agent's cache (bounded; each a
 * lowercase hex SHA-256). */
static int check_cached(const json_t *body, hf_jerr *e, json_t **out)
{
    int rc;
    if ((rc = hf_json_get_array(body, "", "cached", 0, PROTO_MAX_CACHED, out, e))) return rc;
    size_t i;
    json_t *h;
    json_array_foreach(*out, i, h) {
        const char *v = json_string_value(h);
        size_t n = v ? strlen(v) : 0;
        char p[48];
        hf_jpath_index(p, sizeof p, "cached", i);
        if (n != 64 || strspn(v, "0123456789abcdef") != 64)
            return hf_jerr_set(e, p, NULL, "must be a SHA-256 as 64 lowercase hex characters");
    }
    return 0;
}

int proto_register_check(const json_t *body, reg_body *out, hf_jerr *e)
{
    static const char *const keys[] = {"name", "slots", "gpus", "host", "version", "running", "labels", "cached", NULL};
    int rc;
    memset(out, 0, sizeof *out);
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "name", 1, 128, &out->name, e))) return rc;
    if (!name_ok(out->name)) return hf_jerr_set(e, "", "name", "must be 1-128 characters of [A-Za-z0-9._:-]");
    if ((rc = hf_json_get_int(body, "", "slots", 1, 0, 4096, &out->slots, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "host", 0, 255, &out->host, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "version", 0, 64, &out->version, e))) return rc;
    if ((rc = hf_json_get_array(body, "", "gpus", 0, PLACE_MAX_GPUS, &out->gpus, e))) return rc;
    size_t i;
    json_t *g;
    json_array_foreach(out->gpus, i, g) {
        char p[32];
        int64_t x;
        const char *gn;
        hf_jpath_index(p, sizeof p, "gpus", i);
        if (!json_is_object(g)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(g, p, "index", 1, 0, 1023, &x, e))) return rc;
        if ((rc = hf_json_get_string(g, p, "name", 0, 128, &gn, e))) return rc;
        if ((rc = hf_json_get_int(g, p, "memory_mb", 0, 0, INT64_MAX, &x, e))) return rc;
    }
    if ((rc = check_cached(body, e, &out->cached))) return rc;
    return check_running(body, e, &out->running);
}

int proto_running_has(const json_t *running, int64_t tid, int64_t attempt, int rank, int nranks_here)
{
    size_t i;
    json_t *it;
    json_array_foreach(running, i, it) {
        if (json_integer_value(json_object_get(it, "trial_id")) != tid) continue;
        if (json_integer_value(json_object_get(it, "attempt")) != attempt) continue;
        json_t *r = json_object_get(it, "rank");
        if (r && json_integer_value(r) != rank && nranks_here > 1) continue;
        return 1;
    }
    return 0;
}

/* The part every reported item shares: an object naming (trial_id, attempt). */
static int check_item_head(const json_t *it, const char *p, hf_jerr *e)
{
    int64_t x;
    int rc;
    if (!json_is_object(it)) return hf_jerr_set(e, p, NULL, "must be an object");
    if ((rc = hf_json_get_int(it, p, "trial_id", 1, 1, INT64_MAX, &x, e))) return rc;
    return hf_json_get_int(it, p, "attempt", 1, 0, INT64_MAX, &x, e);
}

/* events[i]: a rank started, exited or could not start. */
static int check_event(const json_t *it, const char *p, hf_jerr *e)
{
    int64_t x;
    const char *type, *err;
    int rc;
    if ((rc = check_item_head(it, p, e))) return rc;
    if ((rc = hf_json_get_string(it, p, "type", 1, 32, &type, e))) return rc;
    if (strcmp(type, "started") && strcmp(type, "exited") && strcmp(type, "start_failed"))
        return hf_jerr_set(e, p, "type", "must be started, exited or start_failed");
    if ((rc = hf_json_get_int(it, p, "time", 0, 0, INT64_MAX, &x, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "pid", 0, 0, INT32_MAX, &x, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "rank", 0, 0, 100000, &x, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "exit_code", 0, -1000, 1000, &x, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "signal", 0, 0, 1000, &x, e))) return rc;
    return hf_json_get_string(it, p, "error", 0, 4096, &err, e);
}

/* metrics[i]: one report of named values at a step/epoch, maybe a checkpoint. */
static int check_metric(const json_t *it, const char *p, hf_jerr *e)
{
    char pv[64];
    int64_t x;
    double d;
    const char *ck, *k;
    json_t *vals, *v;
    int rc;
    if ((rc = check_item_head(it, p, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "time", 0, 0, INT64_MAX, &x, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "step", 0, INT64_MIN, INT64_MAX, &x, e))) return rc;
    if ((rc = hf_json_get_number(it, p, "epoch", 0, -1e18, 1e18, &d, e))) return rc;
    if ((rc = hf_json_get_string(it, p, "checkpoint", 0, HF_METRIC_PATH_MAX, &ck, e))) return rc;
    if ((rc = hf_json_get_object(it, p, "values", 1, &vals, e))) return rc;
    if (json_object_size(vals) > HF_METRIC_MAX_NAMES)
        return hf_jerr_set(e, p, "values", "more than %d metrics", HF_METRIC_MAX_NAMES);
    snprintf(pv, sizeof pv, "%s.values", p);
    json_object_foreach(vals, k, v) {
        if (!hf_metric_name_ok(k)) return hf_jerr_set(e, pv, k, "not a valid metric name");
        if (!json_is_number(v)) return hf_jerr_set(e, pv, k, "must be a number");
    }
    return 0;
}

/* logs[i]: one line of a trial's stdout or stderr. */
static int check_log(const json_t *it, const char *p, hf_jerr *e)
{
    int64_t x;
    const char *str;
    int rc;
    if ((rc = check_item_head(it, p, e))) return rc;
    if ((rc = hf_json_get_int(it, p, "time", 0, 0, INT64_MAX, &x, e))) return rc;
    if ((rc = hf_json_get_string(it, p, "stream", 1, 16, &str, e))) return rc;
    if (strcmp(str, "stdout") && strcmp(str, "stderr"))
        return hf_jerr_set(e, p, "stream", "must be stdout or stderr");
    return hf_json_get_string(it, p, "line", 1, 1u << 20, &str, e);
}

/* Check each item of the array arr (body[key], may be NULL) with check. */
static int check_items(const json_t *arr, const char *key, int (*check)(const json_t *, const char *, hf_jerr *),
                       hf_jerr *e)
{
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it) {
        char p[48];
        int rc;
        hf_jpath_index(p, sizeof p, key, i);
        if ((rc = check(it, p, e))) return rc;
    }
    return 0;
}

int proto_heartbeat_check(const json_t *body, hb_items *out, hf_jerr *e)
{
    static const char *const keys[] = {"running", "events", "metrics", "logs", "time", "slots_free",
                                       "instance", "batch", "cached", "draining", NULL};
    int rc;
    const char *inst = NULL;
    int64_t batch = 0;
    memset(out, 0, sizeof *out);
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "instance", 0, 64, &inst, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "batch", 0, 1, INT64_MAX, &batch, e))) return rc;
    if (inst && !*inst) return hf_jerr_set(e, "", "instance", "must not be empty");
    const json_t *dr = json_object_get(body, "draining");
    if (dr && !json_is_boolean(dr)) return hf_jerr_set(e, "", "draining", "must be a boolean");
    if (!inst != !json_object_get(body, "batch")) return hf_jerr_set(e, "", inst ? "batch" : "instance",
                                                                      "instance and batch go together");
    out->instance = inst;
    out->batch = inst ? batch : 0;
    if ((rc = check_cached(body, e, &out->cached))) return rc;
    if ((rc = check_running(body, e, &out->running))) return rc;
    /* All three arrays are fetched before any item is checked, so a bad
     * array type is reported before a bad item. */
    if ((rc = hf_json_get_array(body, "", "events", 0, MAX_HB_ITEMS, &out->events, e))) return rc;
    if ((rc = hf_json_get_array(body, "", "metrics", 0, MAX_HB_ITEMS, &out->metrics, e))) return rc;
    if ((rc = hf_json_get_array(body, "", "logs", 0, MAX_HB_ITEMS, &out->logs, e))) return rc;
    if ((rc = check_items(out->events, "events", check_event, e))) return rc;
    if ((rc = check_items(out->metrics, "metrics", check_metric, e))) return rc;
    return check_items(out->logs, "logs", check_log, e);
}

/* The rank an item refers to: explicit "rank", else the first rank of the
 * trial on this agent matching want (a predicate on rank state). */
trial_rank *proto_item_rank(trial *t, int64_t agent_id, const json_t *it, int want_unstarted)
{
    json_t *r = json_object_get(it, "rank");
    for (int k = 0; k < t->nranks; k++) {
        trial_rank *tr = &t->ranks[k];
        if (tr->agent_id != agent_id || tr->exited) continue;
        if (r) {
            if (tr->rank == json_integer_value(r)) return tr;
            continue;
        }
        if (want_unstarted && tr->st == R_STARTED) continue;
        return tr;
    }
    return NULL;
}

/* Is item (trial_id, attempt) current and placed on agent a? */
trial *proto_item_trial(sched *s, const agent *a, const json_t *it)
{
    trial *t = trial_find(s, json_integer_value(json_object_get(it, "trial_id")));
    if (!t || t->attempt != json_integer_value(json_object_get(it, "attempt")) || !t->ranks) return NULL;
    for (int k = 0; k < t->nranks; k++)
        if (t->ranks[k].agent_id == a->id) return t;
    return NULL;
}

/* ---------- assignments ---------- */

/* The size of x's code context, from its contexts row (schema 0006; the
 * first lookup is cached on x). RET the size, or -1 when no row says. */
static int64_t context_size(sched *s, experiment *x)
{
    sqlite3_stmt *st = NULL;
    if (x->context_size) return x->context_size;
    x->context_size = -1;
    if (sqlite3_prepare_v2(store_db(s->st), "SELECT size FROM contexts WHERE sha256=? AND size>=0 ORDER BY id LIMIT 1",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, x->spec.context, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) x->context_size = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return x->context_size;
}

/* The contract fields of rank tr of t (hf_trial.h): the values trials see
 * as HYPERFARM_* once the agent writes them. hparams is t's JSON text,
 * owned by the caller (free it); NULL when it cannot be encoded ("{}"). */
static void trial_contract(sched *s, trial *t, trial_rank *tr, hf_trial_vars *v, char **hparams)
{
    experiment *x = t->exp;
    agent *a0 = agent_find(s, t->ranks[0].agent_id);
    hf_trial_vars_init(v);
    v->trial_id = t->id;
    v->experiment_id = x->id;
    v->attempt = t->attempt;
    v->rank = tr->rank;
    v->world_size = t->nranks;
    v->local_rank = tr->local_rank;
    v->seed = expmeta_trial_seed(x->spec.seed, t->idx);
    v->budget = t->budget > 0 ? t->budget : x->spec.max_epochs;
    snprintf(v->master, sizeof v->master, "%s:%d", a0 ? a0->host : "127.0.0.1", t->port);
    v->hparams = *hparams = hf_json_dump(t->hparams);
    /* trial.distributed as experiment.c validated it: mode and backend
     * strings, ps and staleness integers. */
    json_t *dist = json_object_get(json_object_get(x->config, "trial"), "distributed");
    const char *mode = json_string_value(json_object_get(dist, "mode"));
    const char *backend = json_string_value(json_object_get(dist, "backend"));
    json_t *ps = json_object_get(dist, "ps"), *stale = json_object_get(dist, "staleness");
    if (mode) snprintf(v->dist_mode, sizeof v->dist_mode, "%s", mode);
    if (backend) snprintf(v->dist_backend, sizeof v->dist_backend, "%s", backend);
    if (json_is_integer(ps)) v->dist_ps = json_integer_value(ps);
    if (json_is_integer(stale)) v->dist_staleness = json_integer_value(stale);
    for (int k = 0; k < tr->ngpu && k < HF_TRIAL_MAX_GPUS; k++) v->gpus[v->ngpus++] = tr->gpu[k];
}

/* Launcher trials: rank 0 runs the command (mpirun) with a host file of
 * the placement, one entry per agent in rank order with as many slots as
 * ranks placed there; the other ranks hold their slots. */
static void assign_launcher(sched *s, trial *t, trial_rank *tr, json_t *as)
{
    json_object_set_new(as, "launcher", json_string("mpirun"));
    if (tr->rank != 0) {
        json_object_set_new(as, "hold", json_true());
        return;
    }
    json_t *hosts = json_array();
    for (int r = 0; r < t->nranks; r++) {
        int seen = 0, n = 0;
        for (int q = 0; q < r; q++) seen |= t->ranks[q].agent_id == t->ranks[r].agent_id;
        if (seen) continue;
        for (int q = r; q < t->nranks; q++) n += t->ranks[q].agent_id == t->ranks[r].agent_id;
        agent *ra = agent_find(s, t->ranks[r].agent_id);
        json_array_append_new(hosts, json_pack("{sssi}", "host", ra ? ra->host : "127.0.0.1", "slots", n));
    }
    json_object_set_new(as, "hosts", hosts);
}

json_t *proto_assignment(sched *s, trial *t, trial_rank *tr)
{
    experiment *x = t->exp;
    char ckdir[128], *hp = NULL;
    hf_trial_vars v;
    /* The trial's variables travel as typed fields (hf_trial_encode); "env"
     * is the experiment's trial.env alone, whose names experiment.c keeps
     * off the contract's (hf_trial_env_reserved). */
    trial_contract(s, t, tr, &v, &hp);
    snprintf(ckdir, sizeof ckdir, "experiments/%lld/trials/%lld/checkpoints", (long long)x->id, (long long)t->id);
    json_t *as = json_pack("{sOsosssisI}", "argv", x->spec.argv, "env",
                           x->spec.env ? json_copy(x->spec.env) : json_object(), "checkpoint_dir", ckdir,
                           "slots", tr->slots, "grace_ms", (json_int_t)x->spec.grace_ms);
    if (as && hf_trial_encode(&v, as)) {
        json_decref(as);
        as = NULL;
    }
    free(hp);
    if (!as) return NULL;
    if (x->spec.prompt_reports) json_object_set_new(as, "prompt_metric", json_string(x->spec.metric));
    if (x->spec.launcher_mpirun) assign_launcher(s, t, tr, as);
    /* The code context the agent unpacks into the trial's directory. */
    if (x->spec.context)
        json_object_set_new(as, "context", json_pack("{sssI}", "sha256", x->spec.context, "size",
                                                     (json_int_t)context_size(s, x)));
    /* The stored checkpoint to start from (sched_ckpt.c): the trial's own
     * newest after a restart, a promotion or a resume; a PBT child's
     * parent's newest. The agent fetches it before starting, or reports
     * start_failed: the trial never silently starts without it. */
    ckpt_ref ref;
    int has_restore = ckpt_restore_of(s, t, &ref);
    if (has_restore) json_object_set_new(as, "restore", ckpt_restore_json(&ref));
    /* PBT exploit without a stored checkpoint of the parent (a store-less
     * run): copy the parent's directory on the same agent (first attempt
     * only; restarts resume from the trial's own). With a restore the store
     * is the one truth: a copy could hold a newer, not yet uploaded step
     * and the child would start from other weights than the ones chosen
     * (on the parent's agent the restore is a hard link from its cache). */
    if (!has_restore && t->parent > 0 && t->attempt == 1 && t->restarts == 0) {
        char pdir[128];
        snprintf(pdir, sizeof pdir, "experiments/%lld/trials/%lld/checkpoints", (long long)x->id, (long long)t->parent);
        json_object_set_new(as, "copy_checkpoint_from", json_string(pdir));
    }
    return as;
}

/*
 * api_routes.c — the REST routes of docs/protocol.md (docs/openapi.yaml)
 * as one table, and one short handler per route (api_int.h).
 *
 * A row is {pattern, methods, role, body limit, flags, handler}, one per
 * (pattern, method) operation. In a pattern '*' is an id segment (a
 * positive integer, else 400 with field "id"), '@' an action segment
 * (pause, resume, cancel, extend, archive, unarchive) and '#' a key segment (any text, which
 * the handler checks: a checkpoint's SHA-256); patterns are disjoint, and
 * one trailing slash is tolerated. A request is answered, in this order:
 *
 *   no pattern matches  404 under /api, else not ours (static files)
 *   no row for method   405, Allow = the methods of every matching row
 *   role                401 no/invalid token, 403 wrong role (when a
 *                       token file is loaded; docs/api.md "Roles":
 *                       viewers and agents only GET)
 *   body over limit     413
 *   bad id              400 field "id"
 *   owner               F_OWNER / F_OWNER_TRIAL: 403 unless the token's
 *                       user owns the experiment (or the trial's) or is
 *                       an admin; the try is a REFUSED event
 *   F_JSON body         400 with the JSON parser's message
 *   then the handler.
 *
 * An F_STREAM row (the checkpoint upload) gets the same checks, except
 * the body's, at the request's first call (api_route_begin), where its
 * handler runs with k->begin set and opens the upload; the body then goes
 * to the upload, not to a buffer, and the handler runs again at the end.
 *
 * tests/system/test_eco_openapi.sh reads the table out of this file (rows
 * starting {"/pattern", "METHODS",) and compares it with
 * docs/openapi.yaml both ways: keep that shape.
 */
#include "scheduler/api/api_int.h"

#include "hf_err.h"
#include "scheduler/api/auth.h"
#include "scheduler/core/expmeta.h"
#include "common/hf_log.h"
#include "scheduler/api/metrics.h"
#include "scheduler/api/logpool.h"
#include "scheduler/api/logsearch.h"
#include "scheduler/api/query.h"
#include "scheduler/notify/webhook.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum route_role {
    ROLE_OPEN,     /* no token needed (/healthz) */
    ROLE_USER,     /* a user token; an agent token may GET */
    ROLE_AGENT,    /* an agent token only */
};

enum route_flag {
    F_JSON        = 1 << 0,   /* parse the body as JSON before the handler */
    F_QUERY_TOKEN = 1 << 1,   /* ?token= when there is no Authorization
                                 header (EventSource cannot set headers) */
    F_STREAM      = 1 << 2,   /* the body is streamed to the handler's upload
                                 (the row's body limit is not used) */
    F_OWNER       = 1 << 3,   /* changes experiment '*': its owner or an admin
                                 only (docs/api.md "Roles") */
    F_OWNER_TRIAL = 1 << 4,   /* changes trial '*': its experiment's owner or
                                 an admin only */
    F_NO_AGENT    = 1 << 5,   /* not even a GET with an agent token */
};

typedef enum MHD_Result route_fn(api_call *k);

typedef struct api_route {
    const char *pattern;
    const char *methods;   /* "GET", "GET, HEAD", "POST" */
    int         role;      /* ROLE_* */
    unsigned    body_max;  /* bytes; more is answered 413 */
    unsigned    flags;     /* F_* */
    route_fn   *fn;
} api_route;

/* ---------- handler helpers ---------- */

/* The core's answer: out (stolen) with status, or rc as its status. Call
 * the core before, not in the argument list: out must be read after the
 * call has set it. */
static enum MHD_Result reply(api_call *k, int rc, const char *what, unsigned status, json_t *out)
{
    if (rc) {
        json_decref(out);
        return api_send_rc(k->c, rc, &k->e, what);
    }
    return api_send_json(k->c, status, out);
}

const char *api_query_arg(const api_call *k, const char *key)
{
    return MHD_lookup_connection_value(k->c, MHD_GET_ARGUMENT_KIND, key);
}

/* ?max_points=N: 0 = no downsampling; 1 and 2 are raised to 3, the
 * fewest points LTTB keeps (downsample.h). */
static int query_max_points(api_call *k, int64_t *maxp)
{
    int rc = api_query_int(k->c, "max_points", 0, 100000, 0, maxp, &k->e);
    if (rc == 0 && *maxp > 0 && *maxp < 3) *maxp = 3;
    return rc;
}

/* ---------- owners (docs/api.md "Roles") ---------- */

/* May the request change what owner owns? Admins change anything; users
 * what they own; viewers and agents nothing. */
static int may_change(const api_call *k, const char *owner)
{
    return k->role == AUTH_ADMIN || (k->role == AUTH_USER && owner && strcmp(owner, k->user) == 0);
}

/* A refused change: an events row (type REFUSED, the user who tried; on
 * experiment exp_id, 0 = none), then 403 {"error": what and why}. */
static enum MHD_Result refuse(api_call *k, int64_t exp_id, int64_t trial_id, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result refuse(api_call *k, int64_t exp_id, int64_t trial_id, const char *field, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char d[480];   /* exp_id 0 (a global webhook): an events row with no experiment */
    snprintf(d, sizeof d, "refused (%s %s): %s", auth_role_name(k->role), k->user, msg);
    if (sched_refused_as(k->a->s, exp_id, trial_id, k->user, d))
        hf_warn("cannot record a refused request of %s (experiment %lld)", k->user, (long long)exp_id);
    hf_info("403 for %s %s: %s", auth_role_name(k->role), k->user, msg);
    return api_send_err(k->c, 403, field, "%s", msg);
}

/* Experiment id (is_trial 0) or trial id's experiment: 0 when the request
 * may change it (or it does not exist: the handler answers 404), else 1
 * with the 403 in *ret. verb says what was asked ("cancel"). */
static int owner_refused(api_call *k, int64_t id, int is_trial, const char *verb, enum MHD_Result *ret)
{
    char owner[AUTH_NAME_MAX + 1];
    int64_t xid = 0;
    if (k->role == AUTH_ADMIN) return 0;
    if (sched_owner_of(k->a->s, id, is_trial, &xid, owner, sizeof owner)) {
        if (k->role == AUTH_USER) return 0;   /* the handler's 404 */
        snprintf(owner, sizeof owner, "nobody");
        xid = is_trial ? 0 : id;
    }
    if (may_change(k, owner)) return 0;
    char what[64];
    if (is_trial) snprintf(what, sizeof what, "trial %lld of experiment %lld", (long long)id, (long long)xid);
    else snprintf(what, sizeof what, "experiment %lld", (long long)xid);
    if (k->role != AUTH_USER)
        *ret = refuse(k, xid, is_trial ? id : 0, NULL, "%s %s may only read: it may not %s %s (owned by %s)",
                      auth_role_name(k->role), k->user, verb, what, owner);
    else
        *ret = refuse(k, xid, is_trial ? id : 0, NULL, "%s is owned by %s; only its owner or an admin may %s it",
                      what, owner, verb);
    return 1;
}

static int parse_body(api_call *k, json_t **body)
{
    return hf_json_parse(k->rq->body.data, k->rq->body.len, HF_JSON_MAX_DEPTH, 1, body, &k->e);
}

static const char *peer_ip(struct MHD_Connection *c, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return NULL;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) return inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    if (sa->sa_family == AF_INET6)
        return inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
    return NULL;
}

/* ---------- handlers: health and metrics ---------- */

static enum MHD_Result h_healthz(api_call *k)
{
    int ok = store_health(k->a->st) == 0;
    return api_send_json(k->c, ok ? 200 : 503, json_pack("{sbss}", "ok", ok, "db", ok ? "ok" : "error"));
}

/* hyperfarm_checkpoint_experiment_bytes{experiment="ID"}: one line per
 * experiment that has stored checkpoints (ckretain.h). */
static int render_usage(api *a, hf_buf *b)
{
    ckretain_usage *u = NULL;
    size_t n = 0;
    if (!a->cr || ckretain_usage_all(a->cr, &u, &n)) return 0;   /* the rest of /metrics still answers */
    int rc = hf_buf_printf(b, "# HELP hyperfarm_checkpoint_experiment_bytes Bytes of the distinct checkpoint objects "
                              "an experiment's rows name.\n# TYPE hyperfarm_checkpoint_experiment_bytes gauge\n");
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = hf_buf_printf(b, "hyperfarm_checkpoint_experiment_bytes{experiment=\"%lld\"} %lld\n",
                           (long long)u[i].experiment_id, (long long)u[i].bytes);
    ckretain_stats cs;
    ckretain_get_stats(a->cr, &cs);
    if (rc == 0)
        rc = hf_buf_printf(b, "# HELP hyperfarm_checkpoint_freed_bytes_total Bytes of checkpoint objects removed "
                              "(retention, deletes, orphans).\n# TYPE hyperfarm_checkpoint_freed_bytes_total counter\n"
                              "hyperfarm_checkpoint_freed_bytes_total %lld\n",
                           (long long)cs.bytes_freed);
    free(u);
    return rc;
}

static enum MHD_Result h_metrics(api_call *k)
{
    sched_stats ss;
    hf_buf b;
    size_t len;
    sched_get_stats(k->a->s, &ss);
    if (k->a->ck) {
        int64_t objects, bytes;
        ckstore_stats(k->a->ck, &objects, &bytes);
        atomic_store(&metrics.checkpoint_objects, objects);
        atomic_store(&metrics.checkpoint_bytes, bytes);
    }
    hf_buf_init(&b, 1u << 20);
    if (metrics_render(&b, &ss) || render_usage(k->a, &b) || !b.data) {
        hf_buf_free(&b);
        return api_send_err(k->c, 500, NULL, "metrics too large");
    }
    char *text = hf_buf_take(&b, &len);
    return api_send_text(k->c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

static enum MHD_Result h_events(api_call *k) { return api_stream_events(k->a, k->c); }

/* Who the token is: the dashboard disables what it may not do. */
static enum MHD_Result h_whoami(api_call *k)
{
    return api_send_json(k->c, 200, json_pack("{sssssb}", "user", k->user, "role", auth_role_name(k->role), "tokens",
                                              k->a->au != NULL));
}

/* ---------- handlers: experiments ---------- */

/* "owner" of an experiment summary: its submitter, SCHED_OWNER_UNKNOWN
 * when none was recorded (docs/api.md "Roles"). */
static void add_owner(json_t *summary)
{
    const char *by = json_string_value(json_object_get(summary, "submitted_by"));
    if (json_is_object(summary)) json_object_set_new(summary, "owner", json_string(by ? by : SCHED_OWNER_UNKNOWN));
}

/* Add "checkpoint_bytes" to summary (0 when the store has nothing of it). */
static void add_usage(api *a, json_t *summary)
{
    add_owner(summary);
    ckretain_usage u;
    json_int_t id = json_integer_value(json_object_get(summary, "id"));
    if (a->cr && ckretain_usage_of(a->cr, id, &u) == 0)
        json_object_set_new(summary, "checkpoint_bytes", json_integer((json_int_t)u.bytes));
}

/* ?archived=1 lists archived experiments too. */
static enum MHD_Result h_exp_list(api_call *k)
{
    json_t *out = NULL, *x;
    int64_t archived;
    ckretain_usage *u = NULL;
    size_t n = 0, i, j = 0;
    if (api_query_int(k->c, "archived", 0, 1, 0, &archived, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    const char *tag = api_query_arg(k, "tag");
    if (tag && !expmeta_tag_ok(tag))
        return api_send_err(k->c, 400, "tag", "a tag is 1..%d characters of A-Z a-z 0-9 _ . : / = + -",
                            EXPMETA_MAX_TAG_LEN);
    int rc = sched_experiment_list_tagged(k->a->s, (int)archived, tag, &out);
    json_array_foreach(rc == 0 ? json_object_get(out, "experiments") : NULL, i, x) add_owner(x);
    if (rc == 0 && k->a->cr && ckretain_usage_all(k->a->cr, &u, &n) == 0) {
        json_array_foreach(json_object_get(out, "experiments"), i, x) {   /* both ordered by id */
            json_int_t id = json_integer_value(json_object_get(x, "id"));
            while (j < n && u[j].experiment_id < id) j++;
            json_object_set_new(x, "checkpoint_bytes", json_integer(j < n && u[j].experiment_id == id ? u[j].bytes : 0));
        }
    }
    free(u);
    return reply(k, rc, "experiment", 200, out);
}


static enum MHD_Result h_exp_submit(api_call *k)
{
    int64_t id = 0;
    enum MHD_Result ret;
    if (api_exp_context_missing(k, &ret)) return ret;
    int rc = sched_experiment_submit_as(k->a->s, k->body, k->user, 0, &id, &k->e);
    return reply(k, rc, "experiment", 201, rc ? NULL : json_pack("{sI}", "id", (json_int_t)id));
}

/* POST /experiments/{id}/fork: the body is the edited experiment file; the
 * new experiment records {id} as its parent. */
static enum MHD_Result h_exp_fork(api_call *k)
{
    int64_t id = 0;
    enum MHD_Result ret;
    if (api_exp_context_missing(k, &ret)) return ret;   /* a fork keeps (or changes) its code context */
    int rc = sched_experiment_submit_as(k->a->s, k->body, k->user, k->id, &id, &k->e);
    return reply(k, rc, "experiment", 201,
                 rc ? NULL : json_pack("{sIsI}", "id", (json_int_t)id, "parent_experiment", (json_int_t)k->id));
}

static enum MHD_Result h_exp_patch(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_patch(k->a->s, k->id, k->body, k->user, &out, &k->e);
    if (rc == 0) add_owner(out);
    return reply(k, rc, "experiment", 200, out);
}

/* The experiment's own events (not its trials' state changes) and every
 * event a user caused, oldest first. */
static enum MHD_Result h_exp_events(api_call *k)
{
    json_t *out = NULL;
    int64_t limit;
    if (api_query_int(k->c, "limit", 1, 10000, 1000, &limit, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    int rc = sched_experiment_get(k->a->s, k->id, &out);   /* 404 for an unknown experiment */
    json_decref(out);
    out = NULL;
    if (rc == 0) rc = query_experiment_events(k->a->st, k->id, limit, &out);
    return reply(k, rc, "experiment", 200, out);
}

static enum MHD_Result h_exp_get(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_get(k->a->s, k->id, &out);
    if (rc == 0) add_usage(k->a, out);
    return reply(k, rc, "experiment", 200, out);
}

/* DELETE /api/v1/experiments/{id}: rows in one transaction (409 while it
 * runs), then the objects no row names any more. */
static enum MHD_Result h_exp_delete(api_call *k)
{
    char (*objs)[CKSTORE_HASH_LEN + 1] = NULL;
    size_t n = 0;
    ckretain_usage u = {0};
    if (k->a->cr && (ckretain_usage_of(k->a->cr, k->id, &u) || ckretain_objects_of(k->a->cr, k->id, &objs, &n)))
        return api_send_err(k->c, 500, NULL, "cannot list the experiment's checkpoints");
    int rc = sched_experiment_delete_as(k->a->s, k->id, k->user, &k->e);
    if (rc == 0 && k->a->cr) ckretain_release(k->a->cr, (const char(*)[CKSTORE_HASH_LEN + 1])objs, n);
    free(objs);
    if (rc) return api_send_rc(k->c, rc, &k->e, "experiment");
    return api_send_json(k->c, 200, json_pack("{sIsbsI}", "id", (json_int_t)k->id, "deleted", 1,
                                              "checkpoint_bytes", (json_int_t)u.bytes));
}

/* pause | resume | cancel, or extend with a JSON body. */
static enum MHD_Result h_exp_action(api_call *k)
{
    json_t *out = NULL, *body = NULL;
    int rc;
    if (strcmp(k->act, "extend") == 0) {
        if (parse_body(k, &body)) return api_send_jerr(k->c, 400, &k->e);
        rc = sched_experiment_extend_as(k->a->s, k->id, body, k->user, &out, &k->e);
        json_decref(body);
    } else {
        rc = sched_experiment_action_as(k->a->s, k->id, k->act, k->user, &out, &k->e);
        /* Archiving drops the checkpoints now: the answer shows them gone. */
        if (rc == 0 && strcmp(k->act, "archive") == 0 && k->a->cr) ckretain_sweep(k->a->cr, 1);
    }
    if (rc == 0) add_usage(k->a, out);
    return reply(k, rc, "experiment", 200, out);
}

/* Sent as the core serialized it (per-trial cached views). */
static enum MHD_Result h_exp_trials(api_call *k)
{
    char *text = NULL;
    size_t len = 0;
    int rc = sched_experiment_trials_text(k->a->s, k->id, &text, &len);
    return rc ? api_send_rc(k->c, rc, NULL, "experiment") : api_send_text(k->c, 200, "application/json", text, len);
}

static enum MHD_Result h_exp_top(api_call *k)
{
    json_t *out = NULL;
    int64_t n;
    if (api_query_int(k->c, "k", 1, 10000, 10, &n, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    int rc = sched_experiment_top(k->a->s, k->id, n, &out);
    return reply(k, rc, "experiment", 200, out);
}

static enum MHD_Result h_exp_pareto(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_pareto(k->a->s, k->id, &out);
    return reply(k, rc, "experiment", 200, out);
}

static enum MHD_Result send_csv(struct MHD_Connection *c, const json_t *trials)
{
    hf_buf b;
    size_t len = 0;
    hf_buf_init(&b, 256u << 20);
    int rc = query_export_csv(trials, &b);
    char *text = rc ? NULL : hf_buf_take(&b, &len);
    hf_buf_free(&b);
    return text ? api_send_text(c, 200, "text/csv; charset=utf-8", text, len)
                : api_send_err(c, 500, NULL, "export failed (%s)", hf_strerror(rc));
}

/* ?format=json (default: summary and trials with their metric history) or csv. */
static enum MHD_Result h_exp_export(api_call *k)
{
    const char *fmt = api_query_arg(k, "format");
    json_t *sum = NULL, *trials = NULL, *out = NULL;
    enum MHD_Result ret;
    if (!fmt) fmt = "json";
    if (strcmp(fmt, "csv") && strcmp(fmt, "json")) return api_send_err(k->c, 400, "format", "must be csv or json");
    int rc = sched_experiment_export(k->a->s, k->id, &sum, &trials);
    if (rc) {
        ret = api_send_rc(k->c, rc, NULL, "experiment");
    } else if (strcmp(fmt, "csv") == 0) {
        ret = send_csv(k->c, trials);
    } else {
        rc = query_export_json(k->a->st, sum, trials, &out);
        ret = reply(k, rc, "experiment", 200, out);
    }
    json_decref(sum);
    json_decref(trials);
    return ret;
}

/* One metric of every trial (the dashboard's learning curves). */
static enum MHD_Result h_exp_metrics(api_call *k)
{
    int64_t after, maxp;
    json_t *out = NULL;
    const char *name = api_query_arg(k, "name");
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) || query_max_points(k, &maxp))
        return api_send_jerr(k->c, 400, &k->e);
    if (!name || !*name || strlen(name) > 64) return api_send_err(k->c, 400, "name", "required: a metric name");
    int rc = sched_experiment_get(k->a->s, k->id, &out);   /* 404 for an unknown experiment */
    json_decref(out);
    out = NULL;
    if (rc) return api_send_rc(k->c, rc, NULL, "experiment");
    rc = query_experiment_metrics(k->a->st, k->id, name, after, maxp, &out);
    return reply(k, rc, "experiment", 200, out);
}

/* fANOVA importance of the hyperparameters over the finished trials
 * (importance.h), from the cache while no trial finished since; ranked by
 * ?objective= (one of the experiment's objectives, default the first;
 * docs/search.md "Hyperparameter importance"). */
static enum MHD_Result h_exp_importance(api_call *k)
{
    json_t *sum = NULL, *trials = NULL, *out = NULL;
    enum MHD_Result r;
    const char *want = api_query_arg(k, "objective");
    int rc = sched_experiment_export(k->a->s, k->id, &sum, &trials);
    if (rc) goto end;
    /* Every objective: a list's "objectives", else the one "objective". */
    json_t *one = json_object_get(sum, "objective"), *objs = json_object_get(sum, "objectives"), *ob = one;
    size_t n = json_is_array(objs) ? json_array_size(objs) : 1, pick = 0;
    if (want) {
        for (pick = 0; pick < n; pick++) {
            ob = json_is_array(objs) ? json_array_get(objs, pick) : one;
            if (!strcmp(want, json_string_value(json_object_get(ob, "metric")) ?: "")) break;
        }
        if (pick == n) {
            char names[1024] = "";
            for (size_t i = 0; i < n; i++) {
                const json_t *oi = json_is_array(objs) ? json_array_get(objs, i) : one;
                size_t l = strlen(names);
                snprintf(names + l, sizeof names - l, "%s%s", i ? ", " : "",
                         json_string_value(json_object_get(oi, "metric")) ?: "");
            }
            r = api_send_err(k->c, 400, "objective", "not an objective of experiment %lld (one of: %s)",
                             (long long)k->id, names);
            goto out;
        }
    }
    /* The first objective is the trials' "objective"; another one its last value. */
    const char *metric = json_string_value(json_object_get(ob, "metric"));
    const json_t *hp = json_object_get(json_object_get(sum, "config"), "hyperparameters");
    rc = importance_cache_get(k->a->imp, k->id, pick ? metric : NULL, hp, trials, &out, &k->e);
    if (rc == 0) {
        json_object_set_new(out, "objective", json_string(metric ? metric : ""));
        json_object_set(out, "goal", json_object_get(ob, "goal") ?: json_null());
    }
end:
    r = reply(k, rc, "experiment", 200, out);
    out = NULL;
out:
    json_decref(out);
    json_decref(sum);
    json_decref(trials);
    return r;
}

/* ---------- handlers: trials ---------- */

static enum MHD_Result h_trial_get(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_get(k->a->s, k->id, &out);
    if (rc == 0) rc = query_trial_details(k->a->st, k->id, out);
    return reply(k, rc, "trial", 200, out);
}

enum MHD_Result api_no_such_trial(api_call *k)
{
    return api_send_err(k->c, 404, NULL, "no such trial %lld", (long long)k->id);
}

static enum MHD_Result h_trial_metrics(api_call *k)
{
    int64_t after, limit, maxp;
    json_t *out = NULL;
    const char *name = api_query_arg(k, "name");
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, QUERY_MAX_LIMIT, 10000, &limit, &k->e) || query_max_points(k, &maxp))
        return api_send_jerr(k->c, 400, &k->e);
    if (name && (!*name || strlen(name) > 64)) return api_send_err(k->c, 400, "name", "not a valid metric name");
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    int rc = query_metrics(k->a->st, k->id, name, after, limit, maxp, &out);
    return reply(k, rc, "trial", 200, out);
}

/* The search pool's done callback: the answer is ready. */
static void grep_done(void *conn) { MHD_resume_connection(conn); }

/* The answer of a search the pool finished (the handler's second call). */
static enum MHD_Result grep_answer(api_call *k)
{
    json_t *out = NULL;
    hf_jerr e;
    int rc = logjob_result(k->rq->search, &out, &e);
    logjob_release(k->rq->search);
    k->rq->search = NULL;
    if (rc == HF_ETOOBIG) return api_send_jerr(k->c, 400, &e);
    if (rc == HF_ECONN) return MHD_NO;   /* the client hung up: close */
    if (rc == HF_ESTATE) return api_send_err(k->c, 503, NULL, "the scheduler is stopping");
    return reply(k, rc, "trial", 200, out);
}

/* 429 with Retry-After: the user's or the pool's search limit. */
static enum MHD_Result grep_busy(api_call *k, int retry_s)
{
    char ra[16];
    snprintf(ra, sizeof ra, "%d", retry_s);
    json_t *o = json_pack("{ssss}", "error", k->e.msg, "field", "grep");
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return api_send_err(k->c, 500, NULL, "out of memory");
    const api_hdr h[] = {
        {"Content-Type", "application/json"}, {"Cache-Control", "no-store"},
        {"X-Content-Type-Options", "nosniff"}, {"Retry-After", ra}, {NULL, NULL},
    };
    return api_queue(k->c, 429, MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE), h);
}

/* ?grep=PAT[&regex=1][&icase=1][&after=SEQ][&limit=N] over one trial
 * (trial_id > 0) or a whole experiment (logsearch.h), run by the search
 * pool (logpool.h) while the connection is suspended: called again when
 * the pool has the answer. */
static enum MHD_Result grep_logs(api_call *k, int64_t trial_id, int64_t exp_id)
{
    int64_t after, limit, regex, icase;
    logsearch_pat *p = NULL;
    if (k->rq->search) return grep_answer(k);
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, LOGSEARCH_MAX_LIMIT, LOGSEARCH_DEFAULT_LIMIT, &limit, &k->e) ||
        api_query_int(k->c, "regex", 0, 1, 0, &regex, &k->e) || api_query_int(k->c, "icase", 0, 1, 0, &icase, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    int rc = logsearch_compile(api_query_arg(k, "grep"), (int)regex, (int)icase, &p, &k->e);
    if (rc == HF_EINVAL) return api_send_jerr(k->c, 400, &k->e);
    if (rc) return reply(k, rc, "trial", 200, NULL);
    logsearch_query q = {.trial_id = trial_id, .exp_id = exp_id, .after = after, .limit = limit};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(k->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int retry_s = 0;
    rc = logpool_submit(k->a->lp, k->user, p, &q, ci ? ci->connect_fd : -1, grep_done, k->c, &k->rq->search,
                        &retry_s, &k->e);
    if (rc == HF_ETOOBIG) return grep_busy(k, retry_s);
    if (rc == HF_ESTATE) return api_send_err(k->c, 503, NULL, "the scheduler is stopping");
    if (rc) return reply(k, rc, "trial", 200, NULL);
    MHD_suspend_connection(k->c);
    logjob_arm(k->a->lp, k->rq->search);
    return MHD_YES;
}

static enum MHD_Result h_exp_logs(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_get(k->a->s, k->id, &out);   /* 404 for an unknown experiment */
    json_decref(out);
    if (rc) return api_send_rc(k->c, rc, NULL, "experiment");
    return grep_logs(k, 0, k->id);
}

static enum MHD_Result h_trial_logs(api_call *k)
{
    int64_t after, limit;
    json_t *out = NULL;
    if (api_query_arg(k, "grep")) {
        if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
        return grep_logs(k, k->id, 0);
    }
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, QUERY_MAX_LIMIT, 1000, &limit, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    int rc = query_logs(k->a->st, k->id, after, limit, &out);
    return reply(k, rc, "trial", 200, out);
}

static enum MHD_Result h_trial_kill(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_kill_as(k->a->s, k->id, k->user, &out, &k->e);
    return reply(k, rc, "trial", 200, out);
}

static enum MHD_Result h_trial_patch(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_patch(k->a->s, k->id, k->body, k->user, &out, &k->e);
    return reply(k, rc, "trial", 200, out);
}

/* ---------- handlers: agents ---------- */

static enum MHD_Result h_agent_list(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_agent_list(k->a->s, &out);
    return reply(k, rc, "agent", 200, out);
}

/* The holder of an agent token, for the core's binding checks
 * (sched.h, sched_agent_register_as; docs/protocol.md "Agent tokens"); NULL without a token file. A
 * refusal of the binding (HF_EPERM) is a 403 naming why. */
static const char *agent_holder_of(const api_call *k) { return k->role == AUTH_AGENT ? k->user : NULL; }

static enum MHD_Result agent_reply(api_call *k, int rc, unsigned status, json_t *out)
{
    if (rc == HF_EPERM) return api_send_jerr(k->c, 403, &k->e);
    return reply(k, rc, "agent", status, out);
}

static enum MHD_Result h_agent_register(api_call *k)
{
    char ip[64];
    json_t *out = NULL;
    int rc = sched_agent_register_as(k->a->s, k->body, peer_ip(k->c, ip, sizeof ip), agent_holder_of(k), &out, &k->e);
    return agent_reply(k, rc, 201, out);
}

static enum MHD_Result h_agent_heartbeat(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_agent_heartbeat_as(k->a->s, k->id, k->body, agent_holder_of(k), &out, &k->e);
    return agent_reply(k, rc, 200, out);
}

/* ---------- handlers: webhooks (webhook.h) ---------- */

static enum MHD_Result no_webhooks(api_call *k)
{
    return api_send_err(k->c, 503, NULL, "webhooks are not available on this scheduler");
}

/* url without what may be secret: "scheme://host[:port]/…" (no user
 * info, path or query). */
static void webhook_redact(const char *url, char *out, size_t len)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    snprintf(out, len, "(redacted)");
    if (u && url && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        curl_url_get(u, CURLUPART_PORT, &port, 0);
        snprintf(out, len, "%s://%s%s%s/...", scheme, host, port ? ":" : "", port ? port : "");
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
}

static enum MHD_Result h_webhook_create(api_call *k)
{
    webhook_spec sp;
    json_t *out = NULL;
    if (!k->a->wh) return no_webhooks(k);
    if (webhook_spec_parse(k->body, &sp, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    if (sp.experiment_id > 0) {
        int rc = sched_experiment_get(k->a->s, sp.experiment_id, &out);
        json_decref(out);
        out = NULL;
        if (rc == HF_ENOTFOUND)
            return api_send_err(k->c, 400, "experiment_id", "no such experiment %lld", (long long)sp.experiment_id);
        enum MHD_Result ret;
        if (owner_refused(k, sp.experiment_id, 0, "add a webhook to", &ret)) return ret;
    } else if (k->role != AUTH_ADMIN) {
        return refuse(k, 0, 0, "experiment_id",
                      "only an admin may create a global webhook (one without experiment_id); %s is a %s", k->user,
                      auth_role_name(k->role));
    }
    if (webhook_url_check(k->a->wh, sp.url, &k->e)) return api_send_jerr(k->c, 403, &k->e);
    sp.owner = k->user;
    int rc = webhook_create(k->a->wh, &sp, &out);
    return reply(k, rc, "webhook", 201, out);
}

static enum MHD_Result h_webhook_list(api_call *k)
{
    json_t *out = NULL;
    if (!k->a->wh) return no_webhooks(k);
    int rc = webhook_list(k->a->wh, &out);
    size_t i;
    json_t *h;
    json_array_foreach(rc == 0 ? json_object_get(out, "webhooks") : NULL, i, h) {
        const char *owner = json_string_value(json_object_get(h, "owner"));
        if (k->role == AUTH_ADMIN || (owner && strcmp(owner, k->user) == 0)) continue;
        char red[WEBHOOK_URL_MAX + 16];
        webhook_redact(json_string_value(json_object_get(h, "url")), red, sizeof red);
        json_object_set_new(h, "url", json_string(red));
        json_object_set_new(h, "url_redacted", json_true());
    }
    return reply(k, rc, "webhook", 200, out);
}

/* May the request act on (verb: "delete", "test") hook k->id? 0 when it
 * may, else 1 with the 404 or 403 in *ret (docs/api.md "Roles"). */
static int hook_refused(api_call *k, const char *verb, enum MHD_Result *ret)
{
    char owner[AUTH_NAME_MAX + 1];
    int64_t xid = 0;
    int rc = webhook_owner(k->a->wh, k->id, owner, sizeof owner, &xid);
    if (rc) return (*ret = api_send_rc(k->c, rc, NULL, "webhook")), 1;
    if (xid == 0 && k->role != AUTH_ADMIN)
        return (*ret = refuse(k, 0, 0, NULL, "webhook %lld is global; only an admin may %s it", (long long)k->id,
                              verb)), 1;
    /* A per-experiment hook: its creator, the experiment's owner, or an admin. */
    if (xid > 0 && !may_change(k, owner)) {
        char what[48];
        snprintf(what, sizeof what, "%s webhook %lld of", verb, (long long)k->id);
        if (owner_refused(k, xid, 0, what, ret)) return 1;
    }
    return 0;
}

static enum MHD_Result h_webhook_delete(api_call *k)
{
    if (!k->a->wh) return no_webhooks(k);
    enum MHD_Result ret;
    if (hook_refused(k, "delete", &ret)) return ret;
    int rc = webhook_delete(k->a->wh, k->id);
    return reply(k, rc, "webhook", 200, rc ? NULL : json_pack("{sIsb}", "id", (json_int_t)k->id, "deleted", 1));
}

/* A webhook.test delivery through the outbox (webhook_test). */
static enum MHD_Result h_webhook_test(api_call *k)
{
    if (!k->a->wh) return no_webhooks(k);
    enum MHD_Result ret;
    json_t *out = NULL;
    if (hook_refused(k, "test", &ret)) return ret;
    int rc = webhook_test(k->a->wh, k->id, k->user, &out);
    return reply(k, rc, "webhook", 202, out);
}

static enum MHD_Result h_agent_wait(api_call *k)
{
    if (k->role == AUTH_AGENT) {
        int rc = sched_agent_may_speak(k->a->s, k->id, k->user, &k->e);
        if (rc) return agent_reply(k, rc, 200, NULL);
    }
    return api_stream_wait(k->a, k->c, k->id, k->rq);
}

/* ---------- the table ---------- */

#define USER_MAX  API_MAX_BODY_USER
#define AGENT_MAX API_MAX_BODY_AGENT

static const api_route routes[] = {
    /* pattern                       methods      role        body limit flags          handler */
    {"/healthz",                     "GET, HEAD", ROLE_OPEN,  USER_MAX,  0,             h_healthz},
    {"/metrics",                     "GET, HEAD", ROLE_USER,  USER_MAX,  0,             h_metrics},
    {"/api/v1/events",               "GET",       ROLE_USER,  USER_MAX,  F_QUERY_TOKEN, h_events},
    {"/api/v1/experiments",          "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_list},
    {"/api/v1/experiments",          "POST",      ROLE_USER,  USER_MAX,  F_JSON,        h_exp_submit},
    {"/api/v1/experiments/*",        "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_get},
    {"/api/v1/experiments/*",        "DELETE",    ROLE_USER,  USER_MAX,  F_OWNER,       h_exp_delete},
    {"/api/v1/experiments/*/trials", "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_trials},
    {"/api/v1/experiments/*/top",    "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_top},
    {"/api/v1/experiments/*/export", "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_export},
    {"/api/v1/experiments/*/metrics", "GET",      ROLE_USER,  USER_MAX,  0,             h_exp_metrics},
    {"/api/v1/experiments/*/importance", "GET",   ROLE_USER,  USER_MAX,  0,             h_exp_importance},
    {"/api/v1/experiments/*/logs",   "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_logs},
    {"/api/v1/experiments/*/pareto", "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_pareto},
    {"/api/v1/experiments/*/@",      "POST",      ROLE_USER,  USER_MAX,  F_OWNER,       h_exp_action},
    {"/api/v1/trials/*",             "GET",       ROLE_USER,  USER_MAX,  0,             h_trial_get},
    {"/api/v1/trials/*/metrics",     "GET",       ROLE_USER,  USER_MAX,  0,             h_trial_metrics},
    {"/api/v1/trials/*/logs",        "GET",       ROLE_USER,  USER_MAX,  0,             h_trial_logs},
    {"/api/v1/trials/*/kill",        "POST",      ROLE_USER,  USER_MAX,  F_OWNER_TRIAL, h_trial_kill},
    {"/api/v1/trials/*/checkpoints", "GET",       ROLE_USER,  USER_MAX,  0,             api_h_ckpt_list},
    {"/api/v1/trials/*/checkpoints", "PUT",       ROLE_AGENT, 0,         F_STREAM,      api_h_ckpt_put},
    {"/api/v1/trials/*/checkpoints", "POST",      ROLE_AGENT, USER_MAX,  F_JSON,        api_h_ckpt_register},
    {"/api/v1/checkpoints/#",        "GET, HEAD", ROLE_USER,  USER_MAX,  0,             api_h_ckpt_get},
    {"/api/v1/objects/#",            "GET, HEAD", ROLE_USER,  USER_MAX,  0,             api_h_ckpt_get},
    {"/api/v1/contexts",             "PUT",       ROLE_USER,  0,         F_STREAM,      api_h_ctx_put},
    {"/api/v1/contexts/#",           "GET, HEAD", ROLE_USER,  USER_MAX,  0,             api_h_ckpt_get},
    {"/api/v1/webhooks",             "GET",       ROLE_USER,  USER_MAX,  F_NO_AGENT,    h_webhook_list},
    {"/api/v1/webhooks",             "POST",      ROLE_USER,  USER_MAX,  F_JSON,        h_webhook_create},
    {"/api/v1/webhooks/*",           "DELETE",    ROLE_USER,  USER_MAX,  0,             h_webhook_delete},
    {"/api/v1/webhooks/*/test",      "POST",      ROLE_USER,  USER_MAX,  0,             h_webhook_test},
    {"/api/v1/agents",               "GET",       ROLE_USER,  USER_MAX,  0,             h_agent_list},
    {"/api/v1/agents",               "POST",      ROLE_AGENT, USER_MAX,  F_JSON,        h_agent_register},
    {"/api/v1/agents/*/heartbeat",   "POST",      ROLE_AGENT, AGENT_MAX, F_JSON,        h_agent_heartbeat},
    {"/api/v1/agents/*/wait",        "GET",       ROLE_AGENT, USER_MAX,  0,             h_agent_wait},
    /* the workflow of issue #17 (docs/scheduler.md "Workflow") */
    {"/api/v1/experiments/*",        "PATCH",     ROLE_USER,  USER_MAX,  F_JSON | F_OWNER, h_exp_patch},
    {"/api/v1/experiments/*/fork",   "POST",      ROLE_USER,  USER_MAX,  F_JSON,        h_exp_fork},
    {"/api/v1/experiments/*/events", "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_events},
    {"/api/v1/trials/*",             "PATCH",     ROLE_USER,  USER_MAX,  F_JSON | F_OWNER_TRIAL, h_trial_patch},
    /* owners and roles of issue #27 (docs/api.md "Roles") */
    {"/api/v1/whoami",               "GET",       ROLE_USER,  USER_MAX,  0,             h_whoami},
};

/* ---------- matching ---------- */

static int is_action(const char *seg, size_t n)
{
    static const char *const acts[] = {"pause", "resume", "cancel", "extend", "archive", "unarchive"};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (strlen(acts[i]) == n && memcmp(seg, acts[i], n) == 0) return 1;
    return 0;
}

/* A row's captured segments, as text (a longer segment is cut, which
 * makes it invalid for its parser: ids are at most 18 digits, keys 64). */
typedef struct route_caps {
    char id[32], act[16], key[72];
} route_caps;

/* Match url against pat, filling *cp. RET 1 on match. */
static int route_match(const char *pat, const char *url, route_caps *cp)
{
    const char *p = pat, *u = url;
    while (*p && *u) {
        if (*p == '*' || *p == '@' || *p == '#') {
            const char *e = u;
            while (*e && *e != '/') e++;
            size_t n = (size_t)(e - u);
            if (n == 0) return 0;
            if (*p == '@' && !is_action(u, n)) return 0;
            char *dst = *p == '*' ? cp->id : *p == '@' ? cp->act : cp->key;
            size_t dl = *p == '*' ? sizeof cp->id : *p == '@' ? sizeof cp->act : sizeof cp->key;
            if (n >= dl) n = dl - 1;
            memcpy(dst, u, n);
            dst[n] = 0;
            u = e;
            p++;
            continue;
        }
        if (*p != *u) return 0;
        p++;
        u++;
    }
    if (*u == '/' && u[1] == 0) u++;     /* tolerate one trailing slash */
    return *p == 0 && *u == 0;
}

/* Is method one of the comma-separated methods? */
static int method_allowed(const char *methods, const char *method)
{
    size_t ml = strlen(method);
    for (const char *p = methods; (p = strstr(p, method)) != NULL; p += ml)
        if ((p == methods || p[-1] == ' ') && (p[ml] == 0 || p[ml] == ',')) return 1;
    return 0;
}

static int is_get(const char *method) { return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0; }

typedef struct route_hit {
    const api_route *rt;   /* the row for the method, or NULL (405) */
    char allow[64];        /* methods of every row whose pattern matches */
    route_caps caps;       /* the row's captures */
} route_hit;

/* RET 1 when some row's pattern matches url, with *h filled. */
static int route_find(const char *url, const char *method, route_hit *h)
{
    int any = 0;
    memset(h, 0, sizeof *h);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        route_caps cp = {.id = ""};
        if (!route_match(routes[i].pattern, url, &cp)) continue;
        size_t n = strlen(h->allow);
        snprintf(h->allow + n, sizeof h->allow - n, "%s%s", any ? ", " : "", routes[i].methods);
        any = 1;
        if (!h->rt && method_allowed(routes[i].methods, method)) {
            h->rt = &routes[i];
            h->caps = cp;
        }
    }
    return any;
}

unsigned api_route_body_max(const char *url, const char *method)
{
    route_hit h;
    return route_find(url, method, &h) && h.rt ? h.rt->body_max : API_MAX_BODY_USER;
}

/* ---------- serving ---------- */

/* Strict positive integer id. */
static int parse_id(const char *s, int64_t *out)
{
    if (!*s || strlen(s) > 18) return HF_EINVAL;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return HF_EINVAL;
        v = v * 10 + (*p - '0');
    }
    if (v <= 0) return HF_EINVAL;
    *out = v;
    return 0;
}

/* The row's role against the request's token (a token file is loaded).
 * RET 0 when the request may go on, else 1 with *ret the 401/403. */
static int role_refused(const api *a, struct MHD_Connection *c, const api_route *rt, const char *method,
                        const char **user, int *role_out, enum MHD_Result *ret)
{
    const char *tok = auth_bearer(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    if (!tok && (rt->flags & F_QUERY_TOKEN)) tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    int role = auth_check_user(a->au, tok, user);
    *role_out = role;
    if (role == AUTH_NONE)
        *ret = api_send_401(c, tok ? "invalid token" : "missing bearer token");
    else if (rt->role == ROLE_AGENT && role != AUTH_AGENT)
        *ret = api_send_err(c, 403, NULL, "this route needs an agent token");
    else if (rt->role == ROLE_USER && role == AUTH_AGENT && (rt->flags & F_NO_AGENT))
        *ret = api_send_err(c, 403, NULL, "an agent token may not read %s", rt->pattern);
    else if (rt->role == ROLE_USER && role == AUTH_AGENT && !is_get(method))
        *ret = api_send_err(c, 403, NULL, "this route needs a user token");
    /* A viewer only reads; a change to an experiment or trial is refused
     * after its id is known (serve: the events table records the try). */
    else if (rt->role == ROLE_USER && role == AUTH_VIEWER && !is_get(method) &&
             !(rt->flags & (F_OWNER | F_OWNER_TRIAL))) {
        char msg[200], d[300];
        snprintf(msg, sizeof msg, "viewer %s may only read: %s %s needs a user or admin token", *user, method,
                 rt->pattern);
        snprintf(d, sizeof d, "refused (viewer %s): %s", *user, msg);
        sched_refused_as(a->s, 0, 0, *user, d);   /* no experiment: the events table keeps it all the same */
        *ret = api_send_err(c, 403, NULL, "%s", msg);
    } else {
        return 0;
    }
    return 1;
}

/* What a change route asks, for a refusal: "cancel", "delete", ... */
static const char *verb_of(const api_route *rt, const char *method, const char *act)
{
    if (*act) return act;
    if (strcmp(method, "DELETE") == 0) return "delete";
    if (strcmp(method, "PATCH") == 0) return (rt->flags & F_OWNER_TRIAL) ? "edit the notes of" : "edit";
    if (strstr(rt->pattern, "/kill")) return "kill";
    return "change";
}

/* The checks of the file's header comment, then the handler; begin: the
 * first call of an F_STREAM route (no body yet). */
static enum MHD_Result serve(api *a, struct MHD_Connection *c, const char *method, req *rq, const route_hit *h,
                             int begin)
{
    const api_route *rt = h->rt;
    enum MHD_Result ret;
    const char *user = "local";
    int role = a->au ? AUTH_NONE : AUTH_ADMIN;   /* no token file: one trusted operator */
    if (!rt) return api_send_405(c, h->allow, 1);
    if (a->au && rt->role != ROLE_OPEN && role_refused(a, c, rt, method, &user, &role, &ret)) return ret;
    if (rq->too_big) return api_send_err(c, 413, NULL, "request body larger than %u bytes", rt->body_max);
    api_call k = {.a = a, .c = c, .rq = rq, .act = h->caps.act, .key = h->caps.key, .begin = begin,
                  .user = user, .role = role};
    hf_jerr_clear(&k.e);
    if (h->caps.id[0] && parse_id(h->caps.id, &k.id))
        return api_send_err(c, 400, "id", "\"%s\" is not a valid id (a positive integer)", h->caps.id);
    if ((rt->flags & (F_OWNER | F_OWNER_TRIAL)) &&
        owner_refused(&k, k.id, (rt->flags & F_OWNER_TRIAL) != 0, verb_of(rt, method, k.act), &ret))
        return ret;
    if ((rt->flags & F_JSON) && parse_body(&k, &k.body)) return api_send_jerr(c, 400, &k.e);
    ret = rt->fn(&k);
    json_decref(k.body);
    return ret;
}

int api_route_serve(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq,
                    enum MHD_Result *ret)
{
    route_hit h;
    if (route_find(url, method, &h)) {
        *ret = serve(a, c, method, rq, &h, 0);
        return 0;
    }
    if (strncmp(url, "/api/", 5) == 0 || strcmp(url, "/api") == 0) {
        *ret = api_send_err(c, 404, NULL, "no such route: %s %s", method, url);
        return 0;
    }
    return HF_ENOTFOUND;
}

int api_route_begin(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq,
                    enum MHD_Result *ret)
{
    route_hit h;
    if (strlen(url) > 2048 || !route_find(url, method, &h) || !h.rt || !(h.rt->flags & F_STREAM)) return 0;
    *ret = serve(a, c, method, rq, &h, 1);
    if (!rq->streamed) rq->answered = 1;   /* refused: an error is queued */
    return 1;
}

/*
 * api_routes.c — the REST routes of docs/protocol.md (docs/openapi.yaml)
 * as one table, and one short handler per route (api_int.h).
 *
 * A row is {pattern, methods, role, body limit, flags, handler}, one per
 * (pattern, method) operation. In a pattern '*' is an id segment (a
 * positive integer, else 400 with field "id"), '@' an action segment
 * (pause, resume, cancel, extend) and '#' a key segment (any text, which
 * the handler checks: a checkpoint's SHA-256); patterns are disjoint, and
 * one trailing slash is tolerated. A request is answered, in this order:
 *
 *   no pattern matches  404 under /api, else not ours (static files)
 *   no row for method   405, Allow = the methods of every matching row
 *   role                401 no/invalid token, 403 wrong role (when a
 *                       token file is loaded; docs/protocol.md "Roles")
 *   body over limit     413
 *   bad id              400 field "id"
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
#include "scheduler/api_int.h"

#include "hf_err.h"
#include "scheduler/metrics.h"
#include "scheduler/query.h"

#include <arpa/inet.h>
#include <netinet/in.h>
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
};

/* One request being answered, as a handler sees it. */
typedef struct api_call {
    api *a;
    struct MHD_Connection *c;
    req *rq;
    int64_t     id;      /* the '*' segment; 0 when the pattern has none */
    const char *act;     /* the '@' segment; "" when none */
    const char *key;     /* the '#' segment; "" when none */
    int         begin;   /* F_STREAM: 1 at the first call (headers only), 0 at the last */
    json_t     *body;    /* the parsed body of an F_JSON route (owned by api_route_serve), else NULL */
    hf_jerr     e;       /* cleared; the core's error for api_send_rc */
} api_call;

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

static const char *query_arg(const api_call *k, const char *key)
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
    if (metrics_render(&b, &ss) || !b.data) {
        hf_buf_free(&b);
        return api_send_err(k->c, 500, NULL, "metrics too large");
    }
    char *text = hf_buf_take(&b, &len);
    return api_send_text(k->c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

static enum MHD_Result h_events(api_call *k) { return api_stream_events(k->a, k->c); }

/* ---------- handlers: experiments ---------- */

static enum MHD_Result h_exp_list(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_list(k->a->s, &out);
    return reply(k, rc, "experiment", 200, out);
}

static enum MHD_Result h_exp_submit(api_call *k)
{
    int64_t id = 0;
    int rc = sched_experiment_submit(k->a->s, k->body, &id, &k->e);
    return reply(k, rc, "experiment", 201, rc ? NULL : json_pack("{sI}", "id", (json_int_t)id));
}

static enum MHD_Result h_exp_get(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_get(k->a->s, k->id, &out);
    return reply(k, rc, "experiment", 200, out);
}

/* pause | resume | cancel, or extend with a JSON body. */
static enum MHD_Result h_exp_action(api_call *k)
{
    json_t *out = NULL, *body = NULL;
    int rc;
    if (strcmp(k->act, "extend") == 0) {
        if (parse_body(k, &body)) return api_send_jerr(k->c, 400, &k->e);
        rc = sched_experiment_extend(k->a->s, k->id, body, &out, &k->e);
        json_decref(body);
    } else {
        rc = sched_experiment_action(k->a->s, k->id, k->act, &out, &k->e);
    }
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
    const char *fmt = query_arg(k, "format");
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
    const char *name = query_arg(k, "name");
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

/* ---------- handlers: trials ---------- */

static enum MHD_Result h_trial_get(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_get(k->a->s, k->id, &out);
    if (rc == 0) rc = query_trial_details(k->a->st, k->id, out);
    return reply(k, rc, "trial", 200, out);
}

static enum MHD_Result no_such_trial(api_call *k)
{
    return api_send_err(k->c, 404, NULL, "no such trial %lld", (long long)k->id);
}

static enum MHD_Result h_trial_metrics(api_call *k)
{
    int64_t after, limit, maxp;
    json_t *out = NULL;
    const char *name = query_arg(k, "name");
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, QUERY_MAX_LIMIT, 10000, &limit, &k->e) || query_max_points(k, &maxp))
        return api_send_jerr(k->c, 400, &k->e);
    if (name && (!*name || strlen(name) > 64)) return api_send_err(k->c, 400, "name", "not a valid metric name");
    if (!sched_trial_exists(k->a->s, k->id)) return no_such_trial(k);
    int rc = query_metrics(k->a->st, k->id, name, after, limit, maxp, &out);
    return reply(k, rc, "trial", 200, out);
}

static enum MHD_Result h_trial_logs(api_call *k)
{
    int64_t after, limit;
    json_t *out = NULL;
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, QUERY_MAX_LIMIT, 1000, &limit, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    if (!sched_trial_exists(k->a->s, k->id)) return no_such_trial(k);
    int rc = query_logs(k->a->st, k->id, after, limit, &out);
    return reply(k, rc, "trial", 200, out);
}

static enum MHD_Result h_trial_kill(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_kill(k->a->s, k->id, &out, &k->e);
    return reply(k, rc, "trial", 200, out);
}

/* ---------- handlers: checkpoints (ckstore.h) ---------- */

#define SHA_HEADER "X-Hyperfarm-Sha256"

static enum MHD_Result no_ckstore(api_call *k)
{
    return api_send_err(k->c, 503, NULL, "this scheduler has no checkpoint store");
}

/* ?step=N&attempt=A, both required. RET 0 or HF_EINVAL with k->e. */
static int ckpt_args(api_call *k, int64_t *step, int64_t *attempt)
{
    if (api_query_int(k->c, "step", 0, INT64_MAX, -1, step, &k->e) ||
        api_query_int(k->c, "attempt", 0, INT32_MAX, -1, attempt, &k->e))
        return HF_EINVAL;
    if (*step < 0) return hf_jerr_set(&k->e, "step", NULL, "required: the checkpoint's step (an integer >= 0)");
    if (*attempt < 0) return hf_jerr_set(&k->e, "attempt", NULL, "required: the trial's attempt (an integer >= 0)");
    return 0;
}

/* Content-Length as a byte count. RET 0 or HF_EINVAL. */
static int content_length(struct MHD_Connection *c, int64_t *size)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int64_t n = 0;
    if (!v || !*v || strlen(v) > 18) return HF_EINVAL;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return HF_EINVAL;
        n = n * 10 + (*p - '0');
    }
    *size = n;
    return 0;
}

/* The first call of an upload: everything the headers say is checked
 * before a byte of the body is read; then the upload is opened. */
static enum MHD_Result ckpt_put_begin(api_call *k)
{
    int64_t step, attempt, size;
    const char *sha = MHD_lookup_connection_value(k->c, MHD_HEADER_KIND, SHA_HEADER);
    if (ckpt_args(k, &step, &attempt)) return api_send_jerr(k->c, 400, &k->e);
    if (!ckstore_hash_valid(sha))
        return api_send_err(k->c, 400, SHA_HEADER, "required: the body's SHA-256 as 64 lowercase hex characters");
    if (content_length(k->c, &size))
        return api_send_err(k->c, 411, "Content-Length", "required: the body's size in bytes (no chunked upload)");
    if (!sched_trial_exists(k->a->s, k->id)) return no_such_trial(k);
    int rc = ckstore_upload_begin(k->a->ck, sha, size, &k->rq->up);
    if (rc == HF_ETOOBIG)
        return api_send_err(k->c, 413, "Content-Length", "%lld bytes: larger than this store accepts (--max-checkpoint-mb)",
                            (long long)size);
    if (rc) return api_send_rc(k->c, rc, NULL, "checkpoint");
    k->rq->streamed = 1;
    return MHD_YES;
}

/* PUT /api/v1/trials/{id}/checkpoints: the body, streamed into the store,
 * becomes visible only once its size and hash are the declared ones and
 * it is durable; then its row is recorded. */
static enum MHD_Result h_ckpt_put(api_call *k)
{
    ckstore_info info = {.step = 0};
    char msg[256];
    if (!k->a->ck) return no_ckstore(k);
    if (k->begin) return ckpt_put_begin(k);
    int rc = ckstore_upload_commit(k->rq->up, &info, msg, sizeof msg);
    k->rq->up = NULL;
    if (rc == HF_ECORRUPT)
        return api_send_err(k->c, 422, strncmp(msg, SHA_HEADER, strlen(SHA_HEADER)) ? "Content-Length" : SHA_HEADER,
                            "%s: nothing was stored", msg);
    if (rc == 0 && (rc = ckpt_args(k, &info.step, &info.attempt)) == 0) rc = ckstore_record(k->a->ck, k->id, &info);
    if (rc) return api_send_rc(k->c, rc, &k->e, "trial");
    return api_send_json(k->c, 201, json_pack("{sssIsIsI}", "sha256", info.sha256, "size", (json_int_t)info.size,
                                              "step", (json_int_t)info.step, "attempt", (json_int_t)info.attempt));
}

static enum MHD_Result h_ckpt_list(api_call *k)
{
    json_t *out = NULL;
    if (!k->a->ck) return no_ckstore(k);
    if (!sched_trial_exists(k->a->s, k->id)) return no_such_trial(k);
    int rc = ckstore_list(k->a->ck, k->id, &out);
    return reply(k, rc, "trial", 200, out);
}

/* GET /api/v1/checkpoints/{sha256}: the object's bytes, sent from its file. */
static enum MHD_Result h_ckpt_get(api_call *k)
{
    int fd = -1;
    int64_t size = 0;
    if (!k->a->ck) return no_ckstore(k);
    int rc = ckstore_open_object(k->a->ck, k->key, &fd, &size);
    if (rc == HF_EINVAL) return api_send_err(k->c, 400, "sha256", "not a SHA-256 (64 lowercase hex characters)");
    if (rc == HF_ENOTFOUND) return api_send_err(k->c, 404, NULL, "no such checkpoint %s", k->key);
    if (rc) return api_send_rc(k->c, rc, NULL, "checkpoint");
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)size, fd);
    if (!r) { close(fd); return MHD_NO; }
    const api_hdr h[] = {
        {"Content-Type", "application/octet-stream"},
        {SHA_HEADER, k->key},
        {"Cache-Control", "private, max-age=31536000, immutable"},   /* content-addressed */
        {NULL, NULL},
    };
    return api_queue(k->c, 200, r, h);
}

/* ---------- handlers: agents ---------- */

static enum MHD_Result h_agent_list(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_agent_list(k->a->s, &out);
    return reply(k, rc, "agent", 200, out);
}

static enum MHD_Result h_agent_register(api_call *k)
{
    char ip[64];
    json_t *out = NULL;
    int rc = sched_agent_register(k->a->s, k->body, peer_ip(k->c, ip, sizeof ip), &out, &k->e);
    return reply(k, rc, "agent", 201, out);
}

static enum MHD_Result h_agent_heartbeat(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_agent_heartbeat(k->a->s, k->id, k->body, &out, &k->e);
    return reply(k, rc, "agent", 200, out);
}

static enum MHD_Result h_agent_wait(api_call *k) { return api_stream_wait(k->a, k->c, k->id, k->rq); }

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
    {"/api/v1/experiments/*/trials", "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_trials},
    {"/api/v1/experiments/*/top",    "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_top},
    {"/api/v1/experiments/*/export", "GET",       ROLE_USER,  USER_MAX,  0,             h_exp_export},
    {"/api/v1/experiments/*/metrics", "GET",      ROLE_USER,  USER_MAX,  0,             h_exp_metrics},
    {"/api/v1/experiments/*/@",      "POST",      ROLE_USER,  USER_MAX,  0,             h_exp_action},
    {"/api/v1/trials/*",             "GET",       ROLE_USER,  USER_MAX,  0,             h_trial_get},
    {"/api/v1/trials/*/metrics",     "GET",       ROLE_USER,  USER_MAX,  0,             h_trial_metrics},
    {"/api/v1/trials/*/logs",        "GET",       ROLE_USER,  USER_MAX,  0,             h_trial_logs},
    {"/api/v1/trials/*/kill",        "POST",      ROLE_USER,  USER_MAX,  0,             h_trial_kill},
    {"/api/v1/trials/*/checkpoints", "GET",       ROLE_USER,  USER_MAX,  0,             h_ckpt_list},
    {"/api/v1/trials/*/checkpoints", "PUT",       ROLE_AGENT, 0,         F_STREAM,      h_ckpt_put},
    {"/api/v1/checkpoints/#",        "GET, HEAD", ROLE_USER,  USER_MAX,  0,             h_ckpt_get},
    {"/api/v1/agents",               "GET",       ROLE_USER,  USER_MAX,  0,             h_agent_list},
    {"/api/v1/agents",               "POST",      ROLE_AGENT, USER_MAX,  F_JSON,        h_agent_register},
    {"/api/v1/agents/*/heartbeat",   "POST",      ROLE_AGENT, AGENT_MAX, F_JSON,        h_agent_heartbeat},
    {"/api/v1/agents/*/wait",        "GET",       ROLE_AGENT, USER_MAX,  0,             h_agent_wait},
};

/* ---------- matching ---------- */

static int is_action(const char *seg, size_t n)
{
    static const char *const acts[] = {"pause", "resume", "cancel", "extend"};
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
                        enum MHD_Result *ret)
{
    const char *tok = auth_bearer(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    if (!tok && (rt->flags & F_QUERY_TOKEN)) tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    int role = auth_check(a->au, tok);
    if (role == AUTH_NONE)
        *ret = api_send_401(c, tok ? "invalid token" : "missing bearer token");
    else if (rt->role == ROLE_AGENT && role != AUTH_AGENT)
        *ret = api_send_err(c, 403, NULL, "this route needs an agent token");
    else if (rt->role == ROLE_USER && role == AUTH_AGENT && !is_get(method))
        *ret = api_send_err(c, 403, NULL, "this route needs a user token");
    else
        return 0;
    return 1;
}

/* The checks of the file's header comment, then the handler; begin: the
 * first call of an F_STREAM route (no body yet). */
static enum MHD_Result serve(api *a, struct MHD_Connection *c, const char *method, req *rq, const route_hit *h,
                             int begin)
{
    const api_route *rt = h->rt;
    enum MHD_Result ret;
    if (!rt) return api_send_405(c, h->allow, 1);
    if (a->au && rt->role != ROLE_OPEN && role_refused(a, c, rt, method, &ret)) return ret;
    if (rq->too_big) return api_send_err(c, 413, NULL, "request body larger than %u bytes", rt->body_max);
    api_call k = {.a = a, .c = c, .rq = rq, .act = h->caps.act, .key = h->caps.key, .begin = begin};
    hf_jerr_clear(&k.e);
    if (h->caps.id[0] && parse_id(h->caps.id, &k.id))
        return api_send_err(c, 400, "id", "\"%s\" is not a valid id (a positive integer)", h->caps.id);
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

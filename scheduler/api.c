/*
 * api.c — HTTP routes (see api.h).
 *
 * A request goes: first call (headers) -> allocate a request context;
 * body chunks -> appended to a bounded buffer (beyond the route's limit
 * they are read and discarded, and the answer is 413); last call ->
 * route, authorise, parse, call the core, answer JSON. Every error is
 * {"error": "...", "field": "..."} with the status of docs/protocol.md.
 * Unknown routes answer 404, known routes with a wrong method 405 with an
 * Allow header.
 */
#include "scheduler/api.h"

#include "hf_buf.h"
#include "hf_err.h"
#include "hf_json.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/metrics.h"
#include "scheduler/query.h"
#include "scheduler/webfs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define API_ABSURD_BODY  (64u << 20)   /* refuse before reading */

struct api {
    struct MHD_Daemon *d;
    sched      *s;
    store      *st;
    events_hub *ev;
    const auth *au;
    char       *web_root;       /* realpath of --web, or NULL */
    char       *cert, *key;     /* PEM in memory for MHD */
    int         port;
    doorbell   *bell;
    atomic_int  stopping;       /* /wait answers at once from now on */
};

typedef struct req {
    hf_buf  body;
    int     too_big;
    int64_t t0_us;
    int     parked;            /* a /wait parked in the doorbell (suspended) */
    int     is_wait;           /* not counted in the request latency histogram */
    doorbell_waiter w;
} req;

typedef struct sse_ctx {
    struct MHD_Connection *conn;
    events_hub *ev;
    events_sub *sub;
    int         suspended;
} sse_ctx;

/* ---------- responses ---------- */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
                                 size_t len, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (allow) MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&metrics.http_requests[status / 100 < 6 ? status / 100 : 0], 1);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *v /* stolen */)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    if (!s) {
        s = strdup("{\"error\":\"out of memory\"}");
        status = 500;
        if (!s) return MHD_NO;
    }
    return send_text(c, status, "application/json", s, strlen(s), NULL);
}

static enum MHD_Result send_err(struct MHD_Connection *c, unsigned status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_err(struct MHD_Connection *c, unsigned status, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{ss}", "error", msg);
    if (o && field && *field) json_object_set_new(o, "field", json_string(field));
    return send_json(c, status, o);
}

static enum MHD_Result send_jerr(struct MHD_Connection *c, unsigned status, const hf_jerr *e)
{
    return send_json(c, status, hf_jerr_json(e));
}

/* Map a core return code to a status and send. */
static enum MHD_Result send_rc(struct MHD_Connection *c, int rc, const hf_jerr *e, const char *what)
{
    switch (rc) {
    case HF_EINVAL: case HF_EPARSE:
        return e && e->msg[0] ? send_jerr(c, 400, e) : send_err(c, 400, NULL, "invalid input");
    case HF_ENOTFOUND:
        return e && e->msg[0] ? send_jerr(c, 404, e) : send_err(c, 404, NULL, "no such %s", what);
    case HF_ESTATE:
        return e && e->msg[0] ? send_jerr(c, 409, e) : send_err(c, 409, NULL, "not allowed in the current state");
    case HF_ENOSPC:
        return send_err(c, 507, NULL, "the scheduler's disk is full: nothing was stored; free space and retry");
    case HF_ENOMEM:
        return send_err(c, 500, NULL, "out of memory");
    default:
        return send_err(c, 500, NULL, "store failure (%s)", hf_strerror(rc));
    }
}

/* ---------- routing ---------- */

enum route_id {
    R_HEALTHZ, R_METRICS, R_EVENTS, R_EXPS, R_EXP, R_EXP_ACTION, R_EXP_TRIALS, R_EXP_TOP, R_EXP_EXPORT, R_EXP_METRICS,
    R_TRIAL, R_TRIAL_METRICS, R_TRIAL_LOGS, R_TRIAL_KILL, R_AGENTS, R_AGENT_HB, R_AGENT_WAIT, R_NONE
};

typedef struct route {
    int         id;
    const char *pattern;     /* '*' = an id segment, '@' = an action segment */
    const char *allow;       /* "GET", "POST", "GET, POST" */
} route;

static const route routes[] = {
    {R_HEALTHZ, "/healthz", "GET, HEAD"},
    {R_METRICS, "/metrics", "GET, HEAD"},
    {R_EVENTS, "/api/v1/events", "GET"},
    {R_EXPS, "/api/v1/experiments", "GET, POST"},
    {R_EXP, "/api/v1/experiments/*", "GET"},
    {R_EXP_TRIALS, "/api/v1/experiments/*/trials", "GET"},
    {R_EXP_TOP, "/api/v1/experiments/*/top", "GET"},
    {R_EXP_EXPORT, "/api/v1/experiments/*/export", "GET"},
    {R_EXP_METRICS, "/api/v1/experiments/*/metrics", "GET"},
    {R_EXP_ACTION, "/api/v1/experiments/*/@", "POST"},
    {R_TRIAL, "/api/v1/trials/*", "GET"},
    {R_TRIAL_METRICS, "/api/v1/trials/*/metrics", "GET"},
    {R_TRIAL_LOGS, "/api/v1/trials/*/logs", "GET"},
    {R_TRIAL_KILL, "/api/v1/trials/*/kill", "POST"},
    {R_AGENTS, "/api/v1/agents", "GET, POST"},
    {R_AGENT_HB, "/api/v1/agents/*/heartbeat", "POST"},
    {R_AGENT_WAIT, "/api/v1/agents/*/wait", "GET"},
};

static int is_action(const char *seg, size_t n)
{
    static const char *const acts[] = {"pause", "resume", "cancel", "extend"};
    for (size_t i = 0; i < 4; i++)
        if (strlen(acts[i]) == n && memcmp(seg, acts[i], n) == 0) return 1;
    return 0;
}

/* Match url against pattern; capture the id segment (as text) and the
 * action. RET 1 on match. */
static int route_match(const char *pat, const char *url, char *id, size_t idlen, char *act, size_t actlen)
{
    const char *p = pat, *u = url;
    while (*p && *u) {
        if (*p == '*' || *p == '@') {
            const char *e = u;
            while (*e && *e != '/') e++;
            size_t n = (size_t)(e - u);
            if (n == 0) return 0;
            if (*p == '@' && !is_action(u, n)) return 0;
            char *dst = *p == '*' ? id : act;
            size_t dl = *p == '*' ? idlen : actlen;
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

static int method_allowed(const char *allow, const char *method)
{
    size_t ml = strlen(method);
    for (const char *p = allow; (p = strstr(p, method)) != NULL; p += ml)
        if ((p == allow || p[-1] == ' ') && (p[ml] == 0 || p[ml] == ',')) return 1;
    return 0;
}

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

/* Integer query argument with bounds; absent -> dflt. */
static int query_int(struct MHD_Connection *c, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                     int64_t *out, hf_jerr *e)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    *out = dflt;
    if (!v) return 0;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno) return hf_jerr_set(e, key, NULL, "must be an integer");
    if (x < lo || x > hi) return hf_jerr_set(e, key, NULL, "must be in [%lld, %lld]", (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

/* ---------- SSE ---------- */

static void sse_wake(void *arg)
{
    sse_ctx *x = arg;
    if (x->suspended) {
        x->suspended = 0;
        MHD_resume_connection(x->conn);
    }
}

static void sse_sleep(void *arg)
{
    sse_ctx *x = arg;
    if (!x->suspended) {
        x->suspended = 1;
        MHD_suspend_connection(x->conn);
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse_ctx *x = cls;
    ssize_t n = events_read(x->ev, x->sub, buf, max);
    if (n < 0) return MHD_CONTENT_READER_END_OF_STREAM;
    return n;
}

static void sse_free(void *cls)
{
    sse_ctx *x = cls;
    events_unsubscribe(x->ev, x->sub);
    free(x);
}

static enum MHD_Result serve_events(api *a, struct MHD_Connection *c)
{
    sse_ctx *x = calloc(1, sizeof *x);
    if (!x) return send_err(c, 500, NULL, "out of memory");
    x->conn = c;
    x->ev = a->ev;
    x->sub = events_subscribe(a->ev, sse_wake, sse_sleep, x);
    if (!x->sub) {
        free(x);
        return send_err(c, 503, NULL, "too many event streams (limit %d)", EVENTS_MAX_SUBS);
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
    if (!r) { sse_free(x); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&metrics.http_requests[2], 1);
    return ret;
}

/* ---------- agent long-poll (doorbell) ---------- */

static void wait_park(void *arg) { MHD_suspend_connection(arg); }
static void wait_wake(void *arg) { MHD_resume_connection(arg); }

/* GET /api/v1/agents/{id}/wait?timeout_ms=N: {"pending": true} as soon as
 * the agent has an assignment or kill waiting for its next heartbeat, else
 * {"pending": false} after N ms. The request is parked in the doorbell and
 * suspended (no thread held); the core's ring or the cron's expiry resumes
 * it, and libmicrohttpd then calls the handler again, landing here with
 * rq->parked set. */
static enum MHD_Result serve_wait(api *a, struct MHD_Connection *c, int64_t id, req *rq)
{
    hf_jerr e;
    int64_t timeout;
    int pending = 0;
    if (rq->parked) {
        int st = doorbell_state(a->bell, &rq->w);
        doorbell_unpark(a->bell, &rq->w);
        rq->parked = 0;
        return send_json(c, 200, json_pack("{sb}", "pending", st == DOORBELL_RUNG));
    }
    hf_jerr_clear(&e);
    if (query_int(c, "timeout_ms", 0, DOORBELL_MAX_WAIT_MS, 25000, &timeout, &e)) return send_jerr(c, 400, &e);
    int rc = sched_agent_pending(a->s, id, &pending);
    if (rc == HF_ENOTFOUND) return send_err(c, 404, NULL, "unknown agent %lld: register again", (long long)id);
    if (rc) return send_rc(c, rc, NULL, "agent");
    if (pending || timeout == 0 || !a->bell || atomic_load(&a->stopping))
        return send_json(c, 200, json_pack("{sb}", "pending", pending));
    rq->is_wait = 1;
    rq->w.agent_id = id;
    rq->w.deadline_mono = hf_mono_ms() + timeout;
    rq->w.wake = wait_wake;
    rq->w.arg = c;
    if (doorbell_park(a->bell, &rq->w, wait_park))
        return send_err(c, 503, NULL, "too many waiting agents (limit %d)", DOORBELL_MAX_WAITERS);
    rq->parked = 1;
    /* Work queued between the check above and parking rang nobody: check
     * again now that a ring would find us. */
    if (sched_agent_pending(a->s, id, &pending) == 0 && pending) doorbell_ring(a->bell, id);
    return MHD_YES;
}

/* ---------- static files ---------- */

/* The dashboard built into the binary (no --web DIR): served from memory. */
static enum MHD_Result serve_embedded(struct MHD_Connection *c, const char *url)
{
    const webfs_asset *f;
    int rc = webfs_embedded(url, &f);
    if (rc == HF_EINVAL) return send_err(c, 400, NULL, "forbidden path");
    if (rc) return send_err(c, 404, NULL, "no such route: %s", url);
    struct MHD_Response *r = MHD_create_response_from_buffer(f->size, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", webfs_mime(f->path));
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&metrics.http_requests[2], 1);
    return ret;
}

static enum MHD_Result serve_static(api *a, struct MHD_Connection *c, const char *url)
{
    char path[PATH_MAX];
    if (!a->web_root) return serve_embedded(c, url);
    int rc = webfs_resolve(a->web_root, url, path, sizeof path);
    if (rc == HF_EINVAL) return send_err(c, 400, NULL, "forbidden path");
    if (rc) return send_err(c, 404, NULL, "not found");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0) close(fd);
        return send_err(c, 404, NULL, "not found");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
    if (!r) { close(fd); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", webfs_mime(path));
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&metrics.http_requests[2], 1);
    return ret;
}

/* ---------- the handler ---------- */

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

static enum MHD_Result dispatch(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq)
{
    char ids[32] = "", act[16] = "";
    const route *rt = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (route_match(routes[i].pattern, url, ids, sizeof ids, act, sizeof act)) { rt = &routes[i]; break; }
    if (!rt) {
        if (strncmp(url, "/api/", 5) == 0 || strcmp(url, "/api") == 0)
            return send_err(c, 404, NULL, "no such route: %s %s", method, url);
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
            json_t *o = json_pack("{ss}", "error", "method not allowed");
            char *s = hf_json_dump(o);
            json_decref(o);
            return s ? send_text(c, 405, "application/json", s, strlen(s), "GET, HEAD") : MHD_NO;
        }
        return serve_static(a, c, url);
    }
    int is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (!method_allowed(rt->allow, method)) {
        json_t *o = json_pack("{ssss}", "error", "method not allowed", "allow", rt->allow);
        char *s = hf_json_dump(o);
        json_decref(o);
        return s ? send_text(c, 405, "application/json", s, strlen(s), rt->allow) : MHD_NO;
    }

    /* Roles: /healthz is open; agent-only routes; everything else needs a
     * user token, except that agents may GET. */
    if (a->au && rt->id != R_HEALTHZ) {
        const char *tok = auth_bearer(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
        if (!tok && rt->id == R_EVENTS) tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
        int role = auth_check(a->au, tok);
        if (role == AUTH_NONE) {
            json_t *o = json_pack("{ss}", "error", tok ? "invalid token" : "missing bearer token");
            char *s = hf_json_dump(o);
            json_decref(o);
            if (!s) return MHD_NO;
            struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
            MHD_add_response_header(r, "Content-Type", "application/json");
            MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"hyperfarm\"");
            enum MHD_Result ret = MHD_queue_response(c, 401, r);
            MHD_destroy_response(r);
            atomic_fetch_add(&metrics.http_requests[4], 1);
            return ret;
        }
        int agent_route = (rt->id == R_AGENTS && !is_get) || rt->id == R_AGENT_HB || rt->id == R_AGENT_WAIT;
        if (agent_route && role != AUTH_AGENT)
            return send_err(c, 403, NULL, "this route needs an agent token");
        if (!agent_route && role == AUTH_AGENT && !is_get)
            return send_err(c, 403, NULL, "this route needs a user token");
    }

    if (rq->too_big)
        return send_err(c, 413, NULL, "request body larger than %u bytes",
                        rt->id == R_AGENT_HB ? API_MAX_BODY_AGENT : API_MAX_BODY_USER);

    int64_t id = 0;
    if (ids[0] && parse_id(ids, &id))
        return send_err(c, 400, "id", "\"%s\" is not a valid id (a positive integer)", ids);

    hf_jerr e;
    hf_jerr_clear(&e);
    json_t *body = NULL, *out = NULL;
    int rc = 0;
    if (!is_get && rt->id != R_TRIAL_KILL && !(rt->id == R_EXP_ACTION && strcmp(act, "extend"))) {
        if (hf_json_parse(rq->body.data, rq->body.len, HF_JSON_MAX_DEPTH, 1, &body, &e)) return send_jerr(c, 400, &e);
    }
    enum MHD_Result ret;
    switch (rt->id) {
    case R_HEALTHZ: {
        int ok = sqlite3_threadsafe() != 0;
        sqlite3 *db = store_reader_get(a->st);
        sqlite3_stmt *st = NULL;
        ok = db && sqlite3_prepare_v2(db, "SELECT count(*) FROM experiments", -1, &st, NULL) == SQLITE_OK &&
             sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
        store_reader_put(a->st, db);
        ret = send_json(c, ok ? 200 : 503, json_pack("{sbss}", "ok", ok, "db", ok ? "ok" : "error"));
        break;
    }
    case R_METRICS: {
        sched_stats ss;
        hf_buf b;
        sched_get_stats(a->s, &ss);
        hf_buf_init(&b, 1u << 20);
        if (metrics_render(&b, &ss) || !b.data) { hf_buf_free(&b); ret = send_err(c, 500, NULL, "metrics too large"); break; }
        size_t len;
        char *text = hf_buf_take(&b, &len);
        ret = send_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
        break;
    }
    case R_EVENTS:
        ret = serve_events(a, c);
        break;
    case R_EXPS:
        if (is_get) {
            rc = sched_experiment_list(a->s, &out);
            ret = rc ? send_rc(c, rc, NULL, "experiment") : send_json(c, 200, out);
        } else {
            int64_t nid = 0;
            rc = sched_experiment_submit(a->s, body, &nid, &e);
            ret = rc ? send_rc(c, rc, &e, "experiment") : send_json(c, 201, json_pack("{sI}", "id", (json_int_t)nid));
        }
        break;
    case R_EXP:
        rc = sched_experiment_get(a->s, id, &out);
        ret = rc ? send_rc(c, rc, NULL, "experiment") : send_json(c, 200, out);
        break;
    case R_EXP_ACTION:
        if (strcmp(act, "extend") == 0) rc = sched_experiment_extend(a->s, id, body, &out, &e);
        else rc = sched_experiment_action(a->s, id, act, &out, &e);
        ret = rc ? send_rc(c, rc, &e, "experiment") : send_json(c, 200, out);
        break;
    case R_EXP_TRIALS: {
        char *text = NULL;
        size_t len = 0;
        rc = sched_experiment_trials_text(a->s, id, &text, &len);
        ret = rc ? send_rc(c, rc, NULL, "experiment") : send_text(c, 200, "application/json", text, len, NULL);
        break;
    }
    case R_EXP_TOP: {
        int64_t k;
        if (query_int(c, "k", 1, 10000, 10, &k, &e)) { ret = send_jerr(c, 400, &e); break; }
        rc = sched_experiment_top(a->s, id, k, &out);
        ret = rc ? send_rc(c, rc, NULL, "experiment") : send_json(c, 200, out);
        break;
    }
    case R_EXP_EXPORT: {
        const char *fmt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");
        if (!fmt) fmt = "json";
        if (strcmp(fmt, "csv") && strcmp(fmt, "json")) { ret = send_err(c, 400, "format", "must be csv or json"); break; }
        json_t *sum = NULL, *trials = NULL;
        rc = sched_experiment_export(a->s, id, &sum, &trials);
        if (rc) { ret = send_rc(c, rc, NULL, "experiment"); break; }
        if (strcmp(fmt, "csv") == 0) {
            hf_buf b;
            hf_buf_init(&b, 256u << 20);
            rc = query_export_csv(trials, &b);
            size_t len = 0;
            char *text = rc ? NULL : hf_buf_take(&b, &len);
            hf_buf_free(&b);
            ret = text ? send_text(c, 200, "text/csv; charset=utf-8", text, len, NULL)
                       : send_err(c, 500, NULL, "export failed (%s)", hf_strerror(rc));
        } else {
            rc = query_export_json(a->st, sum, trials, &out);
            ret = rc ? send_rc(c, rc, NULL, "experiment") : send_json(c, 200, out);
        }
        json_decref(sum);
        json_decref(trials);
        break;
    }
    case R_EXP_METRICS: {
        int64_t after, maxp;
        const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "name");
        if (query_int(c, "after", 0, INT64_MAX, 0, &after, &e) ||
            query_int(c, "max_points", 0, 100000, 0, &maxp, &e)) { ret = send_jerr(c, 400, &e); break; }
        if (!name || !*name || strlen(name) > 64) { ret = send_err(c, 400, "name", "required: a metric name"); break; }
        rc = sched_experiment_get(a->s, id, &out);   /* 404 for an unknown experiment */
        json_decref(out);
        out = NULL;
        if (rc) { ret = send_rc(c, rc, NULL, "experiment"); break; }
        if (maxp > 0 && maxp < 3) maxp = 3;
        rc = query_experiment_metrics(a->st, id, name, after, maxp, &out);
        ret = rc ? send_rc(c, rc, NULL, "experiment") : send_json(c, 200, out);
        break;
    }
    case R_TRIAL:
        rc = sched_trial_get(a->s, id, &out);
        if (rc == 0) rc = query_trial_details(a->st, id, out);
        ret = rc ? send_rc(c, rc, NULL, "trial") : send_json(c, 200, out);
        if (rc) json_decref(out);
        break;
    case R_TRIAL_METRICS: {
        int64_t after, limit, maxp;
        const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "name");
        if (query_int(c, "after", 0, INT64_MAX, 0, &after, &e) ||
            query_int(c, "limit", 1, QUERY_MAX_LIMIT, 10000, &limit, &e) ||
            query_int(c, "max_points", 0, 100000, 0, &maxp, &e)) { ret = send_jerr(c, 400, &e); break; }
        if (name && (!*name || strlen(name) > 64)) { ret = send_err(c, 400, "name", "not a valid metric name"); break; }
        if (!sched_trial_exists(a->s, id)) { ret = send_err(c, 404, NULL, "no such trial %lld", (long long)id); break; }
        if (maxp > 0 && maxp < 3) maxp = 3;
        rc = query_metrics(a->st, id, name, after, limit, maxp, &out);
        ret = rc ? send_rc(c, rc, NULL, "trial") : send_json(c, 200, out);
        break;
    }
    case R_TRIAL_LOGS: {
        int64_t after, limit;
        if (query_int(c, "after", 0, INT64_MAX, 0, &after, &e) ||
            query_int(c, "limit", 1, QUERY_MAX_LIMIT, 1000, &limit, &e)) { ret = send_jerr(c, 400, &e); break; }
        if (!sched_trial_exists(a->s, id)) { ret = send_err(c, 404, NULL, "no such trial %lld", (long long)id); break; }
        rc = query_logs(a->st, id, after, limit, &out);
        ret = rc ? send_rc(c, rc, NULL, "trial") : send_json(c, 200, out);
        break;
    }
    case R_TRIAL_KILL:
        rc = sched_trial_kill(a->s, id, &out, &e);
        ret = rc ? send_rc(c, rc, &e, "trial") : send_json(c, 200, out);
        break;
    case R_AGENTS:
        if (is_get) {
            rc = sched_agent_list(a->s, &out);
            ret = rc ? send_rc(c, rc, NULL, "agent") : send_json(c, 200, out);
        } else {
            char ip[64];
            rc = sched_agent_register(a->s, body, peer_ip(c, ip, sizeof ip), &out, &e);
            ret = rc ? send_rc(c, rc, &e, "agent") : send_json(c, 201, out);
        }
        break;
    case R_AGENT_WAIT:
        ret = serve_wait(a, c, id, rq);
        break;
    case R_AGENT_HB:
        rc = sched_agent_heartbeat(a->s, id, body, &out, &e);
        ret = rc ? send_rc(c, rc, &e, "agent") : send_json(c, 200, out);
        break;
    default:
        ret = send_err(c, 404, NULL, "no such route");
    }
    json_decref(body);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    api *a = cls;
    req *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        rq->t0_us = hf_mono_us();
        size_t max = strstr(url, "/heartbeat") ? API_MAX_BODY_AGENT : API_MAX_BODY_USER;
        hf_buf_init(&rq->body, max);
        *con_cls = rq;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > API_ABSURD_BODY)
            return send_err(c, 413, NULL, "request body larger than %u bytes", (unsigned)max);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big && hf_buf_add(&rq->body, upload, *upload_size) != 0) {
            rq->too_big = 1;
            hf_buf_free(&rq->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (strlen(url) > 2048) return send_err(c, 414, NULL, "URL too long");
    return dispatch(a, c, url, method, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c; (void)toe;
    api *a = cls;
    req *rq = *con_cls;
    if (!rq) return;
    if (rq->parked) doorbell_unpark(a->bell, &rq->w);
    if (!rq->is_wait) metrics_observe(&metrics.request_latency, hf_mono_us() - rq->t0_us);
    hf_buf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}

/* ---------- set-up ---------- */

int api_parse_listen(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon;
    if (!s || !*s) return HF_EINVAL;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':') return HF_EINVAL;
        if ((size_t)(rb - s - 1) >= hostlen) return HF_EINVAL;
        memcpy(host, s + 1, (size_t)(rb - s - 1));
        host[rb - s - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= hostlen) return HF_EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535) return HF_EINVAL;
    if (!host[0]) snprintf(host, hostlen, "0.0.0.0");
    *port = (int)p;
    return 0;
}

int api_is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 || strcmp(host, "localhost") == 0;
}

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return NULL; }
    hf_buf b;
    hf_buf_init(&b, 1u << 20);
    char chunk[4096];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof chunk, f)) > 0) rc = hf_buf_add(&b, chunk, n);
    fclose(f);
    if (rc || !b.data) { snprintf(err, errlen, "%s: unreadable or larger than 1 MiB", path); hf_buf_free(&b); return NULL; }
    return hf_buf_take(&b, &n);
}

/* API_MAX_CONNS, or fewer when the open-files limit cannot hold them (64
 * descriptors kept for the database, logs and the listening socket). The
 * soft limit is first raised as far as the hard limit allows. */
static unsigned conn_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1000;
    rlim_t want = API_MAX_CONNS + 64;
    if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (cur > rl.rlim_cur) {
            rl.rlim_cur = cur;
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return API_MAX_CONNS;
    unsigned n = rl.rlim_cur > 128 ? (unsigned)(rl.rlim_cur - 64) : 64;
    hf_warn("open-files limit %llu: serving at most %u connections (raise it with ulimit -n / LimitNOFILE)",
            (unsigned long long)rl.rlim_cur, n);
    return n;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    hf_debug("libmicrohttpd: %s", msg);
}

int api_start(const api_config *cfg, sched *s, store *st, events_hub *ev, const auth *au, api **out,
              char *err, size_t errlen)
{
    char host[256];
    int port, rc = HF_EINVAL;
    *out = NULL;
    api *a = calloc(1, sizeof *a);
    if (!a) return HF_ENOMEM;
    a->s = s;
    a->st = st;
    a->ev = ev;
    a->au = au;
    a->bell = cfg->bell;
    if (api_parse_listen(cfg->listen, host, sizeof host, &port)) {
        snprintf(err, errlen, "--listen %s: expected ADDR:PORT", cfg->listen ? cfg->listen : "");
        goto fail;
    }
    if (cfg->web_dir) {
        char real[PATH_MAX];
        if (!realpath(cfg->web_dir, real)) { snprintf(err, errlen, "--web %s: %s", cfg->web_dir, strerror(errno)); goto fail; }
        a->web_root = strdup(real);
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    if (strchr(host, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1) { snprintf(err, errlen, "bad address %s", host); goto fail; }
        flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        if (strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
        if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) { snprintf(err, errlen, "bad address %s", host); goto fail; }
    }
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES) flags |= MHD_USE_EPOLL;
    if (cfg->tls_cert || cfg->tls_key) {
        if (!cfg->tls_cert || !cfg->tls_key) { snprintf(err, errlen, "--tls-cert and --tls-key go together"); goto fail; }
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            snprintf(err, errlen, "this libmicrohttpd was built without TLS (GnuTLS)");
            rc = HF_EUNSUP;
            goto fail;
        }
        if (!(a->cert = read_file(cfg->tls_cert, err, errlen)) || !(a->key = read_file(cfg->tls_key, err, errlen))) {
            rc = HF_EIO;
            goto fail;
        }
        flags |= MHD_USE_TLS;
    }
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, a->cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, a->key},
        {MHD_OPTION_END, 0, NULL},
    };
    /* An idle crowd must not lock agents and users out: one address holds
     * at most max_conns_per_ip connections, and a connection whose request
     * stops arriving is closed after request_timeout_s. Parked /wait
     * long-polls and idle SSE streams are suspended connections, which
     * libmicrohttpd does not time out. */
    a->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, a,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->threads > 0 ? cfg->threads : 4),
                            MHD_OPTION_CONNECTION_LIMIT, conn_limit(),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(cfg->max_conns_per_ip > 0 ? cfg->max_conns_per_ip : 0),
                            MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)(cfg->request_timeout_s > 0 ? cfg->request_timeout_s : API_REQUEST_TIMEOUT_S),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_ARRAY, a->cert ? tls_opts : tls_opts + 2,
                            MHD_OPTION_END);
    if (!a->d) {
        snprintf(err, errlen, "cannot listen on %s (in use, or a bad TLS certificate/key)", cfg->listen);
        rc = HF_EIO;
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
    a->port = di ? di->port : port;
    *out = a;
    return 0;
fail:
    api_stop(a);
    return rc;
}

int api_port(const api *a) { return a->port; }

void api_stop(api *a)
{
    if (!a) return;
    atomic_store(&a->stopping, 1);
    if (a->bell) doorbell_expire(a->bell, INT64_MAX);   /* no suspended /wait left for MHD_stop_daemon */
    if (a->d) MHD_stop_daemon(a->d);
    free(a->web_root);
    free(a->cert);
    free(a->key);
    free(a);
}

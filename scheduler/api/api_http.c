/*
 * api_http.c — the HTTP server's answers and query arguments (api_int.h),
 * and the few helpers every route handler uses (api_reply, the body and
 * the peer's address).
 *
 * Every response of the server goes out through api_queue, which sets the
 * headers it is given and the replication term and role
 * (X-Hyperfarm-Term, X-Hyperfarm-Role), holds a write's answer until the
 * standby acknowledged it (api_hold_writes), and counts the status class
 * for /metrics; the helpers here only choose those headers:
 *
 *   JSON and text   Content-Type, Cache-Control: no-store, nosniff
 *                   (+ Allow on a 405)
 *   401             Content-Type, WWW-Authenticate
 *
 * (the SSE stream and static files pass their own to api_queue). Error
 * bodies are {"error": "...", "field": "..."}, statuses as in
 * docs/protocol.md.
 */
#include "scheduler/api/api_int.h"

#include "hf_err.h"
#include "scheduler/api/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local req *hold_rq;

void api_hold_writes(req *rq) { hold_rq = rq; }

static void resume(void *arg) { MHD_resume_connection(arg); }
static void suspend(void *arg) { MHD_suspend_connection(arg); }

/* A write's answer that cannot be given: its commit is not durable (the
 * group flush failed, or the server stops first; repl.h). */
static enum MHD_Result not_durable(struct MHD_Connection *c)
{
    return api_send_err(c, 503, NULL, "the write is not durable: %s",
                        repl_flush_failed() ? "the database's disk failed to flush (see the scheduler's log)"
                                            : "the scheduler is stopping");
}

/* Hold r when this thread answers a write (see api_hold_writes) until the
 * group flush covers the commits made so far and, with a standby in sync,
 * the standby acknowledged them. RET 1 held (the request is suspended),
 * 2 answered 503 instead (r destroyed: not durable), else 0. */
static int hold_answer(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
    req *rq = hold_rq;
    hold_rq = NULL;
    if (!rq || rq->held || repl_role() != REPL_PRIMARY) return 0;
    rq->rw = (repl_waiter){.kind = REPL_W_ACK, .lsn = repl_lsn(), .seq = repl_commit_seq(), .wake = resume,
                           .arg = c};
    rq->held = r;
    rq->held_status = status;
    if (repl_park(&rq->rw, suspend)) return 1;
    rq->held = NULL;
    if (rq->rw.failed) {
        MHD_destroy_response(r);
        not_durable(c);
        return 2;
    }
    return 0;
}

enum MHD_Result api_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r, const api_hdr *h)
{
    if (!r) return MHD_NO;
    char term[24];
    snprintf(term, sizeof term, "%lld", (long long)repl_term());
    MHD_add_response_header(r, "X-Hyperfarm-Term", term);
    MHD_add_response_header(r, "X-Hyperfarm-Role", repl_role_name(repl_role()));
    for (; h && h->name; h++) MHD_add_response_header(r, h->name, h->value);
    if (hold_answer(c, status, r)) return MHD_YES;   /* held, or answered 503 */
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&metrics.http_requests[status / 100 < 6 ? status / 100 : 0], 1);
    return ret;
}

enum MHD_Result api_queue_held(struct MHD_Connection *c, req *rq)
{
    struct MHD_Response *r = rq->held;
    rq->held = NULL;
    if (rq->rw.failed) {
        MHD_destroy_response(r);
        return not_durable(c);
    }
    enum MHD_Result ret = MHD_queue_response(c, rq->held_status, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&metrics.http_requests[rq->held_status / 100 < 6 ? rq->held_status / 100 : 0], 1);
    return ret;
}

/* text (taken) with headers h. */
static enum MHD_Result send_buf(struct MHD_Connection *c, unsigned status, char *text, size_t len, const api_hdr *h)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    return api_queue(c, status, r, h);
}

/* The document headers, plus Allow when allow is not NULL. */
static enum MHD_Result send_doc(struct MHD_Connection *c, unsigned status, const char *ctype, char *text, size_t len,
                                const char *allow)
{
    const api_hdr h[] = {
        {"Content-Type", ctype},
        {"Cache-Control", "no-store"},
        {"X-Content-Type-Options", "nosniff"},
        {allow ? "Allow" : NULL, allow},
        {NULL, NULL},
    };
    return send_buf(c, status, text, len, h);
}

enum MHD_Result api_send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *text, size_t len)
{
    return send_doc(c, status, ctype, text, len, NULL);
}

/* v (stolen) serialized; on failure {"error": "out of memory"} and
 * *status 500. NULL only when even that cannot be allocated. */
static char *dump(json_t *v, unsigned *status)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    if (!s) {
        s = strdup("{\"error\":\"out of memory\"}");
        *status = 500;
    }
    return s;
}

static enum MHD_Result send_json_allow(struct MHD_Connection *c, unsigned status, json_t *v, const char *allow)
{
    char *s = dump(v, &status);
    return s ? send_doc(c, status, "application/json", s, strlen(s), allow) : MHD_NO;
}

enum MHD_Result api_send_json(struct MHD_Connection *c, unsigned status, json_t *v)
{
    return send_json_allow(c, status, v, NULL);
}

enum MHD_Result api_send_json_retry(struct MHD_Connection *c, unsigned status, json_t *v, int retry_s)
{
    char ra[16], *s = dump(v, &status);
    if (!s) return MHD_NO;
    snprintf(ra, sizeof ra, "%d", retry_s);
    const api_hdr h[] = {
        {"Content-Type", "application/json"}, {"Cache-Control", "no-store"},
        {"X-Content-Type-Options", "nosniff"}, {"Retry-After", ra}, {NULL, NULL},
    };
    return api_queue(c, status, MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE), h);
}

enum MHD_Result api_send_err(struct MHD_Connection *c, unsigned status, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{ss}", "error", msg);
    if (o && field && *field) json_object_set_new(o, "field", json_string(field));
    return api_send_json(c, status, o);
}

enum MHD_Result api_send_jerr(struct MHD_Connection *c, unsigned status, const hf_jerr *e)
{
    return api_send_json(c, status, hf_jerr_json(e));
}

enum MHD_Result api_send_rc(struct MHD_Connection *c, int rc, const hf_jerr *e, const char *what)
{
    switch (rc) {
    case HF_EINVAL: case HF_EPARSE:
        return e && e->msg[0] ? api_send_jerr(c, 400, e) : api_send_err(c, 400, NULL, "invalid input");
    case HF_ENOTFOUND:
        return e && e->msg[0] ? api_send_jerr(c, 404, e) : api_send_err(c, 404, NULL, "no such %s", what);
    case HF_ESTATE:
        return e && e->msg[0] ? api_send_jerr(c, 409, e) : api_send_err(c, 409, NULL, "not allowed in the current state");
    case HF_ENOSPC:
        return api_send_err(c, 507, NULL, "the scheduler's disk is full: nothing was stored; free space and retry");
    case HF_ENOMEM:
        return api_send_err(c, 500, NULL, "out of memory");
    default:
        return api_send_err(c, 500, NULL, "store failure (%s)", hf_strerror(rc));
    }
}

enum MHD_Result api_send_405(struct MHD_Connection *c, const char *allow, int with_field)
{
    json_t *o = with_field ? json_pack("{ssss}", "error", "method not allowed", "allow", allow)
                           : json_pack("{ss}", "error", "method not allowed");
    return send_json_allow(c, 405, o, allow);
}

enum MHD_Result api_send_401(struct MHD_Connection *c, const char *msg)
{
    static const api_hdr h[] = {
        {"Content-Type", "application/json"},
        {"WWW-Authenticate", "Bearer realm=\"hyperfarm\""},
        {NULL, NULL},
    };
    unsigned status = 401;
    char *s = dump(json_pack("{ss}", "error", msg), &status);
    return s ? send_buf(c, status, s, strlen(s), h) : MHD_NO;
}

int api_query_int(struct MHD_Connection *c, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out,
                  hf_jerr *e)
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

/* ---------- what every handler uses ---------- */

enum MHD_Result api_reply(api_call *k, int rc, const char *what, unsigned status, json_t *out)
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

int api_query_max_points(api_call *k, int64_t *maxp)
{
    int rc = api_query_int(k->c, "max_points", 0, 100000, 0, maxp, &k->e);
    if (rc == 0 && *maxp > 0 && *maxp < 3) *maxp = 3;
    return rc;
}

int api_parse_body(api_call *k, json_t **body)
{
    return hf_json_parse(k->rq->body.data, k->rq->body.len, HF_JSON_MAX_DEPTH, 1, body, &k->e);
}

const char *api_peer_ip(struct MHD_Connection *c, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return NULL;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) return inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    if (sa->sa_family == AF_INET6)
        return inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
    return NULL;
}

enum MHD_Result api_no_such_trial(api_call *k)
{
    return api_send_err(k->c, 404, NULL, "no such trial %lld", (long long)k->id);
}

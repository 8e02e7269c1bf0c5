/*
 * api_int.h — what the files of the HTTP server share (not for the rest of
 * the scheduler: that uses api.h).
 *
 *   api.c         the server: start/stop, the libmicrohttpd request
 *                 callbacks (body buffering), static files for what is
 *                 no route
 *   api_http.c    answers (every response header is set there),
 *                 query-argument parsing and the handlers' helpers
 *   api_routes.c  the route table {pattern, methods, role, body limit,
 *                 flags, handler}, matching, roles
 *   api_h_*.c     one handler per route, by family (api_handlers.h):
 *                 server, experiments, trials, agents, webhooks;
 *                 api_objects.c the checkpoint store's (ckstore.h)
 *   api_owner.c   who may change what (docs/api.md "Roles")
 *   api_stream.c  the two answers that outlive their call: the SSE event
 *                 stream and the agents' long-poll /wait
 *   api_guard.c   header deadline, body rate, half-open share of the
 *                 connection table, event streams per token (api_guard.h)
 *
 * A request goes: first call (headers) -> a req context whose body buffer
 * is bounded by the route's limit (api_route_body_max); body chunks ->
 * appended (beyond the limit read and discarded, the answer is 413); last
 * call -> api_route_serve: match, 405, role, 413, id, JSON body, handler.
 * A streamed route (F_STREAM: a checkpoint upload) is not buffered: its
 * handler is called at the first call too (api_route_begin: role, id,
 * headers; it opens rq->up), every chunk goes to rq->up, and the last
 * call commits it; a request that ends otherwise aborts rq->up.
 * Every error is {"error": "...", "field": "..."} with the status of
 * docs/protocol.md.
 */
#ifndef HF_API_INT_H
#define HF_API_INT_H

#include "hf_buf.h"
#include "hf_json.h"
#include "scheduler/api/api.h"
#include "scheduler/search/importance.h"
#include "scheduler/store/repl.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

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
    ckstore    *ck;             /* NULL: the checkpoint routes answer 503 */
    ckretain   *cr;             /* NULL: no checkpoint_bytes, deletes free no objects */
    importance_cache *imp;      /* GET /experiments/{id}/importance answers (importance.h) */
    struct api_guard *guard;    /* header deadline, body rate, half-open share, SSE per token (api_guard.h) */
    struct webhook_svc *wh;     /* webhooks (webhook.h); NULL: their routes answer 503 */
    struct logpool *lp;         /* the log-search threads (logpool.h) */
    atomic_int  stopping;       /* /wait answers at once from now on */
};

/* One request's context (libmicrohttpd's con_cls), freed on completion. */
typedef struct req {
    hf_buf  body;
    int     too_big;
    int64_t t0_us;
    int     parked;            /* a /wait parked in the doorbell (suspended) */
    int     is_wait;           /* not counted in the request latency histogram */
    doorbell_waiter w;
    int     streamed;          /* an F_STREAM route: the body goes to up, not to body;
                                  not counted in the latency histogram */
    int     answered;          /* a response was queued at the first call */
    ckstore_upload *up;        /* the upload being received, or NULL */
    struct logjob *search;     /* a ?grep= search handed to a->lp (suspended until done), or NULL */
    repl_snap_job *snap;       /* a snapshot copy handed to "hf-snapshot" (suspended until done), or NULL */
    /* Replication (repl.h; docs/scheduler.md "Replication"): a write's
     * answer held until the standby acknowledged it, or a parked stream
     * long-poll; either way the request is suspended, holding no thread. */
    repl_waiter rw;
    struct MHD_Response *held; /* the write's answer, queued once rw is woken */
    unsigned held_status;
    int     repl_polled;       /* the stream request already waited once */
} req;

/* ---- api_http.c: answers ---- */

/* Extra response headers: {name, value} pairs ending with {NULL, NULL}. */
typedef struct api_hdr {
    const char *name, *value;
} api_hdr;

/* Queue r with headers h and count the status in /metrics; r is destroyed
 * here. RET MHD_NO when r is NULL. */
enum MHD_Result api_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r, const api_hdr *h);
/* text (malloc'ed, taken) of len bytes as ctype, not cacheable. */
enum MHD_Result api_send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *text,
                              size_t len);
/* v (stolen) as compact JSON with 15 significant digits; 500 if it cannot
 * be serialized. */
enum MHD_Result api_send_json(struct MHD_Connection *c, unsigned status, json_t *v);
/* api_send_json with Retry-After: retry_s (a 429 or a 503 that says when
 * to come back). */
enum MHD_Result api_send_json_retry(struct MHD_Connection *c, unsigned status, json_t *v, int retry_s);
/* {"error": fmt..., "field": field} (field omitted when NULL or ""). */
enum MHD_Result api_send_err(struct MHD_Connection *c, unsigned status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
enum MHD_Result api_send_jerr(struct MHD_Connection *c, unsigned status, const hf_jerr *e);
/* A core return code as its status (sched.h): HF_EINVAL/EPARSE 400,
 * ENOTFOUND 404 ("no such <what>" without e), ESTATE 409, ENOSPC 507,
 * others 500. e may be NULL. */
enum MHD_Result api_send_rc(struct MHD_Connection *c, int rc, const hf_jerr *e, const char *what);
/* 405 with an Allow header; the body names allow too when with_field. */
enum MHD_Result api_send_405(struct MHD_Connection *c, const char *allow, int with_field);
/* 401 with a WWW-Authenticate challenge. */
enum MHD_Result api_send_401(struct MHD_Connection *c, const char *msg);

/* Integer query argument key in [lo, hi]; absent -> dflt. RET 0, or
 * HF_EINVAL with e naming key. */
int api_query_int(struct MHD_Connection *c, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out,
                  hf_jerr *e);

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
    const char *user;    /* the token's user name (auth.h); "local" without a token file */
    int         role;    /* the token's role (auth.h enum auth_role); AUTH_ADMIN without a token file */
    hf_jerr     e;       /* cleared; the core's error for api_send_rc */
} api_call;

/* The next api_queue on this thread answers a write (a non-GET handler
 * runs): with a standby in sync, the answer is held (rq->held, the request
 * suspended) until the standby acknowledged every LSN committed so far.
 * NULL ends it. */
void api_hold_writes(req *rq);
/* Queue the answer held in rq (after the wake). */
enum MHD_Result api_queue_held(struct MHD_Connection *c, req *rq);

/* ---- api_http.c: what every handler uses ---- */

/* The core's answer: out (stolen) with status, or rc as its status
 * (api_send_rc naming what). Call the core before, not in the argument
 * list: out must be read after the call has set it. */
enum MHD_Result api_reply(api_call *k, int rc, const char *what, unsigned status, json_t *out);
/* The query argument key of the request, or NULL. */
const char *api_query_arg(const api_call *k, const char *key);
/* ?max_points=N into *maxp: 0 = no downsampling; 1 and 2 are raised to 3,
 * the fewest points LTTB keeps (downsample.h). RET 0 or HF_EINVAL (k->e). */
int api_query_max_points(api_call *k, int64_t *maxp);
/* The buffered body as JSON (*body owned by the caller). RET 0 or an
 * HF_E* code with k->e. */
int api_parse_body(api_call *k, json_t **body);
/* The client's address as text into buf, or NULL. */
const char *api_peer_ip(struct MHD_Connection *c, char *buf, size_t len);
/* 404 "no such trial" naming k->id. */
enum MHD_Result api_no_such_trial(api_call *k);

/* ---- api_owner.c: owners (docs/api.md "Roles") ---- */

/* May the request change what owner owns? Admins change anything; users
 * what they own; viewers and agents nothing. */
int api_may_change(const api_call *k, const char *owner);
/* A refused change: an events row (type REFUSED, the user who tried; on
 * experiment exp_id, 0 = none), then 403 {"error": what and why}. */
enum MHD_Result api_refuse(api_call *k, int64_t exp_id, int64_t trial_id, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Experiment id (is_trial 0) or trial id's experiment: 0 when the request
 * may change it (or it does not exist: the handler answers 404), else 1
 * with the 403 in *ret. verb says what was asked ("cancel"). */
int api_owner_refused(api_call *k, int64_t id, int is_trial, const char *verb, enum MHD_Result *ret);

/* ---- api_routes.c: the route table ---- */

/* Body limit of the route url/method names (API_MAX_BODY_USER when none). */
unsigned api_route_body_max(const char *url, const char *method);
/* First call of a request (headers only): for an F_STREAM route, check
 * the role and id and let the handler open the upload. RET 1 with *ret
 * (MHD_YES to read the body, or an error already queued: rq->answered),
 * or 0 when url/method is no F_STREAM route (buffer the body as usual). */
int api_route_begin(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq,
                    enum MHD_Result *ret);
/* Answer a request whose body is complete: the route's handler, or 404
 * (under /api) / 405 / 401 / 403 / 413 / 400. RET 0 with *ret, or
 * HF_ENOTFOUND when url is no route and not under /api (nothing answered:
 * the caller serves static files). */
int api_route_serve(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq,
                    enum MHD_Result *ret);

/* ---- api_objects.c: the object store (handlers: api_handlers.h) ---- */

/* An experiment body's "context" must name a stored object. RET 0, or 1
 * with the 422 (or store error) already queued in *ret. */
int api_exp_context_missing(api_call *k, enum MHD_Result *ret);

/* ---- api_stream.c ---- */

/* GET /api/v1/events: an SSE stream of the events hub (503 at the
 * subscriber limit). */
enum MHD_Result api_stream_events(api *a, struct MHD_Connection *c);
/* GET /api/v1/agents/{id}/wait: park the request in the doorbell or answer
 * {"pending": ...}; called again with rq->parked set once woken. */
enum MHD_Result api_stream_wait(api *a, struct MHD_Connection *c, int64_t agent_id, req *rq);

#endif

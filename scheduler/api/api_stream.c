/*
 * api_stream.c — the two answers of the HTTP server that outlive the call
 * that starts them (api_int.h):
 *
 *   GET /api/v1/events            an SSE stream fed by the events hub
 *                                 (events.h): the connection is suspended
 *                                 while its queue is empty and resumed
 *                                 by the hub when an event arrives
 *   GET /api/v1/agents/{id}/wait  the agents' long-poll: the request is
 *                                 parked in the doorbell (doorbell.h) and
 *                                 suspended, holding no thread, until the
 *                                 core rings or the cron expires it; with
 *                                 assign=1 the answer carries the new
 *                                 assignments themselves (the push,
 *                                 docs/protocol.md)
 *
 * Both rely on libmicrohttpd's suspend/resume (MHD_ALLOW_SUSPEND_RESUME,
 * set by api_start). With a token file, one token holds at most
 * API_SSE_PER_TOKEN streams (api_guard.h), so no token can use up the
 * hub's EVENTS_MAX_SUBS and shut every other dashboard out.
 */
#include "scheduler/api/api_int.h"

#include "hf_err.h"
#include "hf_time.h"
#include "scheduler/api/api_guard.h"

#include <stdlib.h>

/* ---------- SSE ---------- */

typedef struct sse_ctx {
    struct MHD_Connection *conn;
    events_hub *ev;
    events_sub *sub;
    int         suspended;
    api_guard  *guard;         /* NULL: no per-token slot taken */
    uint64_t    token_key;     /* the slot to give back */
} sse_ctx;

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
    if (x->guard) api_guard_sse_give(x->guard, x->token_key);
    free(x);
}

enum MHD_Result api_stream_events(api *a, struct MHD_Connection *c)
{
    static const api_hdr h[] = {
        {"Content-Type", "text/event-stream"},
        {"Cache-Control", "no-store"},
        {"X-Accel-Buffering", "no"},
        {NULL, NULL},
    };
    sse_ctx *x = calloc(1, sizeof *x);
    if (!x) return api_send_err(c, 500, NULL, "out of memory");
    x->conn = c;
    x->ev = a->ev;
    if (a->au && a->guard) {
        /* The route admitted the token already; the same lookup finds it. */
        const char *tok = auth_bearer(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
        if (!tok) tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
        if (api_guard_sse_take(a->guard, tok, &x->token_key)) {
            free(x);
            return api_send_err(c, 429, NULL,
                                "this token already holds %d event streams (the limit per token): "
                                "close one (another tab or dashboard) and retry",
                                API_SSE_PER_TOKEN);
        }
        x->guard = a->guard;
    }
    x->sub = events_subscribe(a->ev, sse_wake, sse_sleep, x);
    if (!x->sub) {
        if (x->guard) api_guard_sse_give(x->guard, x->token_key);
        free(x);
        return api_send_err(c, 503, NULL, "too many event streams (limit %d)", EVENTS_MAX_SUBS);
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
    if (!r) { sse_free(x); return MHD_NO; }
    return api_queue(c, 200, r, h);
}

/* ---------- agent long-poll (doorbell) ---------- */

static void wait_park(void *arg) { MHD_suspend_connection(arg); }
static void wait_wake(void *arg) { MHD_resume_connection(arg); }

/* The answer: {"pending": P}, and with the push the assignments taken now
 * ("assign", maybe empty). Pending stays true after a ring even when every
 * assignment is in the answer: a kill may wait too, and the agent
 * heartbeats anyway to report what it started. */
static enum MHD_Result wait_answer(api *a, struct MHD_Connection *c, req *rq, int64_t id, int pending, int push)
{
    json_t *assign = NULL;
    if (pending && push) {
        int rc = sched_agent_take_assign(a->s, id, &assign);
        if (rc == HF_ENOTFOUND) return api_send_err(c, 404, NULL, "unknown agent %lld: register again", (long long)id);
        if (rc) return api_send_rc(c, rc, NULL, "agent");
    }
    /* Pushed placements go out once durable, as a heartbeat reply's do
     * (the group flush, api_http.c): a power cut cannot take back a trial
     * an agent already started. */
    if (assign && json_array_size(assign)) api_hold_writes(rq);
    if (assign) return api_send_json(c, 200, json_pack("{sbso}", "pending", pending, "assign", assign));
    return api_send_json(c, 200, json_pack("{sb}", "pending", pending));
}

/* {"pending": true} as soon as the agent has an assignment or kill waiting
 * for its next heartbeat, else {"pending": false} after timeout_ms. The
 * core's ring or the cron's expiry resumes the request, and libmicrohttpd
 * then calls the handler again, landing here with rq->parked set. With
 * assign=1 the answer pushes the assignments too (wait_answer). */
enum MHD_Result api_stream_wait(api *a, struct MHD_Connection *c, int64_t id, req *rq)
{
    hf_jerr e;
    int64_t timeout, push;
    int pending = 0;
    if (rq->parked) {
        int st = doorbell_state(a->bell, &rq->w);
        doorbell_unpark(a->bell, &rq->w);
        rq->parked = 0;
        return wait_answer(a, c, rq, id, st == DOORBELL_RUNG, rq->w.push);
    }
    hf_jerr_clear(&e);
    if (api_query_int(c, "timeout_ms", 0, DOORBELL_MAX_WAIT_MS, 25000, &timeout, &e)) return api_send_jerr(c, 400, &e);
    if (api_query_int(c, "assign", 0, 1, 0, &push, &e)) return api_send_jerr(c, 400, &e);
    int rc = sched_agent_pending(a->s, id, &pending);
    if (rc == HF_ENOTFOUND) return api_send_err(c, 404, NULL, "unknown agent %lld: register again", (long long)id);
    if (rc) return api_send_rc(c, rc, NULL, "agent");
    if (pending || timeout == 0 || !a->bell || atomic_load(&a->stopping)) return wait_answer(a, c, rq, id, pending, (int)push);
    rq->is_wait = 1;
    rq->w.push = (int)push;
    rq->w.agent_id = id;
    rq->w.deadline_mono = hf_mono_ms() + timeout;
    rq->w.wake = wait_wake;
    rq->w.arg = c;
    if (doorbell_park(a->bell, &rq->w, wait_park))
        return api_send_err(c, 503, NULL, "too many waiting agents (limit %d)", DOORBELL_MAX_WAITERS);
    rq->parked = 1;
    /* Work queued between the check above and parking rang nobody: check
     * again now that a ring would find us. */
    if (sched_agent_pending(a->s, id, &pending) == 0 && pending) doorbell_ring(a->bell, id);
    return MHD_YES;
}

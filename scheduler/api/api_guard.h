/*
 * api_guard.h — what keeps a crowd of connections, or one token, from
 * locking everyone else out of the HTTP server (docs/scheduler.md,
 * "Connections"). libmicrohttpd has a global and a per-address connection
 * limit and an idle timeout; an idle timeout never fires on a request that
 * trickles one byte every few seconds, so 8 addresses x 1,024 such
 * requests filled its whole table. The guard adds, per api:
 *
 *   header deadline  a connection must deliver a complete request header
 *                    within header_timeout_s of its accept (or of the end
 *                    of its previous request, keep-alive): else closed
 *   body rate        a request body must average min_body_rate bytes/s
 *                    from the end of its headers once header_timeout_s
 *                    have passed: else closed
 *   half-open share  connections with no complete header (half-open:
 *                    new, trickling, or idle keep-alive) hold at most
 *                    max_half_open slots; a new connection beyond that,
 *                    or when the table is nearly full, closes the OLDEST
 *                    half-open one. A client that sends its request at
 *                    once is never the oldest, so it always gets in; a
 *                    request being served (headers complete) is never
 *                    evicted, so agents and users keep their slots
 *   SSE per token    one token holds at most API_SSE_PER_TOKEN event
 *                    streams (the hub's global EVENTS_MAX_SUBS stays)
 *
 * Connections are closed with shutdown(2) on their socket under the
 * guard's lock; libmicrohttpd sees the end of the stream on its own thread
 * and closes and frees the connection as usual (its CLOSED notification
 * takes the same lock, and comes before its close(2), so the guard never
 * touches a descriptor that was reused). A reaper thread enforces the
 * deadlines every API_GUARD_TICK_MS.
 *
 * Threads: the notification and request hooks run on libmicrohttpd's
 * worker threads, the reaper on its own; one mutex guards all state.
 */
#ifndef HF_API_GUARD_H
#define HF_API_GUARD_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#define API_GUARD_TICK_MS       100
#define API_HEADER_TIMEOUT_S    10     /* default --header-timeout */
#define API_MIN_BODY_RATE       1024   /* default --min-body-rate, bytes/s */
#define API_HALF_OPEN_PERCENT   50     /* of the connection limit */
#define API_GUARD_RESERVE       64     /* slots kept free of half-open connections */
#define API_SSE_PER_TOKEN       16

typedef struct api_guard api_guard;

typedef struct api_guard_config {
    unsigned max_conns;        /* libmicrohttpd's connection limit */
    int      header_timeout_s; /* > 0 */
    int      min_body_rate;    /* bytes/s; 0 = no minimum */
} api_guard_config;

typedef struct api_guard_stats {
    uint64_t deadline;         /* closed: no complete header in time */
    uint64_t evicted;          /* closed: oldest half-open, to make room */
    uint64_t slow_body;        /* closed: body below the minimum rate */
    uint64_t sse_refused;      /* event streams refused by the per-token limit */
    unsigned half_open, busy;  /* now */
} api_guard_stats;

/* Start the reaper. RET the guard, or NULL (out of memory, no thread). */
api_guard *api_guard_new(const api_guard_config *cfg);
/* Stop the reaper and free; call after MHD_stop_daemon. NULL is fine. */
void api_guard_free(api_guard *g);

/* MHD_OPTION_NOTIFY_CONNECTION callback (cls: the guard). */
void api_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);
/* The request's header is complete (first request callback); body: a
 * body follows (Content-Length > 0 or chunked). */
void api_guard_headers(api_guard *g, struct MHD_Connection *c, int body);
/* n more body bytes arrived. */
void api_guard_body(api_guard *g, struct MHD_Connection *c, size_t n);
/* The body is complete (the last request callback). */
void api_guard_body_done(api_guard *g, struct MHD_Connection *c);
/* The request ended (completion callback): the connection is half-open
 * again, waiting for its next request header. */
void api_guard_request_done(api_guard *g, struct MHD_Connection *c);

/* Take one event-stream slot of token (NULL or "": the anonymous
 * client). RET 0 with *key (give it back with api_guard_sse_give), or
 * HF_ETOOBIG when the token already holds API_SSE_PER_TOKEN. */
int  api_guard_sse_take(api_guard *g, const char *token, uint64_t *key);
void api_guard_sse_give(api_guard *g, uint64_t key);

void api_guard_get_stats(api_guard *g, api_guard_stats *out);

#endif

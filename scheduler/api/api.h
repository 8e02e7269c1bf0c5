/*
 * api.h — the scheduler's HTTP server: the REST routes of docs/protocol.md
 * (and docs/openapi.yaml) on libmicrohttpd, bearer-token roles, bounded
 * bodies, SSE, Prometheus /metrics, /healthz and the static dashboard.
 *
 * Threads: libmicrohttpd's internal thread pool with epoll; handlers call
 * into the core (sched.h, which serialises writers) or run read-only
 * queries (query.h) on pooled reader connections.
 */
#ifndef HF_API_H
#define HF_API_H

#include "scheduler/api/auth.h"
#include "scheduler/store/ckretain.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/core/doorbell.h"
#include "scheduler/notify/events.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"

#include <stdint.h>

#define API_MAX_BODY_USER   (1u << 20)    /* 1 MiB */
#define API_MAX_BODY_AGENT  (8u << 20)    /* 8 MiB: heartbeats */

typedef struct api_config {
    const char *listen;        /* "ADDR:PORT"; port 0 = any free port */
    const char *web_dir;       /* NULL = the dashboard built into the binary */
    const char *tls_cert, *tls_key;   /* both or neither */
    int         threads;       /* pool size */
    doorbell   *bell;          /* agents' long-poll waiters; NULL = /wait answers at once */
    int         max_conns_per_ip;  /* connections one client address may hold; 0 = no limit */
    int         request_timeout_s; /* idle seconds before a connection is closed: a request whose
                                    * headers or body stop arriving, or keep-alive between requests
                                    * (parked long-polls and event streams are suspended: exempt);
                                    * 0 = API_REQUEST_TIMEOUT_S */
    int         header_timeout_s;  /* seconds from accept (or the end of the previous request) to a
                                    * complete request header; 0 = API_HEADER_TIMEOUT_S (api_guard.h) */
    int         min_body_rate;     /* bytes/s a body must average once header_timeout_s have passed
                                    * since its headers; 0 = API_MIN_BODY_RATE, < 0 = no minimum */
    ckstore    *ck;            /* the checkpoint store (not owned); NULL = its routes answer 503 */
    ckretain   *cr;            /* its retention (not owned); NULL = no usage figures, no freeing */
    struct webhook_svc *wh;    /* webhooks (not owned); NULL = its routes answer 503 */
} api_config;

#define API_REQUEST_TIMEOUT_S 15
#define API_MAX_CONNS         8192     /* all clients together (less if RLIMIT_NOFILE is lower) */

typedef struct api api;

/* Start serving. auth may be NULL (no token file: every request allowed,
 * and the caller must have chosen a loopback address). RET 0 or HF_E*
 * with err filled. */
int  api_start(const api_config *cfg, sched *s, store *st, events_hub *ev, const auth *au, api **out,
               char *err, size_t errlen);
/* The port actually bound. */
int  api_port(const api *a);
void api_stop(api *a);

/* Split "ADDR:PORT" ("[v6]:PORT" too). RET 0 or HF_EINVAL. */
int  api_parse_listen(const char *s, char *host, size_t hostlen, int *port);
/* Is host a loopback address (127.0.0.0/8, ::1, localhost)? */
int  api_is_loopback(const char *host);

#endif

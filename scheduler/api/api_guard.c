/*
 * api_guard.c — header deadline, body rate, the half-open share of the
 * connection table and the per-token event-stream limit (api_guard.h says
 * what each is and why).
 *
 * Every tracked connection is on exactly one of two lists, or on none
 * once it is being closed:
 *
 *   half   no complete request header yet (new, or keep-alive between
 *          requests), in order of `since` (appended with the current
 *          time), so the oldest is the head: the reaper pops expired ones
 *          from the head and eviction takes the head
 *   busy   a request is being served (headers complete; its body may
 *          still be arriving: `body` set)
 *   gone   shut down by the guard, waiting for libmicrohttpd's CLOSED
 *
 * Workload: up to the connection limit (8,192) tracked; a crowd that
 * reconnects as fast as it is evicted costs one O(1) eviction per accept;
 * the reaper touches only expired heads every tick and walks the busy
 * list once a second (bodies in flight are few).
 */
#include "scheduler/api/api_guard.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

enum { GC_HALF, GC_BUSY, GC_GONE };
enum { WHY_DEADLINE, WHY_EVICTED, WHY_SLOW };

typedef struct guard_conn {
    struct guard_conn *prev, *next;
    int      fd;
    int      list;          /* GC_* */
    int      body;          /* busy: body still arriving */
    int64_t  since_ms;      /* half: accept or end of the last request; busy: end of headers */
    uint64_t body_bytes;
} guard_conn;

typedef struct conn_list {
    guard_conn *head, *tail;
    unsigned    n;
} conn_list;

typedef struct sse_slot {
    uint64_t key;
    int      n;             /* 0: free */
} sse_slot;

struct api_guard {
    pthread_mutex_t mu;
    hf_thread      *reaper;   /* "hf-guard" */
    api_guard_config cfg;
    unsigned        max_half;     /* half-open slots */
    unsigned        high_water;   /* total beyond which half-open ones are evicted */
    unsigned        n_gone;
    conn_list       half, busy;
    api_guard_stats st;
    uint64_t        logged[3];    /* st.* at the last summary line */
    sse_slot        sse[256];     /* distinct tokens with a stream (the hub holds at most 256) */
};

static void list_push(conn_list *l, guard_conn *x)
{
    x->next = NULL;
    x->prev = l->tail;
    if (l->tail) l->tail->next = x;
    else l->head = x;
    l->tail = x;
    l->n++;
}

static void list_unlink(conn_list *l, guard_conn *x)
{
    assert(l->n > 0 && (x->prev || l->head == x));
    if (x->prev) x->prev->next = x->next;
    else l->head = x->next;
    if (x->next) x->next->prev = x->prev;
    else l->tail = x->prev;
    x->prev = x->next = NULL;
    l->n--;
}

static conn_list *list_of(api_guard *g, guard_conn *x)
{
    return x->list == GC_HALF ? &g->half : x->list == GC_BUSY ? &g->busy : NULL;
}

/* Close x's connection (g->mu held): libmicrohttpd reads the end of the
 * stream and closes it on its own thread. */
static void evict(api_guard *g, guard_conn *x, int why)
{
    conn_list *l = list_of(g, x);
    if (!l) return;
    list_unlink(l, x);
    x->list = GC_GONE;
    g->n_gone++;
    shutdown(x->fd, SHUT_RDWR);
    if (why == WHY_DEADLINE) g->st.deadline++;
    else if (why == WHY_EVICTED) g->st.evicted++;
    else g->st.slow_body++;
}

static guard_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void api_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
    api_guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        guard_conn *x = ci ? calloc(1, sizeof *x) : NULL;
        *socket_context = x;
        if (!x) return;   /* untracked: libmicrohttpd's own limits still hold */
        x->fd = ci->connect_fd;
        x->list = GC_HALF;
        pthread_mutex_lock(&g->mu);
        x->since_ms = hf_mono_ms();
        list_push(&g->half, x);
        /* Room for the newcomer, taken from the oldest half-open ones. */
        while (g->half.head != x &&
               (g->half.n > g->max_half || g->half.n + g->busy.n > g->high_water))
            evict(g, g->half.head, WHY_EVICTED);
        pthread_mutex_unlock(&g->mu);
        return;
    }
    guard_conn *x = *socket_context;
    if (!x) return;
    pthread_mutex_lock(&g->mu);
    conn_list *l = list_of(g, x);
    if (l) list_unlink(l, x);
    else g->n_gone--;
    pthread_mutex_unlock(&g->mu);
    free(x);
    *socket_context = NULL;
}

void api_guard_headers(api_guard *g, struct MHD_Connection *c, int body)
{
    guard_conn *x = conn_of(c);
    if (!x) return;
    pthread_mutex_lock(&g->mu);
    if (x->list == GC_HALF) {
        list_unlink(&g->half, x);
        x->list = GC_BUSY;
        x->since_ms = hf_mono_ms();
        x->body = body;
        x->body_bytes = 0;
        list_push(&g->busy, x);
    }
    pthread_mutex_unlock(&g->mu);
}

void api_guard_body(api_guard *g, struct MHD_Connection *c, size_t n)
{
    guard_conn *x = conn_of(c);
    if (!x) return;
    pthread_mutex_lock(&g->mu);
    x->body_bytes += n;
    pthread_mutex_unlock(&g->mu);
}

void api_guard_body_done(api_guard *g, struct MHD_Connection *c)
{
    guard_conn *x = conn_of(c);
    if (!x) return;
    pthread_mutex_lock(&g->mu);
    x->body = 0;
    pthread_mutex_unlock(&g->mu);
}

void api_guard_request_done(api_guard *g, struct MHD_Connection *c)
{
    guard_conn *x = conn_of(c);
    if (!x) return;
    pthread_mutex_lock(&g->mu);
    if (x->list == GC_BUSY) {
        list_unlink(&g->busy, x);
        x->list = GC_HALF;
        x->body = 0;
        x->since_ms = hf_mono_ms();
        list_push(&g->half, x);
    }
    pthread_mutex_unlock(&g->mu);
}

/* One pass (g->mu held): expired headers every tick, slow bodies when
 * bodies is set. */
static void reap(api_guard *g, int64_t now, int bodies)
{
    int64_t budget = (int64_t)g->cfg.header_timeout_s * 1000;
    while (g->half.head && now - g->half.head->since_ms >= budget) evict(g, g->half.head, WHY_DEADLINE);
    if (!bodies || g->cfg.min_body_rate <= 0) return;
    for (guard_conn *x = g->busy.head, *nx; x; x = nx) {
        nx = x->next;
        int64_t el = now - x->since_ms;
        if (x->body && el >= budget && x->body_bytes * 1000 < (uint64_t)g->cfg.min_body_rate * (uint64_t)el)
            evict(g, x, WHY_SLOW);
    }
}

/* Every 10 s, a warning line with what the guard closed since the last
 * one, if anything (g->mu held). */
static void log_closed(api_guard *g)
{
    uint64_t d = g->st.deadline - g->logged[0], e = g->st.evicted - g->logged[1], s = g->st.slow_body - g->logged[2];
    if (d || e || s)
        hf_warn("closed in the last 10 s: %llu connections without a complete request header after %d s, "
                "%llu oldest half-open ones to make room, %llu request bodies slower than %d bytes/s",
                (unsigned long long)d, g->cfg.header_timeout_s, (unsigned long long)e, (unsigned long long)s,
                g->cfg.min_body_rate);
    g->logged[0] = g->st.deadline;
    g->logged[1] = g->st.evicted;
    g->logged[2] = g->st.slow_body;
}

/* The "hf-guard" thread: a reap every API_GUARD_TICK_MS until stopped. */
static void reaper_main(hf_thread *t, void *arg)
{
    api_guard *g = arg;
    int64_t next_bodies = 0, next_log = hf_mono_ms() + 10000;
    do {
        pthread_mutex_lock(&g->mu);
        int64_t now = hf_mono_ms();
        reap(g, now, now >= next_bodies);
        if (now >= next_bodies) next_bodies = now + 1000;
        if (now >= next_log) {
            log_closed(g);
            next_log = now + 10000;
        }
        pthread_mutex_unlock(&g->mu);
    } while (!hf_thread_wait(t, API_GUARD_TICK_MS));
}

api_guard *api_guard_new(const api_guard_config *cfg)
{
    api_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->cfg = *cfg;
    if (g->cfg.header_timeout_s <= 0) g->cfg.header_timeout_s = API_HEADER_TIMEOUT_S;
    g->max_half = cfg->max_conns * API_HALF_OPEN_PERCENT / 100;
    if (g->max_half < 1) g->max_half = 1;
    g->high_water = cfg->max_conns > 2 * API_GUARD_RESERVE ? cfg->max_conns - API_GUARD_RESERVE : cfg->max_conns;
    pthread_mutex_init(&g->mu, NULL);
    if (hf_thread_start(&g->reaper, "hf-guard", reaper_main, g) != 0) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void api_guard_free(api_guard *g)
{
    if (!g) return;
    hf_thread_stop_join(g->reaper);
    /* MHD_stop_daemon closed every connection (CLOSED freed each); any
     * left were never handed to a notification. */
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---------- event streams per token ---------- */

/* FNV-1a of the token: tokens are not kept. Two tokens that collide
 * share one quota (64 bits: never in practice). */
static uint64_t token_key(const char *t)
{
    uint64_t h = 1469598103934665603ull;
    for (; t && *t; t++) h = (h ^ (unsigned char)*t) * 1099511628211ull;
    return h;
}

int api_guard_sse_take(api_guard *g, const char *token, uint64_t *key)
{
    uint64_t k = token_key(token);
    int rc = HF_ETOOBIG;
    sse_slot *freeslot = NULL;
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < sizeof g->sse / sizeof g->sse[0]; i++) {
        sse_slot *s = &g->sse[i];
        if (s->n && s->key == k) {
            if (s->n < API_SSE_PER_TOKEN) { s->n++; rc = 0; }
            goto end;
        }
        if (!s->n && !freeslot) freeslot = s;
    }
    if (freeslot) {
        freeslot->key = k;
        freeslot->n = 1;
        rc = 0;
    }
end:
    if (rc) g->st.sse_refused++;
    pthread_mutex_unlock(&g->mu);
    *key = k;
    return rc;
}

void api_guard_sse_give(api_guard *g, uint64_t key)
{
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < sizeof g->sse / sizeof g->sse[0]; i++)
        if (g->sse[i].n && g->sse[i].key == key) {
            g->sse[i].n--;
            break;
        }
    pthread_mutex_unlock(&g->mu);
}

void api_guard_get_stats(api_guard *g, api_guard_stats *out)
{
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    out->half_open = g->half.n;
    out->busy = g->busy.n;
    pthread_mutex_unlock(&g->mu);
}

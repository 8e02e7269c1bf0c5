/*
 * repl_ring.c — the primary's ring of recent frames, the standby's
 * acknowledgements, the commit wait and its degrade policy (see repl.h;
 * docs/scheduler.md, "Replication").
 *
 * The ring holds the newest frames {lsn, term, changeset} up to
 * --repl-buffer-mb bytes (always the newest one, whatever its size); the
 * oldest are dropped first, and a standby that still needs one is told
 * "gone" (410) and bootstraps again. The stream reader copies its frames
 * under r.mu, at most REPL_STREAM_MAX bytes, so a commit's append may wait
 * that long (a memcpy) behind it.
 *
 * State machine of the primary (r.state; one setter, set_state):
 *   none --first stream request--> catching_up (target = last LSN then)
 *   catching_up --ack >= target--> sync
 *   sync|catching_up --silent or a wait of --standby-timeout--> degraded
 *   degraded --a stream request--> catching_up
 * with --replication async every connected state reads "async" instead
 * of catching_up/sync, and nothing waits. Only in sync does repl_wait
 * block, and never longer than --standby-timeout.
 *
 * Beside the log's one state, r.sb lists every standby that asked for
 * the stream lately, by address and name (its host and port, so that two
 * standbys behind one address are two), each with its own ack and state
 * (GET /api/v1/replication "peers"): the log follows whichever asked last.
 *
 * Lock: r.mu guards everything here; the log's repl_mu (repl.c) is held
 * around repl_ring_append, taken before r.mu (never the reverse). The event
 * hook runs with neither held.
 */
#include "scheduler/store/repl_int.h"

#include "hf_be.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_SAMPLES 256
#define TIMER_MS     50      /* the hf-repl thread's period: parked waiters expire this late at most */

/* A standby as seen at its stream requests (repl_status.standbys). */
typedef struct standby_seen {
    char    address[64];
    char    name[REPL_STANDBY_NAME_MAX + 1];
    int64_t acked, last_seen, target;   /* target: the LSN current when it (re)connected */
} standby_seen;

typedef struct frame {
    int64_t  lsn, term, at_ms;   /* at_ms: commit time (monotonic) */
    void    *cs;                 /* sqlite3_malloc'd changeset */
    uint32_t len;
} frame;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv_new, cv_ack;
    int             init, running;
    repl_config     cfg;
    frame          *f;                 /* circular: f[(head + i) % cap], i < count */
    size_t          cap, head, count;
    int64_t         bytes;
    int64_t         last;              /* last LSN appended (or the start LSN) */
    int             state, seen;
    int64_t         last_seen, acked, target;
    int64_t         degraded_total, gone_total;
    int64_t         waits, wait_us[WAIT_SAMPLES], wait_max;
    repl_event_fn  *ev;
    void           *ev_ctx;
    repl_waiter    *waiters;           /* parked requests (repl_park) */
    int             flush_on, flush_failed;
    uint64_t        flushed;           /* the writer's commits <= flushed are durable (group flush) */
    int64_t         flushes, flush_commits;
    pthread_cond_t  cv_flush;
    hf_thread      *timer;             /* "hf-repl", from the first park to repl_stop */
    standby_seen    sb[REPL_STANDBYS_MAX];   /* by address and name; last_seen 0: a free slot */
} r = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Atomic uint64_t commit_seq;   /* the writer's commits, numbered (repl_note_commit) */

static void note_wait(int64_t us);

/* Is ACK waiter w's commit not yet on disk (the group flush on, and short
 * of it)? Caller holds r.mu. */
static int not_flushed(const repl_waiter *w) { return r.flush_on && w->seq > r.flushed; }

/* Does ACK waiter w still wait for the flush (one that has not failed)? */
static int flush_pending(const repl_waiter *w) { return !r.flush_failed && not_flushed(w); }

/* Does ACK waiter w still wait for a standby in sync? Caller holds r.mu. */
static int standby_pending(const repl_waiter *w)
{
    return r.running && r.state == REPL_ST_SYNC && r.acked < w->lsn;
}

/* Unlink w and resume its request. Caller holds r.mu. */
static void wake_one(repl_waiter *w)
{
    if (!w->parked) return;
    if (w->kind == REPL_W_ACK) w->failed = not_flushed(w);
    if (w->prev) w->prev->next = w->next;
    else r.waiters = w->next;
    if (w->next) w->next->prev = w->prev;
    w->prev = w->next = NULL;
    w->parked = 0;
    if (w->kind == REPL_W_ACK) note_wait(hf_mono_us() - w->t0_us);
    w->wake(w->arg);
}

static int must_wait(const repl_waiter *w);

/* Wake the ACK waiters with nothing left to wait for. Caller holds r.mu. */
static void wake_acks(void)
{
    for (repl_waiter *w = r.waiters, *nx; w; w = nx) {
        nx = w->next;
        if (w->kind == REPL_W_ACK && !must_wait(w)) wake_one(w);
    }
}

/* Wake the waiters of kind (0: all) whose lsn <= upto. Caller holds r.mu. */
static void wake_kind(int kind, int64_t upto)
{
    for (repl_waiter *w = r.waiters, *nx; w; w = nx) {
        nx = w->next;
        if ((!kind || w->kind == kind) && w->lsn <= upto) wake_one(w);
    }
}

const char *repl_state_name(int st)
{
    switch (st) {
    case REPL_ST_CATCHING_UP: return "catching_up";
    case REPL_ST_SYNC: return "sync";
    case REPL_ST_ASYNC: return "async";
    case REPL_ST_DEGRADED: return "degraded";
    default: return "none";
    }
}

/* Condition variables on the monotonic clock, made once. Caller holds r.mu. */
static void ring_init(void)
{
    if (r.init) return;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&r.cv_new, &a);
    pthread_cond_init(&r.cv_ack, &a);
    pthread_cond_init(&r.cv_flush, &a);
    pthread_condattr_destroy(&a);
    r.init = 1;
}

static void timed_wait(pthread_cond_t *cv, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 1) ms = 1;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(cv, &r.mu, &ts);
}

static void drop_all(void)
{
    for (size_t i = 0; i < r.count; i++) sqlite3_free(r.f[(r.head + i) % r.cap].cs);
    free(r.f);
    r.f = NULL;
    r.cap = r.head = r.count = 0;
    r.bytes = 0;
}

static int64_t first_lsn(void) { return r.count ? r.f[r.head].lsn : r.last + 1; }

void repl_set_event_hook(repl_event_fn *fn, void *ctx)
{
    pthread_mutex_lock(&r.mu);
    r.ev = fn;
    r.ev_ctx = ctx;
    pthread_mutex_unlock(&r.mu);
}

void repl_ring_event(const char *type, const char *detail)
{
    pthread_mutex_lock(&r.mu);
    repl_event_fn *fn = r.ev;
    void *ctx = r.ev_ctx;
    pthread_mutex_unlock(&r.mu);
    if (fn) fn(ctx, type, detail);
}

int repl_ring_reset(int64_t last, const repl_config *cfg)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    drop_all();
    r.cfg = *cfg;
    r.last = last;
    r.running = 1;
    r.state = REPL_ST_NONE;
    r.seen = 0;
    r.acked = r.target = 0;
    memset(r.sb, 0, sizeof r.sb);
    pthread_mutex_unlock(&r.mu);
    return 0;
}

void repl_ring_skip(int64_t last)
{
    pthread_mutex_lock(&r.mu);
    drop_all();   /* frames before the gap lack the uncaptured rows: nobody may follow them */
    if (last > r.last) r.last = last;
    pthread_mutex_unlock(&r.mu);
}

void repl_ring_stop(void)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    r.running = 0;
    drop_all();
    pthread_cond_broadcast(&r.cv_new);
    pthread_cond_broadcast(&r.cv_ack);
    wake_kind(0, INT64_MAX);
    hf_thread *t = r.timer;
    r.timer = NULL;
    pthread_mutex_unlock(&r.mu);
    hf_thread_stop_join(t);   /* it takes r.mu: joined outside */
}

/* Make room for one more frame. RET 0 or HF_ENOMEM. */
static int ring_grow(void)
{
    if (r.count < r.cap) return 0;
    size_t cap = r.cap ? r.cap * 2 : 1024;
    frame *f = malloc(cap * sizeof *f);
    if (!f) return HF_ENOMEM;
    for (size_t i = 0; i < r.count; i++) f[i] = r.f[(r.head + i) % r.cap];
    free(r.f);
    r.f = f;
    r.cap = cap;
    r.head = 0;
    return 0;
}

int repl_ring_append(int64_t lsn, int64_t term, void *cs, int n)
{
    pthread_mutex_lock(&r.mu);
    int rc = 0;
    if (!r.running) { sqlite3_free(cs); goto end; }
    if (lsn != r.last + 1 || (rc = ring_grow())) {
        /* a gap (or no memory): frames before lsn can no longer be sent consecutively */
        drop_all();
        sqlite3_free(cs);
        r.last = lsn;
        goto end;
    }
    r.f[(r.head + r.count) % r.cap] = (frame){.lsn = lsn, .term = term, .at_ms = hf_mono_ms(), .cs = cs, .len = (uint32_t)n};
    r.count++;
    r.bytes += n + REPL_FRAME_HDR;
    r.last = lsn;
    while (r.count > 1 && r.bytes > r.cfg.buffer_bytes) {
        frame *old = &r.f[r.head];
        r.bytes -= old->len + REPL_FRAME_HDR;
        sqlite3_free(old->cs);
        r.head = (r.head + 1) % r.cap;
        r.count--;
    }
    pthread_cond_broadcast(&r.cv_new);
    wake_kind(REPL_W_STREAM, INT64_MAX);
end:
    pthread_mutex_unlock(&r.mu);
    return rc;
}

void repl_frame_header(uint8_t hdr[REPL_FRAME_HDR], int64_t lsn, int64_t term, uint32_t len)
{
    hf_be_put(hdr, (uint64_t)lsn, 8);
    hf_be_put(hdr + 8, (uint64_t)term, 8);
    hf_be_put(hdr + 16, 0, 4);
    hf_be_put(hdr + 20, len, 4);
}

/* Copy the frames from LSN from on, up to max bytes (at least one).
 * Caller holds r.mu; from is held. RET frames or HF_ENOMEM. */
static int copy_frames(int64_t from, size_t max, uint8_t **buf, size_t *len)
{
    size_t i0 = (size_t)(from - first_lsn()), total = 0, k = i0;
    for (; k < r.count; k++) {
        size_t sz = REPL_FRAME_HDR + r.f[(r.head + k) % r.cap].len;
        if (k > i0 && total + sz > max) break;
        total += sz;
    }
    uint8_t *out = malloc(total ? total : 1);
    if (!out) return HF_ENOMEM;
    size_t off = 0;
    for (size_t i = i0; i < k; i++) {
        const frame *f = &r.f[(r.head + i) % r.cap];
        repl_frame_header(out + off, f->lsn, f->term, f->len);
        memcpy(out + off + REPL_FRAME_HDR, f->cs, f->len);
        off += REPL_FRAME_HDR + f->len;
    }
    *buf = out;
    *len = total;
    return (int)(k - i0);
}

int repl_stream_read(int64_t after, int wait_ms, size_t max, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    pthread_mutex_lock(&r.mu);
    ring_init();
    int rc = 0;
    int64_t deadline = hf_mono_ms() + wait_ms;
    for (;;) {
        if (!r.running) { rc = HF_ESTATE; break; }
        if (after > r.last) { rc = HF_EINVAL; break; }
        if (after + 1 < first_lsn()) { rc = HF_ENOTFOUND; r.gone_total++; break; }
        if (after < r.last) { rc = copy_frames(after + 1, max, buf, len); break; }
        int64_t left = deadline - hf_mono_ms();
        if (left <= 0) break;
        timed_wait(&r.cv_new, left);
    }
    pthread_mutex_unlock(&r.mu);
    return rc;
}

/* Move to state st (the one setter). Caller holds r.mu. RET 1 when this
 * call degraded the log (the caller emits the event after unlocking). */
static int set_state(int st, const char *why)
{
    int was = r.state;
    if (st == was) return 0;
    r.state = st;
    pthread_cond_broadcast(&r.cv_ack);
    if (was == REPL_ST_SYNC) wake_acks();
    if (st == REPL_ST_DEGRADED) {
        r.degraded_total++;
        hf_warn("replication: degraded (%s): writes no longer wait for the standby", why);
        return 1;
    }
    hf_info("replication: %s -> %s (%s)", repl_state_name(was), repl_state_name(st), why);
    return 0;
}

/* Degrade when a connected standby has been silent for the timeout.
 * Caller holds r.mu. RET set_state's. */
static int check_lost(int64_t now)
{
    int live = r.state == REPL_ST_CATCHING_UP || r.state == REPL_ST_SYNC || r.state == REPL_ST_ASYNC;
    if (!live || now - r.last_seen < (int64_t)r.cfg.standby_timeout_s * 1000) return 0;
    return set_state(REPL_ST_DEGRADED, "the standby was silent for --standby-timeout");
}

static void degraded_event(void)
{
    char d[160];
    snprintf(d, sizeof d, "the standby is lost: writes are acknowledged without it (loss window: the lag)");
    repl_ring_event("REPLICATION_DEGRADED", d);
}

static int seen_is(const standby_seen *e, const char *addr, const char *name)
{
    return e->last_seen && !strcmp(e->address, addr) && !strcmp(e->name, name);
}

/* Record the request (now, acked) of the standby addr/name in r.sb: its
 * slot, else a free one, else the one silent longest. Caller holds r.mu. */
static void standby_seen_note(const char *addr, const char *name, int64_t acked, int64_t now)
{
    int64_t lost_ms = (int64_t)r.cfg.standby_timeout_s * 1000;
    standby_seen *e = NULL;
    for (int i = 0; i < REPL_STANDBYS_MAX && !e; i++)
        if (seen_is(&r.sb[i], addr, name)) e = &r.sb[i];
    if (e && now - e->last_seen >= lost_ms) e->target = r.last;   /* back after being lost */
    for (int i = 0; i < REPL_STANDBYS_MAX && !e; i++)
        if (!r.sb[i].last_seen) e = &r.sb[i];
    if (!e) {
        e = &r.sb[0];
        for (int i = 1; i < REPL_STANDBYS_MAX; i++)
            if (r.sb[i].last_seen < e->last_seen) e = &r.sb[i];
    }
    if (!seen_is(e, addr, name)) {
        snprintf(e->address, sizeof e->address, "%s", addr);
        snprintf(e->name, sizeof e->name, "%s", name);
        e->target = r.last;
    }
    e->acked = acked;
    e->last_seen = now;
}

/* The standbys of r.sb seen within REPL_STANDBY_FORGET_S, the last seen
 * first, into st (forgetting the older ones). Caller holds r.mu. */
static void standby_seen_list(repl_status *st, int64_t now)
{
    int64_t lost_ms = (int64_t)r.cfg.standby_timeout_s * 1000;
    st->nstandbys = 0;
    for (int i = 0; i < REPL_STANDBYS_MAX; i++) {
        standby_seen *e = &r.sb[i];
        if (e->last_seen && now - e->last_seen > (int64_t)REPL_STANDBY_FORGET_S * 1000) e->last_seen = 0;
        if (!e->last_seen) continue;
        int k = st->nstandbys++;
        while (k > 0 && now - e->last_seen < st->standbys[k - 1].last_seen_ms_ago) {
            st->standbys[k] = st->standbys[k - 1];
            k--;
        }
        repl_standby_info *o = &st->standbys[k];
        snprintf(o->address, sizeof o->address, "%s", e->address);
        snprintf(o->name, sizeof o->name, "%s", e->name);
        o->acked_lsn = e->acked;
        o->last_seen_ms_ago = now - e->last_seen;
        o->state = now - e->last_seen >= lost_ms        ? "lost"
                   : e->acked < e->target               ? "catching_up"
                   : r.cfg.mode == REPL_ASYNC           ? "async"
                                                        : "sync";
    }
}

void repl_standby_ack(int64_t acked, const char *addr, const char *name)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    int64_t now = hf_mono_ms();
    standby_seen_note(addr ? addr : "", name ? name : "", acked, now);
    int was = r.state;
    r.seen = 1;
    r.last_seen = now;
    r.acked = acked;
    if (r.cfg.mode == REPL_ASYNC) {
        set_state(REPL_ST_ASYNC, "a standby streams");
    } else {
        if (r.state == REPL_ST_NONE || r.state == REPL_ST_DEGRADED) {
            r.target = r.last;
            set_state(REPL_ST_CATCHING_UP, "a standby connected");
        }
        if (r.state == REPL_ST_CATCHING_UP && acked >= r.target) set_state(REPL_ST_SYNC, "the standby caught up");
    }
    /* Back in sync after a degrade (not a standby's first catch-up: that
     * is no news, and its row would be the first frame of every idle
     * stream). */
    int synced = was != REPL_ST_SYNC && r.state == REPL_ST_SYNC && r.degraded_total > 0;
    pthread_cond_broadcast(&r.cv_ack);
    wake_acks();
    pthread_mutex_unlock(&r.mu);
    if (synced) repl_ring_event("REPLICATION_SYNC", "the standby caught up: writes wait for its acknowledgement again");
}

/* ---------- the group flush ---------- */

void repl_flush_enable(int on)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    r.flush_on = on;
    r.flush_failed = 0;                      /* a store opened anew (a restart in the tests) */
    r.flushed = atomic_load(&commit_seq);   /* what came before was durable at its COMMIT */
    pthread_cond_broadcast(&r.cv_flush);
    wake_acks();
    pthread_mutex_unlock(&r.mu);
}

int repl_flush_on(void)
{
    pthread_mutex_lock(&r.mu);
    int on = r.flush_on;
    pthread_mutex_unlock(&r.mu);
    return on;
}

uint64_t repl_note_commit(void) { return atomic_fetch_add(&commit_seq, 1) + 1; }
uint64_t repl_commit_seq(void) { return atomic_load(&commit_seq); }

void repl_flushed(uint64_t seq, int failed)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    if (failed) r.flush_failed = 1;
    else if (seq > r.flushed) {
        r.flushes++;
        r.flush_commits += (int64_t)(seq - r.flushed);
        r.flushed = seq;
    }
    pthread_cond_broadcast(&r.cv_flush);
    wake_acks();
    pthread_mutex_unlock(&r.mu);
}

int repl_flush_failed(void)
{
    pthread_mutex_lock(&r.mu);
    int f = r.flush_failed;
    pthread_mutex_unlock(&r.mu);
    return f;
}

int repl_flush_wait(uint64_t seq)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    while (r.flush_on && !r.flush_failed && r.flushed < seq) timed_wait(&r.cv_flush, 1000);
    int rc = r.flush_on && r.flushed < seq ? HF_EIO : 0;
    pthread_mutex_unlock(&r.mu);
    return rc;
}

static void note_wait(int64_t us)
{
    r.wait_us[r.waits % WAIT_SAMPLES] = us;
    r.waits++;
    if (us > r.wait_max) r.wait_max = us;
}

int repl_wait(int64_t lsn)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    int rc = 0, degraded = 0;
    int64_t start = hf_mono_ms(), now = start, limit = (int64_t)r.cfg.standby_timeout_s * 1000;
    int64_t start_us = hf_mono_us();
    if (!r.running || r.state != REPL_ST_SYNC || r.acked >= lsn) goto end;
    for (;;) {
        if ((degraded = check_lost(now))) { rc = HF_ETIMEOUT; break; }
        if (r.state != REPL_ST_SYNC) { rc = r.state == REPL_ST_DEGRADED ? HF_ETIMEOUT : 0; break; }
        if (r.acked >= lsn || !r.running) break;
        if (now - start >= limit) {
            degraded = set_state(REPL_ST_DEGRADED, "a write waited --standby-timeout for the standby's ack");
            rc = HF_ETIMEOUT;
            break;
        }
        int64_t until = start + limit;
        if (r.last_seen + limit < until) until = r.last_seen + limit;
        timed_wait(&r.cv_ack, until - now);
        now = hf_mono_ms();
    }
    note_wait(hf_mono_us() - start_us);
end:
    pthread_mutex_unlock(&r.mu);
    if (degraded) degraded_event();
    return rc;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void repl_ring_status(repl_status *st)
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    int64_t now = hf_mono_ms();
    int degraded = check_lost(now);
    st->mode = r.cfg.mode;
    st->state = r.state;
    st->standby_seen = r.seen;
    st->connected = r.seen && now - r.last_seen < (int64_t)r.cfg.standby_timeout_s * 1000;
    st->acked_lsn = r.acked;
    st->lag_lsn = r.seen && r.last > r.acked ? r.last - r.acked : 0;
    st->last_seen_ms_ago = r.seen ? now - r.last_seen : -1;
    if (st->lag_lsn > 0 && r.acked + 1 >= first_lsn() && r.count)
        st->lag_ms = now - r.f[(r.head + (size_t)(r.acked + 1 - first_lsn())) % r.cap].at_ms;
    st->ring_first = first_lsn();
    st->ring_frames = (int64_t)r.count;
    st->ring_bytes = r.bytes;
    st->degraded_total = r.degraded_total;
    st->gone_total = r.gone_total;
    st->waits = r.waits;
    st->wait_max_us = r.wait_max;
    st->flush_on = r.flush_on;
    st->flush_failed = r.flush_failed;
    st->flushes = r.flushes;
    st->flush_commits = r.flush_commits;
    standby_seen_list(st, now);
    int n = r.waits < WAIT_SAMPLES ? (int)r.waits : WAIT_SAMPLES;
    int64_t tmp[WAIT_SAMPLES];
    memcpy(tmp, r.wait_us, (size_t)n * sizeof *tmp);
    pthread_mutex_unlock(&r.mu);
    if (n) {
        qsort(tmp, (size_t)n, sizeof *tmp, cmp64);
        st->wait_p99_us = tmp[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
    }
    if (degraded) degraded_event();
}

/* ---------- parked requests ---------- */

/* The "hf-repl" thread: every TIMER_MS, a silent standby degrades the log
 * (which wakes the ACK waiters), an ACK waiter parked for
 * --standby-timeout degrades it too, and a STREAM waiter past its wait is
 * woken (its request answers 204). */
static void timer_main(hf_thread *t, void *arg)
{
    (void)arg;
    while (!hf_thread_wait(t, TIMER_MS)) {
        pthread_mutex_lock(&r.mu);
        int64_t now = hf_mono_ms();
        int degraded = check_lost(now);
        for (repl_waiter *w = r.waiters, *nx; w; w = nx) {
            nx = w->next;
            if (w->deadline_ms > now) continue;
            if (w->kind != REPL_W_ACK)
                wake_one(w);
            else if (standby_pending(w))   /* the standby's part only: a flush has no deadline */
                degraded |= set_state(REPL_ST_DEGRADED, "a write waited --standby-timeout for the standby's ack");
        }
        wake_acks();
        pthread_mutex_unlock(&r.mu);
        if (degraded) degraded_event();
    }
}

/* Is there something for w to wait for? Caller holds r.mu. */
static int must_wait(const repl_waiter *w)
{
    if (w->kind == REPL_W_ACK) return flush_pending(w) || standby_pending(w);
    if (!r.running) return 0;
    return w->lsn == r.last && w->wait_ms > 0;
}

int repl_park(repl_waiter *w, void (*park)(void *arg))
{
    pthread_mutex_lock(&r.mu);
    ring_init();
    int parked = 0;
    if (w->kind == REPL_W_ACK) w->failed = r.flush_failed && not_flushed(w);
    if (must_wait(w) && (r.timer || hf_thread_start(&r.timer, "hf-repl", timer_main, NULL) == 0)) {
        w->t0_us = hf_mono_us();
        w->deadline_ms = hf_mono_ms() + (w->kind == REPL_W_ACK ? (int64_t)r.cfg.standby_timeout_s * 1000 : w->wait_ms);
        w->prev = NULL;
        w->next = r.waiters;
        if (r.waiters) r.waiters->prev = w;
        r.waiters = w;
        w->parked = 1;
        park(w->arg);
        parked = 1;
    }
    pthread_mutex_unlock(&r.mu);
    return parked;
}

void repl_unpark(repl_waiter *w)
{
    pthread_mutex_lock(&r.mu);
    if (w->parked) {
        if (w->prev) w->prev->next = w->next;
        else r.waiters = w->next;
        if (w->next) w->next->prev = w->prev;
        w->prev = w->next = NULL;
        w->parked = 0;
    }
    pthread_mutex_unlock(&r.mu);
}

/*
 * standby.c — a standby's life (docs/scheduler.md, "Standby and
 * failover"): its preparation at start (bootstrap when needed), the apply
 * loop (thread "hf-standby") and its end, promotion, which re-executes the
 * process as a primary.
 *
 * The loop long-polls GET /api/v1/replication/stream?cluster=C&term=T&
 * after=L, where L is the last LSN it holds durably: the replica's
 * repl_state.lsn (the primary's LSN bump is inside every changeset, so
 * the row says what was applied) or, past it, the last frame of its
 * spool (standby_spool.c). For an answer it checks the frames
 * (consecutive from L+1, the standby's term), fetches the objects their
 * changesets insert into checkpoints and contexts, appends the answer to
 * the spool and fdatasyncs it, and the next request's after= acknowledges
 * it: an ack implies the frames are on the standby's disk and the objects
 * held. The thread "hf-sb-apply" applies the spool behind it, whole
 * answers in one BEGIN IMMEDIATE ... COMMIT with triggers off (the
 * triggers' own changes are in the changesets), on its own connection.
 * A promotion applies the whole spool first. A conflict (the replica is
 * not the primary's past), a 409 or a 410 is divergence: the database is
 * moved aside (the spool removed) and the process re-executes itself,
 * and the start-up path bootstraps afresh. Replacing the file under the
 * open readers of the API is never done in place.
 *
 * While the primary is silent (no answer: refused, a connect timeout of
 * STREAM_CONNECT_MS, or STREAM_STALL_S without a byte), the loop retries
 * every LOST_TICK_MS and evaluates the witness rule (failover.c) before
 * each retry, logging "primary silent N ms; V of L live agents agree"
 * once a second.
 *
 * The loop's connection (reads: the witness rule; the promotion's
 * write once the apply thread is stopped) and the apply thread's are
 * their own (no session: a standby records nothing); the API reads
 * through the store's pooled readers. State the API reads (figures, the
 * promotion handshake) is guarded by st_mu.
 */
#include "scheduler/standby/standby.h"
#include "scheduler/store/store.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FETCH_TIMEOUT_MS  10000   /* object fetches: connect, and a stall of this long aborts */
#define STREAM_CONNECT_MS 1000    /* the stream's connect timeout: a powered-off primary is noticed fast */
#define STREAM_STALL_S    3       /* no byte of the stream's answer for this long aborts it (the long-poll
                                   * holds <= 1000 ms); a large answer has no total timeout */
#define LOST_TICK_MS      500     /* while the primary is silent: the witness rule at least this often */
#define LOST_LOG_MS       1000    /* ... and the "primary silent" info line this often */
#define STREAM_ANSWER_MAX ((size_t)STANDBY_FRAME_MAX + (16u << 20))   /* <= 8 MiB of frames, or one large one */
#define BOOTSTRAPS_ENV    "HYPERFARM_STANDBY_BOOTSTRAPS"   /* carried across a re-exec */
#define APPLY_RETRY_MS    500     /* after a failed apply that is not divergence (a full disk) */

static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    hf_thread     *th;
    standby_config cfg;          /* a copy; strings owned by the caller (main's argv/options) */
    atomic_int     cancel;       /* aborts the loop's request in flight */
    int            running;      /* guarded by st_mu */
    int            promote;      /* 1 asked, 2 committed, -1 failed (st_mu) */
    int64_t        new_term;     /* st_mu */
    char           promote_by[64];
    int64_t        applied_lsn, last_answer_ms, last_commit_wall, bootstraps;   /* st_mu */
    atomic_int     apply_failed; /* the apply thread's divergence (HF_ECORRUPT) or a broken spool */
    int            url;          /* the index of the URL the loop streams from (st_mu) */
} sb;

/* ---------- the primary's status and the start-up path ---------- */

/* GET /replication of c. RET 0 with role/term/lsn/cluster and *schema
 * (the primary's database's schema version; 0: it does not say, a
 * hyperfarm older than the check); HF_EAUTH; HF_ECONN (no answer or not
 * 200). */
static int primary_status(hf_http *c, char *role, size_t rolelen, int64_t *term, int64_t *lsn, char *cluster,
                          size_t clusterlen, int *schema, char *err, size_t errlen)
{
    long status = 0;
    json_t *r = NULL;
    int rc = hf_http_request(c, "GET", "/api/v1/replication", NULL, &status, &r, err, errlen);
    if (!rc && (status == 401 || status == 403)) {
        snprintf(err, errlen, "%s refused the standby token (HTTP %ld)", hf_http_base(c), status);
        rc = HF_EAUTH;
    } else if (!rc && status != 200) {
        snprintf(err, errlen, "%s: GET /replication: HTTP %ld", hf_http_base(c), status);
        rc = HF_ECONN;
    }
    const char *ro = NULL, *cl = NULL;
    json_int_t t = 0, l = 0;
    json_error_t je;
    if (!rc && json_unpack_ex(r, &je, 0, "{s:s, s:I, s:I, s:s}", "role", &ro, "term", &t, "lsn", &l, "cluster", &cl)) {
        snprintf(err, errlen, "%s: GET /replication: %s", hf_http_base(c), je.text);
        rc = HF_ECONN;
    }
    if (!rc) {
        snprintf(role, rolelen, "%s", ro);
        snprintf(cluster, clusterlen, "%s", cl);
        *term = t;
        *lsn = l;
        json_t *sv = json_object_get(r, "schema");
        *schema = json_is_integer(sv) ? (int)json_integer_value(sv) : 0;
    }
    json_decref(r);
    return rc;
}

/* A client of url i. RET NULL on OOM. */
static hf_http *client_for(const standby_config *cfg, int i, long timeout_ms)
{
    hf_http *c = hf_http_new(cfg->urls[i], cfg->token, timeout_ms, 0);
    if (c && cfg->cafile) hf_http_set_cafile(c, cfg->cafile);
    return c;
}

/* Bootstrap cfg->db from c: move it aside, download, fetch objects. */
static int bootstrap(const standby_config *cfg, hf_http *c, int *retry_s, char *err, size_t errlen)
{
    int rc;
    int64_t n = 0;
    if ((rc = standby_move_aside(cfg->db, "diverged", NULL, 0))) {
        snprintf(err, errlen, "cannot move %s aside: %s", cfg->db, hf_strerror(rc));
        return rc;
    }
    if ((rc = standby_spool_remove(cfg->db))) {   /* its frames belong to the replica moved aside */
        snprintf(err, errlen, "cannot remove the spool of %s: %s", cfg->db, hf_strerror(rc));
        return rc;
    }
    hf_info("standby: bootstrapping %s from %s", cfg->db, hf_http_base(c));
    if ((rc = standby_download_snapshot(c, cfg->db, retry_s, err, errlen))) return rc;
    if ((rc = standby_fetch_referenced(c, cfg->db, cfg->ck_dir, &n, err, errlen))) return rc;
    pthread_mutex_lock(&st_mu);
    sb.bootstraps++;
    pthread_mutex_unlock(&st_mu);
    hf_info("standby: bootstrap done, %lld objects fetched", (long long)n);
    return 0;
}

int standby_prepare(const standby_config *cfg, volatile sig_atomic_t *stop, char *err, size_t errlen)
{
    int rc = standby_spool_catch_up(cfg->db, err, errlen);
    if (rc == HF_ECORRUPT) {
        /* the spool does not apply: the replica is not the stream's past */
        hf_warn("standby: %s: moving the replica aside", err);
        standby_move_aside(cfg->db, "diverged", NULL, 0);
        standby_spool_remove(cfg->db);
    } else if (rc) {
        return rc;   /* a disk that cannot be read or written: nothing can be served either */
    }
    rc = HF_ECONN;
    const char *env = getenv(BOOTSTRAPS_ENV);
    pthread_mutex_lock(&st_mu);
    sb.bootstraps = env ? strtoll(env, NULL, 10) : 0;
    pthread_mutex_unlock(&st_mu);
    for (int round = 0; !*stop; round++) {
        hf_http *c = client_for(cfg, round % cfg->nurls, 5000);
        char role[32], cl[80], mycl[80] = "";
        int64_t t = 0, l = 0, myt = 0, myl = 0;
        if (!c) return HF_ENOMEM;
        int schema = 0, retry_s = 0;   /* retry_s: a busy primary's Retry-After, else 1 s */
        rc = primary_status(c, role, sizeof role, &t, &l, cl, sizeof cl, &schema, err, errlen);
        if (!rc && strcmp(role, "primary")) {
            snprintf(err, errlen, "%s is %s, not primary", hf_http_base(c), role);
            rc = HF_ECONN;
        }
        /* Same schema or nothing: neither bootstrap (this binary would
         * migrate the copy) nor follow; the replica is left as it is. */
        if (!rc && schema != store_schema_newest()) {
            snprintf(err, errlen, "%s's database is at schema version %d%s, this standby's binary at %d: a standby "
                     "follows only a primary of the same hyperfarm version (docs/operations.md, \"Upgrading\")",
                     hf_http_base(c), schema, schema ? "" : " (it does not say: an older hyperfarm)",
                     store_schema_newest());
            rc = HF_EUNSUP;
        }
        if (!rc) {
            int have = standby_read_state(cfg->db, &myt, &myl, mycl, sizeof mycl) == 0;
            if (have && !strcmp(mycl, cl) && myt == t && myl <= l) {
                hf_info("standby: %s follows %s from lsn %lld (term %lld)", cfg->db, hf_http_base(c), (long long)myl,
                        (long long)t);
                rc = standby_fetch_referenced(c, cfg->db, cfg->ck_dir, NULL, err, errlen);
            } else {
                rc = bootstrap(cfg, c, &retry_s, err, errlen);
            }
        }
        hf_http_free(c);
        if (!rc || rc == HF_EAUTH) return rc;
        if (rc == HF_ECONN && round + 1 >= cfg->nurls && standby_read_state(cfg->db, &myt, &myl, mycl, sizeof mycl) == 0) {
            /* No primary answers, but we hold a replica: serve it read-only
             * and let the apply loop find the primary (or the witnesses
             * promote us). */
            hf_warn("standby: %s; starting from the replica %s (lsn %lld, term %lld)", err, cfg->db, (long long)myl,
                    (long long)myt);
            return 0;
        }
        if (round % 10 == 0 || retry_s) {
            if (rc == HF_EUNSUP) hf_error("standby: %s; waiting", err);
            else hf_warn("standby: %s; retrying in %d s", err, retry_s ? retry_s : 1);
        }
        for (int i = 0; i < (retry_s ? retry_s : 1) * 10 && !*stop; i++) usleep(100 * 1000);
    }
    snprintf(err, errlen, "stopped");
    return rc ?: HF_ESTATE;
}

/* ---------- re-exec ---------- */

char **standby_argv_edit(char *const *argv, int argc, const char *drop, const char *flag, const char *add)
{
    char **v = calloc((size_t)argc + 3, sizeof *v);
    size_t dl = strlen(drop);
    int n = 0;
    if (!v) return NULL;
    for (int i = 0; i < argc && argv[i]; i++) {
        if (i > 0 && !strcmp(argv[i], drop)) { i++; continue; }
        if (i > 0 && !strncmp(argv[i], drop, dl) && argv[i][dl] == '=') continue;
        v[n++] = argv[i];
    }
    if (flag && add) {
        v[n++] = (char *)flag;
        v[n++] = (char *)add;
    }
    v[n] = NULL;
    return v;
}

int standby_reexec(char *const *argv)
{
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            int fd = atoi(e->d_name);
            if (fd > 2 && fd != dirfd(d)) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        closedir(d);
    }
    char n[32];
    pthread_mutex_lock(&st_mu);
    snprintf(n, sizeof n, "%lld", (long long)sb.bootstraps);
    pthread_mutex_unlock(&st_mu);
    setenv(BOOTSTRAPS_ENV, n, 1);   /* the counter survives the re-exec */
    fflush(stdout);
    fflush(stderr);
    hf_info("re-executing as: %s%s", argv[0], argv[1] ? " ..." : "");
    execv("/proc/self/exe", argv);
    hf_error("execv /proc/self/exe: %s", strerror(errno));
    return hf_err_from_errno(errno);
}

/* ---------- the apply loop ---------- */

typedef struct loop_state {
    hf_http     *c;             /* objects (FETCH_TIMEOUT_MS) */
    hf_http     *sc;            /* the stream (STREAM_CONNECT_MS, stall STREAM_STALL_S) */
    int          url;           /* index of the URL in use */
    int64_t      logged_ms;     /* when the last "primary silent" line was logged */
    sqlite3     *db;
    standby_cols cols;
    int64_t      term, lsn;     /* lsn: the replica's at start; then read the apply thread's */
    int64_t      recv;          /* the last LSN spooled: the stream's after= */
    char         cluster[80];
    standby_spool *sp;
    struct apply_state *A;      /* the apply thread's, while it runs */
} loop_state;

/* The apply thread's own: its connection and object client. */
typedef struct apply_state {
    hf_thread     *th;
    sqlite3       *db;
    hf_http       *c;
    standby_cols   cols;
    standby_spool *sp;
    int64_t        term;
    _Atomic int64_t lsn;        /* applied */
} apply_state;

typedef struct fetch_ctx {
    hf_http    *c;
    sqlite3    *db;             /* fetch_late: the replica the sizes are read from */
    int         deferred;       /* objects without a size in their change */
    int         rc;
    char       *err;
    size_t      errlen;
} fetch_ctx;

static int fetch_one(void *ud, const standby_object *o)
{
    fetch_ctx *x = ud;
    if (o->size < 0) { x->deferred++; return 0; }
    return x->rc = standby_fetch_object(x->c, sb.cfg.ck_dir, o, x->err, x->errlen);
}

/* After the commit: the objects whose size only the applied rows say. */
static int fetch_late(void *ud, const standby_object *o)
{
    fetch_ctx *x = ud;
    if (o->size >= 0) return 0;
    standby_object s = *o;
    s.size = standby_apply_object_size(x->db, o->sha256);
    return x->rc = standby_fetch_object(x->c, sb.cfg.ck_dir, &s, x->err, x->errlen);
}

/* Walk the objects of every frame of buf with fn. RET 0 or HF_E*. */
static int frames_objects(const standby_cols *cols, const uint8_t *buf, size_t n, standby_object_fn *fn,
                          fetch_ctx *x)
{
    size_t off = 0;
    standby_frame f;
    int r, rc;
    while ((r = standby_frame_next(buf, n, &off, &f)) == 1)
        if ((rc = standby_changeset_objects(f.data, (int)f.len, cols, fn, x))) return x->rc ? x->rc : rc;
    return r < 0 ? HF_EPARSE : 0;
}

/* Start the process again on its replica: after divergence (aside: the
 * replica is moved aside first, so the start-up bootstraps), or when the
 * primary runs another schema version (it was upgraded, or this standby
 * was: the replica is kept and standby_prepare waits, saying why, until
 * both run one version). */
static void restart(loop_state *L, int aside)
{
    sqlite3_close_v2(L->db);
    L->db = NULL;
    if (aside) {
        standby_move_aside(sb.cfg.db, "diverged", NULL, 0);
        standby_spool_remove(sb.cfg.db);   /* frames of the lineage it could not follow */
    }
    usleep(500 * 1000);   /* a primary that keeps refusing us is not hammered */
    char **v = standby_argv_edit(sb.cfg.argv, sb.cfg.argc, "--no-such-flag", NULL, NULL);
    if (v) standby_reexec(v);
    hf_error("standby: cannot re-execute; stopping the apply loop");
}

/* One 200 answer: check, fetch its objects, spool it (durable: what the
 * next request acknowledges). RET 0, HF_ECORRUPT (divergence), other
 * HF_E* (retry). */
static int take_answer(loop_state *L, const uint8_t *buf, size_t n, char *err, size_t errlen)
{
    fetch_ctx x = {.c = L->c, .err = err, .errlen = errlen};
    int rc, nf = standby_frames_check(buf, n, L->recv, L->term, err, errlen);
    if (nf < 0) return nf == HF_ESTATE ? HF_ECORRUPT : nf;   /* HF_ETOOBIG: the caller bootstraps */
    if ((rc = frames_objects(&L->cols, buf, n, fetch_one, &x))) return rc;
    if ((rc = standby_spool_append(L->sp, buf, n, L->recv + nf))) {
        snprintf(err, errlen, "cannot write the spool: %s", hf_strerror(rc));
        return rc;
    }
    L->recv += nf;
    hf_debug("standby: spooled %d frames, lsn %lld", nf, (long long)L->recv);
    return 0;
}

/* The apply thread's step: the frames of buf after its LSN (a record
 * may begin at or below it only after a crash between the apply's commit
 * and the spool's mark), applied in one transaction, then the objects
 * only the applied rows size. RET 0, HF_ECORRUPT (divergence), HF_E*. */
/* The apply thread's step: standby_spool_apply, then the objects only the
 * applied rows size, then the figures. RET 0, HF_ECORRUPT, HF_E*. */
static int apply_answer(apply_state *A, const uint8_t *buf, size_t n, char *err, size_t errlen)
{
    int64_t lsn = atomic_load(&A->lsn);
    size_t start = 0;
    int nf = standby_spool_apply(A->db, buf, n, &lsn, &start, err, errlen);
    if (nf <= 0) return nf;
    atomic_store(&A->lsn, lsn);
    /* the receiver fetched the objects whose size the changes carry */
    fetch_ctx x = {.c = A->c, .db = A->db, .err = err, .errlen = errlen};
    int rc = frames_objects(&A->cols, buf + start, n - start, fetch_late, &x);
    pthread_mutex_lock(&st_mu);
    sb.applied_lsn = lsn;
    sb.last_commit_wall = hf_wall_ms();
    pthread_mutex_unlock(&st_mu);
    hf_debug("standby: applied %d frames, lsn %lld", nf, (long long)lsn);
    return rc;
}

static void apply_main(hf_thread *t, void *arg)
{
    apply_state *A = arg;
    char err[512];
    while (!hf_thread_stopping(t)) {
        uint8_t *buf = NULL;
        size_t n = 0;
        int64_t mark = 0;
        int rc = standby_spool_take(A->sp, 200, STANDBY_APPLY_MAX, &buf, &n, &mark);
        if (rc == 0 && n) rc = apply_answer(A, buf, n, err, sizeof err);
        else if (rc) snprintf(err, sizeof err, "reading the spool: %s", hf_strerror(rc));
        free(buf);
        if (rc == 0) {
            if (n) standby_spool_applied(A->sp, mark);
            continue;
        }
        if (rc == HF_ECORRUPT || rc == HF_EPARSE) {
            hf_warn("standby: %s", err);
            atomic_store(&sb.apply_failed, HF_ECORRUPT);
            atomic_store(&sb.cancel, 1);   /* cut the stream's long-poll short: the loop restarts */
            if (sb.th) hf_thread_kick(sb.th);
            return;
        }
        hf_warn("standby: %s (retrying)", err);
        hf_thread_wait(t, APPLY_RETRY_MS);
    }
}

/* Start the apply thread on its own connection. RET 0 or HF_E*. */
static int apply_start(loop_state *L, char *err, size_t errlen)
{
    apply_state *A = calloc(1, sizeof *A);
    if (!A) return HF_ENOMEM;
    int rc = standby_apply_open(sb.cfg.db, &A->db, &A->cols, err, errlen);
    if (!rc && !(A->c = client_for(&sb.cfg, L->url, FETCH_TIMEOUT_MS))) rc = HF_ENOMEM;
    if (!rc) {
        hf_http_set_cancel(A->c, &sb.cancel);
        A->sp = L->sp;
        A->term = L->term;
        atomic_store(&A->lsn, L->lsn);
        rc = hf_thread_start(&A->th, "hf-sb-apply", apply_main, A);
    }
    if (rc) {
        hf_http_free(A->c);
        sqlite3_close_v2(A->db);
        free(A);
        return rc;
    }
    L->A = A;
    return 0;
}

/* Stop it (drain: once the spool is applied, or it failed). */
static void apply_stop(loop_state *L, int drain)
{
    apply_state *A = L->A;
    if (!A) return;
    while (drain && standby_spool_pending(L->sp) && !atomic_load(&sb.apply_failed) && !hf_thread_stopping(sb.th))
        usleep(2 * 1000);
    standby_spool_wake(L->sp);
    hf_thread_stop_join(A->th);
    L->lsn = atomic_load(&A->lsn);
    hf_http_free(A->c);
    sqlite3_close_v2(A->db);
    free(A);
    L->A = NULL;
}

/* The stream answer's sink: append to a growing buffer. */
typedef struct answer_buf {
    char  *p;
    size_t n, cap;
    int    too_big;     /* a frame over STANDBY_FRAME_MAX: stop reading, bootstrap */
} answer_buf;

/* The first frame's header says its length (the primary sends a frame
 * over REPL_STREAM_MAX alone, first): one over STANDBY_FRAME_MAX ends
 * the download at once instead of after it. */
static int first_too_big(const answer_buf *a)
{
    size_t off = 0;
    standby_frame f;
    /* the header's bound is checked before the body is looked for */
    return a->n >= STANDBY_FRAME_HDR && standby_frame_next((const uint8_t *)a->p, a->n, &off, &f) == HF_ETOOBIG;
}

static int answer_sink(void *ud, const void *p, size_t n)
{
    answer_buf *a = ud;
    if (a->n + n > STREAM_ANSWER_MAX) { a->too_big = 1; return HF_ETOOBIG; }
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64u << 10;
        while (cap < a->n + n) cap *= 2;
        char *g = realloc(a->p, cap);
        if (!g) return HF_ENOMEM;
        a->p = g;
        a->cap = cap;
    }
    memcpy(a->p + a->n, p, n);
    a->n += n;
    if (a->n - n < STANDBY_FRAME_HDR && first_too_big(a)) { a->too_big = 1; return HF_ETOOBIG; }
    return 0;
}

/* One stream request on L->sc: connect within STREAM_CONNECT_MS, abort on
 * a stall of STREAM_STALL_S (a powered-off primary answers nothing: not
 * even a reset). RET 0 (an answer was taken or none came: the primary is
 * there), 1 (divergence: re-bootstrap), HF_ECONN (no primary at this
 * URL). */
static int answer_reason_is(const char *answer, const char *reason)
{
    json_t *j = answer ? json_loads(answer, 0, NULL) : NULL;
    int is = j && !strcmp(json_string_value(json_object_get(j, "reason")) ?: "", reason);
    json_decref(j);
    return is;
}

static int stream_once(loop_state *L)
{
    char path[300], err[512];
    answer_buf ab = {0};
    snprintf(path, sizeof path, "/api/v1/replication/stream?cluster=%s&term=%lld&after=%lld&schema=%d%s%s", L->cluster,
             (long long)L->term, (long long)L->recv, store_schema_newest(), *sb.cfg.name ? "&name=" : "", sb.cfg.name);
    hf_http_stream s = {.method = "GET", .path = path, .body_fd = -1, .sink = answer_sink, .sink_ud = &ab,
                        .stall_bytes = 1, .stall_s = STREAM_STALL_S};
    int rc = hf_http_stream_run(L->sc, &s, err, sizeof err);
    long status = s.status;
    if (ab.too_big) {
        /* One transaction larger than the stream carries to a standby (a
         * huge delete): the snapshot holds it. */
        hf_warn("standby: the frame after lsn %lld is over %u MiB: bootstrapping from a snapshot instead",
                (long long)L->recv, STANDBY_FRAME_MAX >> 20);
        rc = 1;
    } else if (rc) {
        hf_debug("standby: %s", err);
        rc = HF_ECONN;
    } else if (status == 200) {
        rc = take_answer(L, (const uint8_t *)ab.p, ab.n, err, sizeof err);
        if (rc == HF_ETOOBIG) {   /* a frame over the bound after smaller ones */
            hf_warn("standby: %s: bootstrapping from a snapshot instead", err);
            rc = HF_ECORRUPT;
        } else if (rc == HF_ECORRUPT) hf_warn("standby: %s", err);
        else if (rc) hf_warn("standby: %s (retrying)", err);
        rc = rc == HF_ECORRUPT ? 1 : rc ? HF_ECONN : 0;
    } else if (status == 409 && answer_reason_is(s.answer, "schema")) {
        hf_error("standby: the primary answered %ld: %.300s", status, s.answer);
        rc = 2;   /* another version: not divergence, nothing moved aside */
    } else if (status == 409 || status == 410) {
        hf_warn("standby: the primary answered %ld: %.200s", status, s.answer ? s.answer : "");
        rc = 1;
    } else if (status != 204) {
        hf_debug("standby: stream: HTTP %ld", status);
        rc = HF_ECONN;
    }
    free(ab.p);
    free(s.answer);
    if (rc == 0 || (status == 200 && rc == HF_ECONN)) {   /* the primary answered */
        pthread_mutex_lock(&st_mu);
        sb.last_answer_ms = hf_mono_ms();
        pthread_mutex_unlock(&st_mu);
    }
    return rc;
}

/* The promotion asked for: commit the new term, tell the asker, re-exec. */
static void promote_now(loop_state *L)
{
    char err[512], by[64];
    int64_t t = 0;
    pthread_mutex_lock(&st_mu);
    snprintf(by, sizeof by, "%s", sb.promote_by);
    pthread_mutex_unlock(&st_mu);
    /* Everything acknowledged is in the replica before the new term:
     * the spool applied to its end. */
    apply_stop(L, 1);
    int rc;
    if (atomic_load(&sb.apply_failed)) {
        snprintf(err, sizeof err, "the spool could not be applied (see above); the replica stops at lsn %lld",
                 (long long)L->lsn);
        rc = HF_ECORRUPT;
    } else {
        rc = standby_apply_promote(L->db, by, &t, err, sizeof err);
    }
    if (rc == 0) standby_spool_remove(sb.cfg.db);   /* applied: a primary keeps none */
    pthread_mutex_lock(&st_mu);
    sb.promote = rc ? -1 : 2;
    sb.new_term = t;
    pthread_mutex_unlock(&st_mu);
    if (rc) {
        hf_error("standby: promotion failed: %s", err);
        atomic_store(&sb.cancel, 0);
        return;
    }
    sqlite3_close_v2(L->db);
    L->db = NULL;
    usleep(300 * 1000);   /* the 202 of POST /replication/promote leaves first */
    char peers[4096] = "";
    for (int i = 0; i < sb.cfg.nurls; i++)
        snprintf(peers + strlen(peers), sizeof peers - strlen(peers), "%s%s", i ? "," : "", sb.cfg.urls[i]);
    int has_peers = 0;
    for (int i = 1; i < sb.cfg.argc; i++)
        if (!strncmp(sb.cfg.argv[i], "--peers", 7)) has_peers = 1;
    char **v = standby_argv_edit(sb.cfg.argv, sb.cfg.argc, "--standby-of", has_peers ? NULL : "--peers",
                                 has_peers ? NULL : peers);
    setenv("HYPERFARM_STANDBY_OF", "", 1);   /* empty: overrides a --config file's or the environment's */
    if (v) standby_reexec(v);
    hf_error("standby: cannot re-execute as the primary");
}

/* Is a promotion asked (1)? */
static int promote_asked(void)
{
    pthread_mutex_lock(&st_mu);
    int p = sb.promote == 1;
    pthread_mutex_unlock(&st_mu);
    return p;
}

/* Clients of URL i for the loop (objects, stream). RET 0 or HF_ENOMEM. */
static int loop_clients(loop_state *L, int i)
{
    hf_http_free(L->c);
    hf_http_free(L->sc);
    L->c = client_for(&sb.cfg, i, FETCH_TIMEOUT_MS);
    L->sc = client_for(&sb.cfg, i, STREAM_CONNECT_MS);
    if (!L->c || !L->sc) return HF_ENOMEM;
    hf_http_set_cancel(L->c, &sb.cancel);
    hf_http_set_cancel(L->sc, &sb.cancel);
    L->url = i;
    pthread_mutex_lock(&st_mu);
    sb.url = i;
    pthread_mutex_unlock(&st_mu);
    return 0;
}

/* The witness rule now (and the once-a-second info line): RET 1 when
 * the standby promotes itself (asked). */
static int witness_check(loop_state *L)
{
    int64_t now = hf_mono_ms(), silent;
    pthread_mutex_lock(&st_mu);
    silent = now - sb.last_answer_ms;
    pthread_mutex_unlock(&st_mu);
    int agree = 0, live = 0;
    int yes = failover_decide(L->db, silent, sb.cfg.failover_after_s, L->term, &agree, &live);
    if (!yes && now - L->logged_ms >= LOST_LOG_MS) {
        L->logged_ms = now;
        hf_info("standby: primary silent %lld ms; %d of %d live agents agree%s", (long long)silent, agree, live,
                sb.cfg.failover_after_s > 0 ? "" : " (automatic failover off)");
    }
    if (!yes) return 0;
    hf_warn("standby: no answer from the primary for %lld ms and %d of %d live agents lost it too: promoting",
            (long long)silent, agree, live);
    pthread_mutex_lock(&st_mu);
    if (!sb.promote) {
        sb.promote = 1;
        snprintf(sb.promote_by, sizeof sb.promote_by, "failover");
    }
    pthread_mutex_unlock(&st_mu);
    return 1;
}

/* No primary at the current URL (the request began at t0): the witness
 * rule, the next URL, and a pause so that an attempt (and the rule) comes
 * every LOST_TICK_MS: a refused connection fails at once, a powered-off
 * host within STREAM_CONNECT_MS (or STREAM_STALL_S on a connection it
 * held). */
static void primary_lost(loop_state *L, hf_thread *t, int64_t t0)
{
    if (witness_check(L)) return;
    if (sb.cfg.nurls > 1) loop_clients(L, (L->url + 1) % sb.cfg.nurls);
    int64_t left = t0 + LOST_TICK_MS - hf_mono_ms();
    if (left > 0) hf_thread_wait(t, left);
}

static void loop_main(hf_thread *t, void *arg)
{
    (void)arg;
    loop_state L = {0};
    char err[512];
    if (standby_apply_open(sb.cfg.db, &L.db, &L.cols, err, sizeof err) ||
        standby_apply_state(L.db, &L.term, &L.lsn, L.cluster, sizeof L.cluster) ||
        standby_spool_open(sb.cfg.db, L.lsn, L.term, &L.sp, err, sizeof err)) {
        hf_error("standby: %s", err);
        goto end;
    }
    L.recv = standby_spool_last(L.sp);
    if (loop_clients(&L, 0)) goto end;
    pthread_mutex_lock(&st_mu);
    sb.applied_lsn = L.lsn;
    sb.last_answer_ms = hf_mono_ms();
    pthread_mutex_unlock(&st_mu);
    atomic_store(&sb.apply_failed, 0);
    hf_info("standby: following the stream of %s from lsn %lld (term %lld; applied %lld)", sb.cfg.urls[0],
            (long long)L.recv, (long long)L.term, (long long)L.lsn);
    while (!hf_thread_stopping(t)) {
        if (atomic_load(&sb.apply_failed)) {
            apply_stop(&L, 0);
            hf_warn("standby: the replica cannot apply the primary's stream: re-bootstrapping");
            restart(&L, 1);
            break;
        }
        if (promote_asked()) { promote_now(&L); if (!L.db) break; continue; }
        if (!L.A && apply_start(&L, err, sizeof err)) {
            hf_error("standby: cannot start the apply thread: %s", err);
            hf_thread_wait(t, APPLY_RETRY_MS);
            continue;
        }
        int64_t t0 = hf_mono_ms();
        int rc = stream_once(&L);
        if (atomic_load(&sb.apply_failed)) continue;
        if (rc == 1) {
            apply_stop(&L, 0);
            hf_warn("standby: the replica cannot follow the primary's stream: re-bootstrapping");
            restart(&L, 1);
            break;
        }
        if (rc == 2) {
            apply_stop(&L, 1);   /* the replica whole at this version before it is upgraded */
            hf_error("standby: the primary's schema version differs from this binary's: applying stopped, the "
                     "replica kept as it is; restarting to wait for one version on both sides");
            restart(&L, 0);
            break;
        }
        if (rc == HF_ECONN && !hf_thread_stopping(t) && !promote_asked()) primary_lost(&L, t, t0);
        else if (rc == 0) L.logged_ms = 0;
    }
end:
    apply_stop(&L, 0);
    standby_spool_close(L.sp);
    hf_http_free(L.c);
    hf_http_free(L.sc);
    sqlite3_close_v2(L.db);
    pthread_mutex_lock(&st_mu);
    if (sb.promote == 1) sb.promote = -1;
    pthread_mutex_unlock(&st_mu);
}

int standby_start(const standby_config *cfg)
{
    sb.cfg = *cfg;
    atomic_store(&sb.cancel, 0);
    pthread_mutex_lock(&st_mu);
    sb.running = 1;
    sb.url = 0;
    pthread_mutex_unlock(&st_mu);
    int rc = hf_thread_start(&sb.th, "hf-standby", loop_main, NULL);
    if (rc) {
        pthread_mutex_lock(&st_mu);
        sb.running = 0;
        pthread_mutex_unlock(&st_mu);
    }
    return rc;
}

void standby_stop(void)
{
    if (!sb.th) return;
    atomic_store(&sb.cancel, 1);
    hf_thread_stop_join(sb.th);
    sb.th = NULL;
    pthread_mutex_lock(&st_mu);
    sb.running = 0;
    pthread_mutex_unlock(&st_mu);
}

int standby_request_promote(const char *by, int64_t wait_ms, int64_t *term)
{
    int rc = 0;
    pthread_mutex_lock(&st_mu);
    if (!sb.running || sb.promote > 0) { pthread_mutex_unlock(&st_mu); return HF_ESTATE; }
    sb.promote = 1;
    snprintf(sb.promote_by, sizeof sb.promote_by, "%s", by ? by : "admin");
    atomic_store(&sb.cancel, 1);   /* cut the long-poll short */
    hf_thread_kick(sb.th);
    int64_t until = hf_mono_ms() + wait_ms;
    while (sb.promote == 1 && hf_mono_ms() < until) {
        pthread_mutex_unlock(&st_mu);
        usleep(20 * 1000);
        pthread_mutex_lock(&st_mu);
    }
    if (sb.promote == 2) *term = sb.new_term;
    else rc = sb.promote == 1 ? HF_ETIMEOUT : HF_EDB;
    if (sb.promote < 0) sb.promote = 0;
    pthread_mutex_unlock(&st_mu);
    return rc;
}

json_t *standby_peers_json(void)
{
    pthread_mutex_lock(&st_mu);
    int run = sb.running, url = sb.url;
    pthread_mutex_unlock(&st_mu);
    if (!run) return NULL;
    json_t *a = json_array();
    for (int i = 0; a && i < sb.cfg.nurls; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:b}", "kind", "primary", "url", sb.cfg.urls[i], "following",
                                           i == url));
    return a;
}

int standby_figures(int64_t *applied_lsn, int64_t *lag_ms, int64_t *bootstraps, int64_t *votes)
{
    pthread_mutex_lock(&st_mu);
    int run = sb.running;
    *applied_lsn = sb.applied_lsn;
    *lag_ms = sb.last_answer_ms ? hf_mono_ms() - sb.last_answer_ms : 0;
    *bootstraps = sb.bootstraps;
    pthread_mutex_unlock(&st_mu);
    *votes = failover_votes_recent(sb.cfg.failover_after_s);
    return run ? 0 : HF_ESTATE;
}

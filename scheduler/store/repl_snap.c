/*
 * repl_snap.c — a standby's bootstrap snapshot (GET
 * /api/v1/replication/snapshot; docs/protocol.md "Replication") and the
 * thread that takes it.
 *
 * Capture is switched on first (repl_capture_enable returns once every
 * transaction that began without a session has ended), then SQLite's
 * online backup copies the database from one read transaction of its own
 * connection into a temp file beside it: the copy holds exactly the
 * transactions up to its repl_state.lsn, and every later one is in the
 * ring. The file is unlinked as soon as it is open, so it disappears with
 * the descriptor whatever happens to the request. Readers never block the
 * writer (WAL), so the heartbeats go on meanwhile.
 *
 * The copy and its SHA-256 take seconds to minutes on a large database,
 * so they never run on an HTTP thread (libmicrohttpd binds a connection
 * to one pool thread: a handler that copied for a minute would stall
 * every agent on that thread). The service runs them on its own thread
 * "hf-snapshot", started by the first request: the handler submits a job,
 * suspends its connection and arms the job; the thread copies, hashes and
 * calls the job's done, which resumes the connection, and the handler,
 * called again, answers with the file. One copy at a time: the slot (sn.job)
 * is taken at submit and freed when the copy ends, a second submit
 * meanwhile is refused with an estimate of when to retry (503
 * Retry-After at the API). A running copy checks between slices of 4 MiB
 * (backup steps of 1024 pages, hash chunks of 1 MiB) whether to stop:
 * the service stops, the caller let go, or its client hung up (the
 * socket, polled every REPL_SNAP_POLL_MS).
 *
 * Lock: sn.mu guards the slot, the thread handle and the timings; it is a
 * leaf (done is called without it). A job has two owners, the service
 * (until done has returned) and the caller (until repl_snap_release):
 * refs counts them.
 */
#include "scheduler/store/repl.h"
#include "scheduler/store/repl_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_sha256.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HASH_CHUNK     (1 << 20)
#define RETRY_MAX_S    60

/* RET 0 to go on, or the HF_E* code the copy ends with. */
typedef int snap_stop_fn(void *arg);

/* Copy db_path into the new file dst from one read transaction. RET 0 or HF_E*. */
static int copy_db(const char *db_path, const char *dst, snap_stop_fn *stop, void *stop_arg, int64_t *lsn, char *err,
                   size_t errlen)
{
    sqlite3 *src = NULL, *out = NULL;
    sqlite3_backup *b = NULL;
    sqlite3_stmt *q = NULL;
    int rc = HF_EDB, src_rc, stopped = 0;
    if (sqlite3_open_v2(db_path, &src, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        sqlite3_open_v2(dst, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "snapshot: cannot open %s: %s", src && out ? dst : db_path,
                 sqlite3_errmsg(src && out ? out : src));
        goto end;
    }
    sqlite3_busy_timeout(src, 5000);
    /* The read transaction begins under repl_mu: a commit visible to it is
     * in the ring too, else the standby's first stream request (after =
     * this snapshot's LSN) would find the primary "behind" and 409. */
    if (repl_read_begin(src, "BEGIN; SELECT count(*) FROM sqlite_schema") != SQLITE_OK ||
        !(b = sqlite3_backup_init(out, "main", src, "main"))) {
        snprintf(err, errlen, "snapshot of %s: %s", db_path, sqlite3_errmsg(b ? src : out));
        goto end;
    }
    while ((src_rc = sqlite3_backup_step(b, 1024)) == SQLITE_OK || src_rc == SQLITE_BUSY || src_rc == SQLITE_LOCKED)
        if (stop && (stopped = stop(stop_arg))) break;
    src_rc = sqlite3_backup_finish(b);
    if (stopped) {
        snprintf(err, errlen, "snapshot of %s: %s", db_path, stopped == HF_ESTATE ? "stopping" : "the client left");
        rc = stopped;
        goto end;
    }
    if (src_rc != SQLITE_OK) {
        snprintf(err, errlen, "snapshot of %s: %s", db_path, sqlite3_errstr(src_rc));
        rc = src_rc == SQLITE_FULL ? HF_ENOSPC : HF_EDB;
        goto end;
    }
    /* One self-contained file (no -wal beside it), and the LSN it holds. */
    if (sqlite3_exec(out, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(out, "SELECT lsn FROM repl_state WHERE id = 1", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW) {
        snprintf(err, errlen, "snapshot %s: %s", dst, sqlite3_errmsg(out));
        goto end;
    }
    *lsn = sqlite3_column_int64(q, 0);
    rc = 0;
end:
    sqlite3_finalize(q);
    if (src) sqlite3_exec(src, "COMMIT", NULL, NULL, NULL);
    sqlite3_close_v2(src);
    sqlite3_close_v2(out);
    return rc;
}

/* SHA-256 of fd from its start, checking stop between chunks; fd is left
 * at offset 0. RET 0, stop's code, or HF_E*. */
static int hash_file(int fd, snap_stop_fn *stop, void *stop_arg, char sha[65], int64_t *size)
{
    hf_sha256_ctx *h = NULL;
    char *buf = malloc(HASH_CHUNK);
    int rc = buf ? hf_sha256_begin(&h) : HF_ENOMEM;
    *size = 0;
    while (rc == 0) {
        ssize_t r = read(fd, buf, HASH_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = hf_err_from_errno(errno);
        if (r <= 0) break;
        hf_sha256_update(h, buf, (size_t)r);
        *size += r;
        if (stop) rc = stop(stop_arg);
    }
    hf_sha256_end(h, sha);
    free(buf);
    if (rc == 0 && lseek(fd, 0, SEEK_SET) != 0) rc = HF_EIO;
    return rc;
}

/* repl_snapshot, stopping when stop says so. */
static int snapshot_run(const char *db_path, snap_stop_fn *stop, void *stop_arg, int *fd, int64_t *size, int64_t *lsn,
                        char sha[65], char *err, size_t errlen)
{
    char tmp[4096];
    *fd = -1;
    if (snprintf(tmp, sizeof tmp, "%s.snap-XXXXXX", db_path) >= (int)sizeof tmp) return HF_EINVAL;
    int t = mkstemp(tmp);
    if (t < 0) {
        snprintf(err, errlen, "snapshot: cannot create a temp file beside %s", db_path);
        return hf_err_from_errno(errno);
    }
    close(t);
    repl_capture_enable();
    int rc = copy_db(db_path, tmp, stop, stop_arg, lsn, err, errlen);
    int f = rc ? -1 : open(tmp, O_RDONLY | O_CLOEXEC);
    unlink(tmp);
    char j[4200];
    snprintf(j, sizeof j, "%s-journal", tmp);
    unlink(j);
    if (rc) return rc;
    if (f < 0) { snprintf(err, errlen, "snapshot: cannot reopen %s", tmp); return HF_EIO; }
    if ((rc = hash_file(f, stop, stop_arg, sha, size))) {
        if (rc == HF_ESTATE || rc == HF_ECONN) snprintf(err, errlen, "snapshot of %s: %s", db_path,
                                                        rc == HF_ESTATE ? "stopping" : "the client left");
        else snprintf(err, errlen, "snapshot: cannot hash %s: %s", tmp, hf_strerror(rc));
        close(f);
        return rc;
    }
    *fd = f;
    return 0;
}

int repl_snapshot(const char *db_path, int *fd, int64_t *size, int64_t *lsn, char sha[65], char *err, size_t errlen)
{
    return snapshot_run(db_path, NULL, NULL, fd, size, lsn, sha, err, errlen);
}

/* ---------- the service: thread "hf-snapshot" ---------- */

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct repl_snap_job {
    char               db_path[4096];
    char               who[64];       /* the client, for the log */
    int                client_fd;     /* polled for a hang-up; -1: none */
    repl_snap_done_fn *done;
    void              *arg;
    int                state;         /* JOB_* (sn.mu) */
    int                armed;         /* (sn.mu) */
    atomic_int         cancel;        /* the caller let go */
    atomic_int         refs;          /* the service's and the caller's */
    int64_t            next_poll;     /* hf_mono_ms of the next hang-up check (the thread's) */
    /* the result, written before done is called */
    int                rc, fd;
    int64_t            size, lsn;
    char               sha[65];
    char               err[512];
};

static struct {
    pthread_mutex_t mu;
    hf_thread      *th;          /* "hf-snapshot": from the first submit to repl_snap_stop */
    repl_snap_job  *job;         /* the one copy queued or running, or NULL */
    atomic_int      open;        /* repl_snap_start .. repl_snap_stop: submits are taken */
    int64_t         started_ms;  /* when the running copy began (hf_mono_ms) */
    int64_t         last_ms;     /* how long the last whole copy took (0: none yet) */
} sn = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void job_unref(repl_snap_job *j)
{
    if (atomic_fetch_sub(&j->refs, 1) != 1) return;
    if (j->fd >= 0) close(j->fd);
    free(j);
}

/* Tell the caller (done, without sn.mu) and drop the service's reference. */
static void deliver(repl_snap_job *j)
{
    j->done(j->arg);
    job_unref(j);
}

/* Has the peer of fd closed its end (or the socket failed)? */
static int client_gone(int fd)
{
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* The running job's stop check (snap_stop_fn). */
static int job_stop(void *arg)
{
    repl_snap_job *j = arg;
    if (!atomic_load(&sn.open)) return HF_ESTATE;
    if (atomic_load(&j->cancel)) return HF_ECONN;
    int64_t now = hf_mono_ms();
    if (now < j->next_poll) return 0;
    j->next_poll = now + REPL_SNAP_POLL_MS;
    return client_gone(j->client_fd) ? HF_ECONN : 0;
}

static void run_job(repl_snap_job *j)
{
    int64_t t0 = hf_mono_ms();
    hf_info("replication: snapshot for %s: copying the database", j->who);
    j->rc = snapshot_run(j->db_path, job_stop, j, &j->fd, &j->size, &j->lsn, j->sha, j->err, sizeof j->err);
    int64_t ms = hf_mono_ms() - t0;
    pthread_mutex_lock(&sn.mu);
    if (sn.job == j) sn.job = NULL;   /* the slot is free: the next copy may start */
    j->state = JOB_DONE;
    if (j->rc == 0) sn.last_ms = ms;
    pthread_mutex_unlock(&sn.mu);
    if (j->rc == 0)
        hf_info("replication: snapshot for %s: %lld bytes at lsn %lld copied and hashed in %lld ms", j->who,
                (long long)j->size, (long long)j->lsn, (long long)ms);
    else
        hf_warn("replication: snapshot for %s failed after %lld ms: %s", j->who, (long long)ms, j->err);
    deliver(j);
}

static void snap_main(hf_thread *t, void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&sn.mu);
        repl_snap_job *j = sn.job && sn.job->armed && sn.job->state == JOB_QUEUED ? sn.job : NULL;
        if (j) {
            j->state = JOB_RUNNING;
            sn.started_ms = hf_mono_ms();
        }
        pthread_mutex_unlock(&sn.mu);
        if (j) run_job(j);
        else if (hf_thread_wait(t, 3600 * 1000)) break;   /* kicked by repl_snap_arm */
    }
}

void repl_snap_start(void)
{
    atomic_store(&sn.open, 1);
}

void repl_snap_stop(void)
{
    pthread_mutex_lock(&sn.mu);
    atomic_store(&sn.open, 0);   /* a running copy stops at its next slice */
    hf_thread *t = sn.th;
    sn.th = NULL;
    pthread_mutex_unlock(&sn.mu);
    hf_thread_stop_join(t);      /* it delivers the job it ran */
    /* An armed job the thread never took: answer "stopping". One not yet
     * armed is answered by repl_snap_arm. */
    pthread_mutex_lock(&sn.mu);
    repl_snap_job *j = sn.job && sn.job->armed && sn.job->state == JOB_QUEUED ? sn.job : NULL;
    if (j) {
        sn.job = NULL;
        j->state = JOB_DONE;
        j->rc = HF_ESTATE;
        snprintf(j->err, sizeof j->err, "stopping");
    }
    pthread_mutex_unlock(&sn.mu);
    if (j) deliver(j);
}

/* Seconds until the copy in the slot should have ended: the last copy's
 * duration less what this one has run, in [1, RETRY_MAX_S]. sn.mu held. */
static int retry_after_locked(void)
{
    int64_t ran = sn.job && sn.job->state == JOB_RUNNING ? hf_mono_ms() - sn.started_ms : 0;
    int64_t s = sn.last_ms > ran ? (sn.last_ms - ran + 999) / 1000 : 1;
    return s < 1 ? 1 : s > RETRY_MAX_S ? RETRY_MAX_S : (int)s;
}

int repl_snap_submit(const char *db_path, const char *who, int client_fd, repl_snap_done_fn *done, void *arg,
                     repl_snap_job **out, int *retry_s)
{
    *out = NULL;
    *retry_s = 0;
    repl_snap_job *j = calloc(1, sizeof *j);
    if (!j) return HF_ENOMEM;
    if (snprintf(j->db_path, sizeof j->db_path, "%s", db_path) >= (int)sizeof j->db_path) {
        free(j);
        return HF_EINVAL;
    }
    snprintf(j->who, sizeof j->who, "%s", who && *who ? who : "?");
    j->client_fd = client_fd;
    j->done = done;
    j->arg = arg;
    j->fd = -1;
    atomic_init(&j->cancel, 0);
    atomic_init(&j->refs, 2);
    int rc = 0;
    pthread_mutex_lock(&sn.mu);
    if (!atomic_load(&sn.open)) {
        rc = HF_ESTATE;
    } else if (sn.job) {
        *retry_s = retry_after_locked();
        hf_info("replication: snapshot for %s refused: the copy for %s is not finished (retry in %d s)", j->who,
                sn.job->who, *retry_s);
        rc = HF_ETOOBIG;
    } else if (!sn.th) {
        rc = hf_thread_start(&sn.th, "hf-snapshot", snap_main, NULL);
    }
    if (rc == 0) sn.job = j;
    pthread_mutex_unlock(&sn.mu);
    if (rc) {
        free(j);
        return rc;
    }
    *out = j;
    return 0;
}

void repl_snap_arm(repl_snap_job *j)
{
    pthread_mutex_lock(&sn.mu);
    if (!atomic_load(&sn.open) || !sn.th) {   /* stopping: answer at once */
        if (sn.job == j) sn.job = NULL;
        j->state = JOB_DONE;
        j->rc = HF_ESTATE;
        snprintf(j->err, sizeof j->err, "stopping");
        pthread_mutex_unlock(&sn.mu);
        deliver(j);
        return;
    }
    j->armed = 1;
    hf_thread_kick(sn.th);
    pthread_mutex_unlock(&sn.mu);
}

int repl_snap_result(repl_snap_job *j, int *fd, int64_t *size, int64_t *lsn, char sha[65], char *err, size_t errlen)
{
    *fd = -1;
    if (j->rc) {
        snprintf(err, errlen, "%s", j->err);
        return j->rc;
    }
    *fd = j->fd;
    j->fd = -1;
    *size = j->size;
    *lsn = j->lsn;
    memcpy(sha, j->sha, 65);
    return 0;
}

void repl_snap_release(repl_snap_job *j)
{
    if (!j) return;
    atomic_store(&j->cancel, 1);
    if (!j->armed) {   /* never handed over (armed is the caller's own write): the service lets go too */
        pthread_mutex_lock(&sn.mu);
        int queued = j->state == JOB_QUEUED;
        if (queued && sn.job == j) sn.job = NULL;
        if (queued) j->state = JOB_DONE;
        pthread_mutex_unlock(&sn.mu);
        if (queued) job_unref(j);
    }
    job_unref(j);
}

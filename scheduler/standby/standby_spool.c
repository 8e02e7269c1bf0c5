/*
 * standby_spool.c — the standby's spool: the stream's answers made
 * durable before they are applied (docs/scheduler.md, "Standby and
 * failover", "The spool").
 *
 * A synchronous primary waits for the standby's acknowledgement, and the
 * standby used to acknowledge an answer only once it was applied: its
 * rows replayed into the replica and committed. Replaying costs about
 * what the primary's own transaction cost, so every acknowledged write
 * waited roughly twice. Now the receiving thread appends each checked
 * answer to DB.spool and fdatasyncs it, and that is what the next
 * request's after= acknowledges (PostgreSQL's synchronous standby
 * likewise confirms a flush of the WAL it received, not its replay); the
 * applying thread replays the spool into the replica behind it. A
 * promotion applies the whole spool first.
 *
 * The file: records appended one after another, each
 *   u32 magic "HFSP", u32 len, u64 FNV-1a 64 of the body, body (len bytes)
 * (big-endian), the body being one stream answer (frames, consecutive
 * LSNs, checked before it was spooled). A crash may leave a torn or
 * unsynced last record: opening stops at the first record that is short
 * or fails its hash and truncates the file there (such a record was
 * never acknowledged: its fdatasync had not returned). Frames at or below
 * the replica's LSN were applied before the crash and are skipped. The
 * file is emptied when everything in it is applied and it is over
 * SPOOL_TRUNC_BYTES; it is removed with the replica (bootstrap, aside).
 *
 * Threads: one appender (the stream loop), one taker (the apply thread);
 * sp->mu guards the offsets. The append writes outside the lock (a flag
 * keeps the taker from emptying the file under it) and publishes the new
 * end once fdatasync returned, so the taker reads only durable bytes.
 */
#include "scheduler/standby/standby.h"

#include "hf_be.h"
#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SPOOL_MAGIC       0x48465350u            /* "HFSP" */
#define SPOOL_REC_HDR     16
#define SPOOL_TRUNC_BYTES ((off_t)16 << 20)      /* empty the file once applied past this */
#define SPOOL_REC_MAX     ((size_t)STANDBY_FRAME_MAX + (16u << 20))

struct standby_spool {
    pthread_mutex_t mu;
    pthread_cond_t  cv;             /* a record was published, or the spool closes */
    int             fd;
    off_t           end;            /* durable bytes */
    off_t           taken;          /* start of the first record not yet applied */
    int64_t         last;           /* LSN of the last frame spooled (or applied) */
    int             appending;      /* bytes past end are being written */
    int             closing;
};

static uint64_t fnv1a64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int read_at(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? hf_err_from_errno(errno) : HF_EPARSE;
        got += (size_t)r;
    }
    return 0;
}

/* The record at off: RET 1 with *len and the body in *body (malloc'd,
 * unless body is NULL: then only the hash is checked), 0 when off is the
 * end or the record is torn or corrupt (the valid prefix ends), HF_E* on
 * a read error. */
static int read_record(int fd, off_t off, off_t size, uint32_t *len, uint8_t **body)
{
    uint8_t h[SPOOL_REC_HDR];
    if (body) *body = NULL;
    if (size - off < SPOOL_REC_HDR) return 0;
    int rc = read_at(fd, h, sizeof h, off);
    if (rc) return rc;
    uint32_t n = (uint32_t)hf_be_get(h + 4, 4);
    if (hf_be_get(h, 4) != SPOOL_MAGIC || n == 0 || n > SPOOL_REC_MAX || size - off - SPOOL_REC_HDR < (off_t)n) return 0;
    uint8_t *b = malloc(n);
    if (!b) return HF_ENOMEM;
    if ((rc = read_at(fd, b, n, off + SPOOL_REC_HDR))) { free(b); return rc; }
    if (fnv1a64(b, n) != hf_be_get(h + 8, 8)) { free(b); return 0; }
    *len = n;
    if (body) *body = b;
    else free(b);
    return 1;
}

void standby_spool_path(const char *db, char *out, size_t outlen) { snprintf(out, outlen, "%s.spool", db); }

int standby_spool_remove(const char *db)
{
    char p[4096];
    standby_spool_path(db, p, sizeof p);
    if (unlink(p) == 0) return hf_file_fsync_parent(p);
    return errno == ENOENT ? 0 : hf_err_from_errno(errno);
}

int standby_spool_open(const char *db, int64_t applied, int64_t term, standby_spool **out, char *err, size_t errlen)
{
    char p[4096];
    *out = NULL;
    standby_spool_path(db, p, sizeof p);
    struct stat st;
    int existed = stat(p, &st) == 0;
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", p, strerror(errno));
        return hf_err_from_errno(errno);
    }
    int rc = 0;
    if (!existed && (rc = hf_file_fsync_parent(p))) {
        snprintf(err, errlen, "cannot fsync the directory of %s: %s", p, hf_strerror(rc));
        close(fd);
        return rc;
    }
    off_t size = lseek(fd, 0, SEEK_END), off = 0, taken = -1;
    int64_t last = applied;
    /* The valid prefix: whole records with their hash, frames consecutive
     * from the replica's LSN on in its term (earlier ones were applied). */
    for (;;) {
        uint32_t n = 0;
        uint8_t *b = NULL;
        int r = read_record(fd, off, size, &n, &b);
        if (r < 0) {
            snprintf(err, errlen, "reading %s: %s", p, hf_strerror(r));
            close(fd);
            return r;
        }
        if (r == 0) break;
        size_t fo = 0;
        standby_frame f;
        int ok = 1, fr;
        int64_t first = -1;
        while ((fr = standby_frame_next(b, n, &fo, &f)) == 1) {
            if (first < 0) first = f.lsn;
            if (f.lsn <= applied) continue;
            if (f.lsn != last + 1 || f.term != term) { ok = 0; break; }
            last = f.lsn;
        }
        free(b);
        if (!ok || fr < 0) {
            hf_warn("standby: %s: the record at byte %lld does not follow lsn %lld: dropping the rest (%lld bytes)",
                    p, (long long)off, (long long)last, (long long)(size - off));
            break;
        }
        /* a record wholly at or below the replica's LSN was applied */
        if (taken < 0 && last > applied) taken = off;
        off += SPOOL_REC_HDR + (off_t)n;
    }
    if (off < size) {
        if (ftruncate(fd, off) || fdatasync(fd)) {
            rc = hf_err_from_errno(errno);
            snprintf(err, errlen, "cannot truncate %s: %s", p, strerror(errno));
            close(fd);
            return rc;
        }
        hf_info("standby: %s: a torn or foreign tail of %lld bytes dropped", p, (long long)(size - off));
    }
    standby_spool *sp = calloc(1, sizeof *sp);
    if (!sp) { close(fd); return HF_ENOMEM; }
    pthread_mutex_init(&sp->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&sp->cv, &a);
    pthread_condattr_destroy(&a);
    sp->fd = fd;
    sp->end = off;
    sp->taken = taken < 0 ? off : taken;
    sp->last = last;
    if (last > applied)
        hf_info("standby: %s holds lsn %lld..%lld received but not applied: applying them first", p,
                (long long)applied + 1, (long long)last);
    *out = sp;
    return 0;
}

int64_t standby_spool_last(standby_spool *sp)
{
    pthread_mutex_lock(&sp->mu);
    int64_t l = sp->last;
    pthread_mutex_unlock(&sp->mu);
    return l;
}

int standby_spool_append(standby_spool *sp, const uint8_t *buf, size_t n, int64_t last_lsn)
{
    if (n == 0 || n > SPOOL_REC_MAX) return HF_EINVAL;
    uint8_t h[SPOOL_REC_HDR];
    hf_be_put(h, SPOOL_MAGIC, 4);
    hf_be_put(h + 4, n, 4);
    hf_be_put(h + 8, fnv1a64(buf, n), 8);
    pthread_mutex_lock(&sp->mu);
    off_t at = sp->end;
    sp->appending = 1;
    pthread_mutex_unlock(&sp->mu);
    int rc = 0;
    size_t done = 0, want = sizeof h + n;
    while (done < want) {
        struct iovec v[2];
        int nv = 0;
        if (done < sizeof h) v[nv++] = (struct iovec){h + done, sizeof h - done};
        size_t bo = done > sizeof h ? done - sizeof h : 0;
        v[nv++] = (struct iovec){(void *)(buf + bo), n - bo};
        ssize_t w = pwritev(sp->fd, v, nv, at + (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { rc = w < 0 ? hf_err_from_errno(errno) : HF_ENOSPC; break; }
        done += (size_t)w;
    }
    if (!rc && fdatasync(sp->fd)) rc = hf_err_from_errno(errno);
    pthread_mutex_lock(&sp->mu);
    sp->appending = 0;
    if (!rc) {
        sp->end = at + SPOOL_REC_HDR + (off_t)n;
        sp->last = last_lsn;
        pthread_cond_broadcast(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    /* A failed append leaves bytes past end that the next one overwrites
     * (and that opening drops: the hash or the length does not fit). */
    return rc;
}

int standby_spool_take(standby_spool *sp, int wait_ms, size_t max, uint8_t **buf, size_t *len, int64_t *mark)
{
    *buf = NULL;
    *len = 0;
    pthread_mutex_lock(&sp->mu);
    if (sp->taken >= sp->end && wait_ms > 0 && !sp->closing) {
        struct timespec ts = hf_deadline(CLOCK_MONOTONIC, wait_ms);   /* sp->cv is on the monotonic clock */
        pthread_cond_timedwait(&sp->cv, &sp->mu, &ts);
    }
    off_t from = sp->taken, end = sp->end;
    pthread_mutex_unlock(&sp->mu);
    *mark = from;
    if (from >= end) return 0;
    /* whole records from `from`, at least one, up to max bytes of bodies;
     * only the taker moves `taken` and empties the file, so [from, end)
     * stays as it is while it reads */
    uint8_t *out = NULL;
    size_t total = 0;
    off_t off = from;
    int rc = 0;
    while (off < end) {
        uint32_t n = 0;
        uint8_t *b = NULL;
        int r = read_record(sp->fd, off, end, &n, &b);
        if (r <= 0) { rc = r < 0 ? r : HF_ECORRUPT; break; }   /* synced bytes that fail their hash: the disk lies */
        if (total && total + n > max) { free(b); break; }
        uint8_t *g = realloc(out, total + n);
        if (!g) { free(b); rc = HF_ENOMEM; break; }
        out = g;
        memcpy(out + total, b, n);
        free(b);
        total += n;
        off += SPOOL_REC_HDR + (off_t)n;
    }
    if (rc && !total) { free(out); return rc; }
    *buf = out;
    *len = total;
    *mark = off;
    return 0;
}

void standby_spool_applied(standby_spool *sp, int64_t mark)
{
    pthread_mutex_lock(&sp->mu);
    if ((off_t)mark > sp->taken && (off_t)mark <= sp->end) sp->taken = (off_t)mark;
    if (sp->taken >= sp->end && !sp->appending && sp->end >= SPOOL_TRUNC_BYTES) {
        /* Emptied: a crash after this finds no record (or, if the
         * truncation did not reach the disk, old records at or below the
         * replica's LSN, which are skipped). */
        if (ftruncate(sp->fd, 0) == 0) sp->end = sp->taken = 0;
        else hf_warn("standby: cannot empty the spool: %s", strerror(errno));
    }
    pthread_mutex_unlock(&sp->mu);
}

int standby_spool_pending(standby_spool *sp)
{
    pthread_mutex_lock(&sp->mu);
    int p = sp->taken < sp->end;
    pthread_mutex_unlock(&sp->mu);
    return p;
}

void standby_spool_wake(standby_spool *sp)
{
    pthread_mutex_lock(&sp->mu);
    sp->closing = 1;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
}

void standby_spool_close(standby_spool *sp)
{
    if (!sp) return;
    close(sp->fd);
    pthread_cond_destroy(&sp->cv);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

/*
 * ckstore.c — the content-addressed checkpoint store (see ckstore.h).
 *
 * An upload goes: ckstore_upload_begin creates tmp/up-XXXXXX (O_EXCL, by
 * mkstemp) and a SHA-256 context (GnuTLS); each body chunk is fed to the
 * hash and written to the file; ckstore_upload_commit compares size and
 * hash with the declared ones, fsyncs the file, and under the store's
 * lock either drops it (the object exists: dedup) or renames it to
 * objects/ab/<hash> and fsyncs that directory (and objects/ when objects/ab
 * was created for it): an acknowledged object survives a power cut. Any failure unlinks the
 * temp file at once, so a refused or failed upload leaves nothing.
 *
 * Write-behind: libmicrohttpd hands the body over in pieces of at most its
 * connection buffer (32 KiB), on the connection's thread. Receiving,
 * hashing and writing them one after the other on that thread made the
 * upload CPU-bound there (390 ms of CPU for a 256 MiB upload of 439 ms;
 * half of it the page-cache copy of write(2)). So an upload of at least
 * UP_BUF bytes gets a writer thread: the connection's thread hashes each
 * piece and copies it into one of UP_NBUF page-aligned buffers of UP_BUF
 * bytes; the writer writes full buffers in order, with O_DIRECT (whole
 * aligned pages, straight to the disk: no page-cache copy, whose speed on
 * the 2-core VM swung between 0.4 and 3 GB/s from one minute to the next,
 * and no checkpoint crowding the scheduler's page cache), the last partial
 * buffer buffered. Where the filesystem refuses O_DIRECT, buffered writes
 * whose writeback starts at once (sync_file_range). Either way the final
 * fsync finds little left to do. At most UP_MAX_PIPES uploads
 * have a writer at a time (UP_NBUF x UP_BUF = 3 MiB each, 24 MiB at most);
 * the others write on the connection's thread as before. Memory stays
 * bounded either way: a full ring blocks the connection's thread, and so
 * the sender, through TCP.
 *
 * The lock (ck->mu) guards the object counters, the rename step and the
 * store's SQLite connection; hashing and writing run outside it.
 */
#include "scheduler/store/ckstore.h"
#include "scheduler/store/repl.h"
#include "scheduler/store/store.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_sha256.h"
#include "hf_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define UP_BUF       (1u << 20)   /* one write of the writer thread */
#define UP_NBUF      3
#define UP_MAX_PIPES 8

/* The write-behind ring of one upload (see the header comment). Buffers
 * [head, head + n) (mod UP_NBUF) are full and queued in order; the
 * connection's thread fills buffer cur = (head + n) % UP_NBUF, which the
 * writer never touches (head + n stays the same while the writer retires
 * buffers), and keeps cur itself, so it reads head and n only under mu. */
typedef struct up_pipe {
    hf_thread      *th;            /* "hf-ckwrite": ends by itself once done */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    unsigned char  *buf[UP_NBUF];
    size_t          len[UP_NBUF];
    int             head, n;       /* under mu */
    int             done;          /* under mu: no more buffers (or stop) */
    int             stop;          /* under mu: abandon what is queued */
    int             err;           /* under mu: the writer's first error */
    int             cur;           /* the buffer being filled: (head + n) % UP_NBUF */
    size_t          fill;          /* bytes in it */
    int             fd;
    int             direct;        /* writer: fd has O_DIRECT */
    off_t           off;           /* writer: bytes written so far */
} up_pipe;

static atomic_int pipes_in_use;

struct ckstore {
    char           *dir;
    int64_t         max_bytes;
    pthread_mutex_t mu;
    int64_t         objects, bytes;   /* under mu */
    sqlite3        *db;               /* under mu; NULL: files only */
    repl_conn      *repl;             /* db's writes, each its own captured transaction (repl.h) */
    int             shared;           /* shared_fs: agents write objects/ too */
};

struct ckstore_upload {
    ckstore          *ck;
    char              tmp[PATH_MAX];
    int               fd;             /* -1 once closed */
    gnutls_hash_hd_t  h;
    int               h_live;
    char              want[CKSTORE_HASH_LEN + 1];
    int64_t           declared, written;
    int               err;            /* first error; the temp file is gone */
    up_pipe          *pipe;           /* write-behind, or NULL */
};

/* ---------- files ---------- */

int ckstore_hash_valid(const char *s) { return hf_sha256_hex_valid(s); }

int ckstore_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!s || n > 255 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
    return 1;
}

void ckstore_set_shared(ckstore *ck, int shared) { ck->shared = shared; }
int ckstore_shared(const ckstore *ck) { return ck->shared; }

/* dir/objects/ab[/abcdef...] for a valid hash (obj NULL: the folder). */
static void object_path(const ckstore *ck, const char *sha, int with_name, char *out, size_t len)
{
    if (with_name) snprintf(out, len, "%s/objects/%.2s/%s", ck->dir, sha, sha);
    else snprintf(out, len, "%s/objects/%.2s", ck->dir, sha);
}

/* Remove every file in dir/tmp (uploads a crash interrupted). */
static int clean_tmp(const ckstore *ck)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tmp", ck->dir);
    DIR *d = opendir(path);
    if (!d) return hf_err_from_errno(errno);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) n++;
        else hf_warn("checkpoint store: cannot remove %s/%s: %s", path, e->d_name, strerror(errno));
    }
    closedir(d);
    if (n) hf_info("checkpoint store: removed %d interrupted upload%s from %s", n, n == 1 ? "" : "s", path);
    return 0;
}

int ckstore_foreach_object(ckstore *ck, void (*fn)(void *ctx, const char *sha256, const struct stat *sb), void *ctx)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/objects", ck->dir);
    DIR *top = opendir(path);
    if (!top) return hf_err_from_errno(errno);
    struct dirent *p;
    while ((p = readdir(top)) != NULL) {
        if (p->d_name[0] == '.' || strlen(p->d_name) != 2) continue;
        int sfd = openat(dirfd(top), p->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *sub = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!sub) { if (sfd >= 0) close(sfd); continue; }
        struct dirent *o;
        struct stat sb;
        while ((o = readdir(sub)) != NULL)
            if (ckstore_hash_valid(o->d_name) && fstatat(dirfd(sub), o->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(sb.st_mode))
                fn(ctx, o->d_name, &sb);
        closedir(sub);
    }
    closedir(top);
    return 0;
}

static void count_one(void *ctx, const char *sha256, const struct stat *sb)
{
    (void)sha256;
    ((ckstore *)ctx)->objects++;
    ((ckstore *)ctx)->bytes += sb->st_size;
}

/* ---------- open and close ---------- */

static int open_db(ckstore *ck, const char *db_path, char *err, size_t errlen)
{
    int src = sqlite3_open_v2(db_path, &ck->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src == SQLITE_OK) {
        sqlite3_busy_timeout(ck->db, 5000);
        /* FULL whatever --synchronous says: a checkpoint row is durable when acknowledged */
        src = sqlite3_exec(ck->db, "PRAGMA foreign_keys=ON; PRAGMA synchronous=FULL", NULL, NULL, NULL);
    }
    if (src == SQLITE_OK && !(ck->repl = repl_conn_new(ck->db))) src = SQLITE_NOMEM;
    if (src == SQLITE_OK) return 0;
    snprintf(err, errlen, "checkpoint store: cannot open %s: %s", db_path,
             ck->db ? sqlite3_errmsg(ck->db) : sqlite3_errstr(src));
    return HF_EDB;
}

int ckstore_open(const char *dir, const char *db_path, int64_t max_bytes, ckstore **out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    int rc;
    *out = NULL;
    if (!dir || !*dir || strlen(dir) > PATH_MAX - 128 || max_bytes <= 0) {
        snprintf(err, errlen, "checkpoint store: bad directory or size limit");
        return HF_EINVAL;
    }
    ckstore *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir))) { free(ck); return HF_ENOMEM; }
    pthread_mutex_init(&ck->mu, NULL);
    ck->max_bytes = max_bytes;
    const char *subs[] = {"", "/objects", "/tmp"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(path, sizeof path, "%s%s", dir, subs[i]);
        if ((rc = hf_file_mkdir_durable(path))) {
            snprintf(err, errlen, "checkpoint store: cannot create %s: %s", path, strerror(errno));
            goto end;
        }
    }
    if ((rc = clean_tmp(ck))) {
        snprintf(err, errlen, "checkpoint store: cannot read %s/tmp: %s", dir, hf_strerror(rc));
        goto end;
    }
    ckstore_foreach_object(ck, count_one, ck);
    if (db_path && (rc = open_db(ck, db_path, err, errlen))) goto end;
    *out = ck;
    ck = NULL;
end:
    ckstore_close(ck);
    return rc;
}

void ckstore_close(ckstore *ck)
{
    if (!ck) return;
    repl_conn_free(ck->repl);
    if (ck->db) sqlite3_close_v2(ck->db);
    pthread_mutex_destroy(&ck->mu);
    free(ck->dir);
    free(ck);
}

const char *ckstore_dir(const ckstore *ck) { return ck->dir; }

void ckstore_stats(ckstore *ck, int64_t *objects, int64_t *bytes)
{
    pthread_mutex_lock(&ck->mu);
    *objects = ck->objects;
    *bytes = ck->bytes;
    pthread_mutex_unlock(&ck->mu);
}

/* ---------- write-behind ---------- */

static void direct_off(up_pipe *pp)
{
    int fl = fcntl(pp->fd, F_GETFL);
    if (fl >= 0) (void)fcntl(pp->fd, F_SETFL, fl & ~O_DIRECT);
    pp->direct = 0;
}

/* Write n bytes at the writer's offset: with O_DIRECT while the piece is
 * whole aligned pages, buffered from then on (the last, partial buffer; a
 * filesystem that refuses direct I/O of this size: EINVAL). RET 0 or an
 * HF_E* code. */
static int pipe_write(up_pipe *pp, const unsigned char *p, size_t n)
{
    while (n) {
        if (pp->direct && (n % 4096 || (uintptr_t)p % 4096 || pp->off % 4096)) direct_off(pp);
        ssize_t w = write(pp->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EINVAL && pp->direct) {
            direct_off(pp);
            continue;
        }
        if (w <= 0) return w < 0 ? hf_err_from_errno(errno) : HF_EIO;
        p += w;
        n -= (size_t)w;
        pp->off += w;
    }
    return 0;
}

/* A "hf-ckwrite" thread: writes the queued buffers in order until the
 * connection's thread says done (pipe_end), or stop. */
static void pipe_writer(hf_thread *t, void *arg)
{
    (void)t;
    up_pipe *pp = arg;
    pthread_mutex_lock(&pp->mu);
    for (;;) {
        while (!pp->n && !pp->done) pthread_cond_wait(&pp->cv, &pp->mu);
        if (pp->stop || !pp->n) break;
        int i = pp->head, err = pp->err;
        pthread_mutex_unlock(&pp->mu);
        if (!err) {
            off_t at = pp->off;
            err = pipe_write(pp, pp->buf[i], pp->len[i]);
            /* buffered: start this buffer's writeback now; the commit's
             * fsync waits for it (best effort: an error shows there) */
            if (!err && !pp->direct) (void)sync_file_range(pp->fd, at, (off_t)pp->len[i], SYNC_FILE_RANGE_WRITE);
        }
        pthread_mutex_lock(&pp->mu);
        if (err && !pp->err) pp->err = err;
        pp->head = (pp->head + 1) % UP_NBUF;
        pp->n--;
        pthread_cond_broadcast(&pp->cv);
    }
    pthread_mutex_unlock(&pp->mu);
}

static void pipe_free(up_pipe *pp)
{
    for (int i = 0; i < UP_NBUF; i++) free(pp->buf[i]);
    pthread_cond_destroy(&pp->cv);
    pthread_mutex_destroy(&pp->mu);
    free(pp);
    atomic_fetch_sub(&pipes_in_use, 1);
}

/* A writer thread for fd, or NULL (too many at once, or no memory: the
 * caller writes itself). */
static up_pipe *pipe_start(int fd)
{
    if (atomic_fetch_add(&pipes_in_use, 1) >= UP_MAX_PIPES) {
        atomic_fetch_sub(&pipes_in_use, 1);
        return NULL;
    }
    up_pipe *pp = calloc(1, sizeof *pp);
    if (!pp) {
        atomic_fetch_sub(&pipes_in_use, 1);
        return NULL;
    }
    pthread_mutex_init(&pp->mu, NULL);
    pthread_cond_init(&pp->cv, NULL);
    pp->fd = fd;
    int fl = fcntl(fd, F_GETFL);
    pp->direct = fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
    for (int i = 0; i < UP_NBUF; i++)
        if (posix_memalign((void **)&pp->buf[i], 4096, UP_BUF)) {
            pp->buf[i] = NULL;
            pipe_free(pp);
            return NULL;
        }
    if (hf_thread_start(&pp->th, "hf-ckwrite", pipe_writer, pp)) {
        pipe_free(pp);
        return NULL;
    }
    return pp;
}

/* Queue the buffer being filled and wait for a free one. RET the
 * writer's error, 0 if none. */
static int pipe_push(up_pipe *pp)
{
    pthread_mutex_lock(&pp->mu);
    pp->len[pp->cur] = pp->fill;
    pp->n++;
    pthread_cond_broadcast(&pp->cv);
    while (pp->n == UP_NBUF && !pp->err) pthread_cond_wait(&pp->cv, &pp->mu);
    int err = pp->err;
    pthread_mutex_unlock(&pp->mu);
    pp->cur = (pp->cur + 1) % UP_NBUF;
    pp->fill = 0;
    return err;
}

/* Hand n bytes to the writer. RET 0 or the writer's error. */
static int pipe_put(up_pipe *pp, const unsigned char *p, size_t n)
{
    while (n) {
        unsigned char *b = pp->buf[pp->cur];
        size_t k = UP_BUF - pp->fill < n ? UP_BUF - pp->fill : n;
        memcpy(b + pp->fill, p, k);
        pp->fill += k;
        p += k;
        n -= k;
        if (pp->fill == UP_BUF) {
            int err = pipe_push(pp);
            if (err) return err;
        }
    }
    return 0;
}

/* End the writer: after writing what is queued (flush: the partial buffer
 * too), or at once (abandon). Frees pp. RET the writer's error, 0 if
 * none. */
static int pipe_end(up_pipe *pp, int flush)
{
    int err = 0;
    if (flush && pp->fill) err = pipe_push(pp);
    pthread_mutex_lock(&pp->mu);
    pp->done = 1;
    if (!flush || err) pp->stop = 1;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
    hf_thread_join(pp->th);
    if (!err) err = pp->err;
    pipe_free(pp);
    return err;
}

/* ---------- uploads ---------- */

/* Close and remove the temp file; remember rc as the upload's error. */
static int upload_fail(ckstore_upload *up, int rc)
{
    if (up->pipe) {                     /* the writer first: it uses fd */
        pipe_end(up->pipe, 0);
        up->pipe = NULL;
    }
    if (up->fd >= 0) {
        close(up->fd);
        up->fd = -1;
        unlink(up->tmp);
    }
    if (!up->err) up->err = rc;
    return up->err;
}

int ckstore_upload_begin(ckstore *ck, const char *sha256, int64_t size, ckstore_upload **out)
{
    *out = NULL;
    if (!ckstore_hash_valid(sha256) || size < 0) return HF_EINVAL;
    if (size > ck->max_bytes) return HF_ETOOBIG;
    ckstore_upload *up = calloc(1, sizeof *up);
    if (!up) return HF_ENOMEM;
    up->ck = ck;
    up->declared = size;
    memcpy(up->want, sha256, sizeof up->want);
    snprintf(up->tmp, sizeof up->tmp, "%s/tmp/up-XXXXXX", ck->dir);
    up->fd = mkostemp(up->tmp, O_CLOEXEC);
    if (up->fd < 0) {
        int rc = hf_err_from_errno(errno);
        free(up);
        return rc;
    }
    if (gnutls_hash_init(&up->h, GNUTLS_DIG_SHA256) != 0) {
        upload_fail(up, HF_ENOMEM);
        free(up);
        return HF_ENOMEM;
    }
    up->h_live = 1;
    if (size >= UP_BUF) up->pipe = pipe_start(up->fd);
    *out = up;
    return 0;
}

int ckstore_upload_write(ckstore_upload *up, const void *data, size_t n)
{
    if (up->err) return up->err;
    if ((int64_t)n > up->declared - up->written) return upload_fail(up, HF_ETOOBIG);
    gnutls_hash(up->h, data, n);
    int rc = up->pipe ? pipe_put(up->pipe, data, n) : hf_file_write_all(up->fd, data, n);
    if (rc) return upload_fail(up, rc);
    up->written += (int64_t)n;
    return 0;
}

static void upload_free(ckstore_upload *up)
{
    upload_fail(up, HF_EIO);
    if (up->h_live) gnutls_hash_deinit(up->h, NULL);
    free(up);
}

void ckstore_upload_abort(ckstore_upload *up) { if (up) upload_free(up); }

/* Move the verified, fsynced temp file to its object's name, or drop it
 * when that object exists. Under ck->mu. */
static int publish(ckstore_upload *up)
{
    ckstore *ck = up->ck;
    char dir[PATH_MAX], obj[PATH_MAX];
    struct stat sb;
    object_path(ck, up->want, 0, dir, sizeof dir);
    object_path(ck, up->want, 1, obj, sizeof obj);
    if (stat(obj, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == up->declared) {
        upload_fail(up, 0);                 /* dedup: the same bytes are there */
        return 0;
    }
    int rc = hf_file_mkdir_durable(dir);
    if (rc == 0 && rename(up->tmp, obj) != 0) rc = hf_err_from_errno(errno);
    if (rc) return upload_fail(up, rc);
    close(up->fd);
    up->fd = -1;
    if ((rc = hf_file_fsync_dir(dir)) == 0) {
        ck->objects++;
        ck->bytes += up->declared;
    } else {
        unlink(obj);                        /* not durable: not visible either */
    }
    return rc;
}

int ckstore_upload_commit(ckstore_upload *up, ckstore_info *info, char *msg, size_t msglen)
{
    unsigned char dig[32];
    char got[CKSTORE_HASH_LEN + 1];
    int rc = up->err;
    msg[0] = 0;
    if (rc) goto end;
    if (up->pipe) {                     /* everything on disk (page cache) first */
        rc = pipe_end(up->pipe, 1);
        up->pipe = NULL;
        if (rc) {
            rc = upload_fail(up, rc);
            goto end;
        }
    }
    if (up->written != up->declared) {
        snprintf(msg, msglen, "Content-Length: %lld bytes declared, %lld received", (long long)up->declared,
                 (long long)up->written);
        rc = upload_fail(up, HF_ECORRUPT);
        goto end;
    }
    gnutls_hash_deinit(up->h, dig);
    up->h_live = 0;
    hf_sha256_hex(dig, got);
    if (strcmp(got, up->want) != 0) {
        snprintf(msg, msglen, "X-Hyperfarm-Sha256: declared %s, the body's SHA-256 is %s", up->want, got);
        rc = upload_fail(up, HF_ECORRUPT);
        goto end;
    }
    if (fsync(up->fd) != 0) { rc = upload_fail(up, hf_err_from_errno(errno)); goto end; }
    pthread_mutex_lock(&up->ck->mu);
    rc = publish(up);
    pthread_mutex_unlock(&up->ck->mu);
    if (rc == 0) {
        memcpy(info->sha256, up->want, sizeof info->sha256);
        info->size = up->declared;
    }
end:
    if (rc && !msg[0]) snprintf(msg, msglen, "%s", hf_strerror(rc));
    upload_free(up);
    return rc;
}

/* ---------- rows ---------- */

static int object_present(const ckstore *ck, const char *sha)
{
    char obj[PATH_MAX];
    struct stat sb;
    object_path(ck, sha, 1, obj, sizeof obj);
    return stat(obj, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Does a row name sha (a checkpoint, or an experiment's code context)?
 * RET 1, 0, or HF_EDB. Under ck->mu. */
static int object_named(ckstore *ck, const char *sha)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    if (sqlite3_prepare_v2(ck->db, "SELECT EXISTS(SELECT 1 FROM checkpoints WHERE sha256=?1) OR "
                                   "EXISTS(SELECT 1 FROM experiments WHERE json_valid(config) AND "
                                   "json_extract(config,'$.context')=?1)", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, sha, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) rc = sqlite3_column_int(st, 0) != 0;
    }
    if (rc < 0) hf_error("checkpoint store: looking up %s: %s", sha, sqlite3_errmsg(ck->db));
    sqlite3_finalize(st);
    return rc;
}

int ckstore_release(ckstore *ck, const char *sha256, int64_t *removed)
{
    char dir[PATH_MAX], obj[PATH_MAX];
    struct stat sb;
    int rc = 0;
    if (removed) *removed = 0;
    if (!ckstore_hash_valid(sha256)) return HF_EINVAL;
    if (!ck->db) return HF_EUNSUP;
    object_path(ck, sha256, 0, dir, sizeof dir);
    object_path(ck, sha256, 1, obj, sizeof obj);
    pthread_mutex_lock(&ck->mu);
    int named = object_named(ck, sha256);
    if (named < 0) { rc = named; goto end; }
    if (named || lstat(obj, &sb) != 0 || !S_ISREG(sb.st_mode)) goto end;
    if (unlink(obj) != 0) { rc = hf_err_from_errno(errno); goto end; }
    hf_file_fsync_dir(dir);   /* best effort: a resurrected file is an orphan that the next GC removes */
    ck->objects--;
    ck->bytes -= sb.st_size;
    if (removed) *removed = sb.st_size;
end:
    pthread_mutex_unlock(&ck->mu);
    return rc;
}

int ckstore_record(ckstore *ck, int64_t trial_id, ckstore_info *info)
{
    char path[32 + CKSTORE_HASH_LEN];
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    if (!ck->db) return HF_EUNSUP;
    snprintf(path, sizeof path, "objects/%.2s/%s", info->sha256, info->sha256);
    info->time = hf_wall_ms();
    pthread_mutex_lock(&ck->mu);
    if (!object_present(ck, info->sha256)) {   /* collected since its commit */
        rc = HF_ECORRUPT;
        goto end;
    }
    if (sqlite3_prepare_v2(ck->db, "INSERT INTO checkpoints(trial_id,attempt,path,step,time,sha256,size,state,name,agent_id) "
                                   "VALUES(?,?,?,?,?,?,?,'stored',?,?)", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_int64(st, 2, info->attempt);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, info->step);
    sqlite3_bind_int64(st, 5, info->time);
    sqlite3_bind_text(st, 6, info->sha256, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, info->size);
    if (info->name[0]) sqlite3_bind_text(st, 8, info->name, -1, SQLITE_STATIC);
    if (info->agent_id > 0) sqlite3_bind_int64(st, 9, info->agent_id);
    int src = repl_step1(ck->repl, st);
    if (src == SQLITE_DONE) rc = 0;
    else if (src == SQLITE_CONSTRAINT_FOREIGNKEY) rc = HF_ENOTFOUND;
    else if ((src & 0xff) == SQLITE_FULL) rc = HF_ENOSPC;
    if (rc && rc != HF_ENOTFOUND) hf_error("checkpoint store: recording %s: %s", info->sha256, repl_errmsg());
end:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&ck->mu);
    return rc;
}

int ckstore_context_record(ckstore *ck, const char *sha256, int64_t size)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    if (!ck->db) return HF_EUNSUP;
    pthread_mutex_lock(&ck->mu);
    if (sqlite3_prepare_v2(ck->db, "INSERT INTO contexts(sha256,size,time) VALUES(?,?,?)", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, size);
    sqlite3_bind_int64(st, 3, hf_wall_ms());
    int src = repl_step1(ck->repl, st);
    if (src == SQLITE_DONE) rc = 0;
    else if ((src & 0xff) == SQLITE_FULL) rc = HF_ENOSPC;
    if (rc) hf_error("checkpoint store: recording context %s: %s", sha256, repl_errmsg());
end:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&ck->mu);
    return rc;
}

int ckstore_list(ckstore *ck, int64_t trial_id, json_t **out)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    json_t *arr = json_array();
    *out = NULL;
    if (!ck->db) { json_decref(arr); return HF_EUNSUP; }
    if (!arr) return HF_ENOMEM;
    pthread_mutex_lock(&ck->mu);
    int src;
    int64_t scored_step = -1;
    json_t *scored = NULL;
    /* The step of the report that scored the trial's objective (docs/guide.md
     * "The objective"; the rule of ckretain.h): the first report of its
     * value, with aggregate "last" (the default with a list) its last. */
    if (sqlite3_prepare_v2(ck->db, "SELECT m.step FROM metrics m JOIN trials t ON t.id=m.trial_id "
                                   "JOIN experiments x ON x.id=t.experiment_id WHERE m.trial_id=?1 AND "
                                   "m.step IS NOT NULL AND m.value=t.objective AND m.name=COALESCE("
                                   "json_extract(x.config,'$.objective.metric'),json_extract(x.config,'$.objective[0].metric')) "
                                   "ORDER BY CASE WHEN COALESCE(json_extract(x.config,'$.objective.aggregate'),"
                                   "json_extract(x.config,'$.objective[0].aggregate'),CASE WHEN "
                                   "json_type(x.config,'$.objective')='array' THEN 'last' ELSE 'best' END)='last' "
                                   "THEN -m.seq ELSE m.seq END LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    if ((src = sqlite3_step(st)) == SQLITE_ROW) scored_step = sqlite3_column_int64(st, 0);
    else if (src != SQLITE_DONE) goto end;
    sqlite3_finalize(st);
    st = NULL;
    /* The newest 10000, oldest first; each with the metrics of its step
     * (stored once the trial ended, else each metric's last report there). */
    if (sqlite3_prepare_v2(ck->db, "SELECT sha256,size,step,attempt,time,name,agent_id,COALESCE(metrics,"
                                   CKSTORE_STEP_METRICS_SQL("c.trial_id", "c.step") ") "
                                   "FROM (SELECT * FROM checkpoints "
                                   "WHERE trial_id=? AND state='stored' ORDER BY id DESC LIMIT 10000) c ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *mtext = (const char *)sqlite3_column_text(st, 7);
        json_t *m = mtext ? json_loads(mtext, 0, NULL) : NULL;
        json_t *row = json_pack("{sssIsIsIsIss?so?so}", "sha256", (const char *)sqlite3_column_text(st, 0),
                                "size", (json_int_t)sqlite3_column_int64(st, 1),
                                "step", (json_int_t)sqlite3_column_int64(st, 2),
                                "attempt", (json_int_t)sqlite3_column_int64(st, 3),
                                "time", (json_int_t)sqlite3_column_int64(st, 4),
                                "name", (const char *)sqlite3_column_text(st, 5),
                                "agent_id", sqlite3_column_type(st, 6) == SQLITE_NULL ? NULL
                                    : json_integer(sqlite3_column_int64(st, 6)),
                                "metrics", json_is_object(m) ? json_incref(m) : json_object());
        json_decref(m);
        if (!row || json_array_append_new(arr, row)) {
            rc = HF_ENOMEM;
            goto end;
        }
        json_object_set_new(row, "scored", json_false());
        if (scored_step >= 0 && sqlite3_column_type(st, 2) != SQLITE_NULL && sqlite3_column_int64(st, 2) == scored_step)
            scored = row;   /* the newest at that step */
    }
    if (src != SQLITE_DONE) goto end;
    if (scored) json_object_set_new(scored, "scored", json_true());
    *out = json_pack("{soso}", "checkpoints", arr, "scored_step",
                     scored_step >= 0 ? json_integer(scored_step) : json_null());
    arr = NULL;
    rc = *out ? 0 : HF_ENOMEM;
end:
    if (rc == HF_EDB) hf_error("checkpoint store: listing trial %lld: %s", (long long)trial_id, sqlite3_errmsg(ck->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&ck->mu);
    json_decref(arr);
    return rc;
}

/* ---------- downloads ---------- */

int ckstore_open_object(ckstore *ck, const char *sha256, int *fd, int64_t *size)
{
    char obj[PATH_MAX];
    struct stat sb;
    if (!ckstore_hash_valid(sha256)) return HF_EINVAL;
    object_path(ck, sha256, 1, obj, sizeof obj);
    int f = open(obj, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0) return errno == ENOENT ? HF_ENOTFOUND : hf_err_from_errno(errno);
    if (fstat(f, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(f);
        return HF_EIO;
    }
    *fd = f;
    *size = sb.st_size;
    return 0;
}

/* ---------- adopting an object already in place ---------- */

/* Has any row named sha256 yet? (counts an adopted object once) Under mu. */
static int sha_recorded(ckstore *ck, const char *sha256)
{
    sqlite3_stmt *st = NULL;
    int found = 0;
    if (!ck->db || sqlite3_prepare_v2(ck->db, "SELECT 1 FROM checkpoints WHERE sha256=? LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        return 1;
    sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

int ckstore_adopt(ckstore *ck, const char *sha256, int64_t size, ckstore_info *info, char *msg, size_t msglen)
{
    char obj[PATH_MAX], got[CKSTORE_HASH_LEN + 1];
    int fd = -1, rc;
    int64_t have = 0, n = 0;
    msg[0] = 0;
    if ((rc = ckstore_open_object(ck, sha256, &fd, &have))) {
        snprintf(msg, msglen, rc == HF_ENOTFOUND ? "object %s is not in the store" : "object %s: %s", sha256,
                 hf_strerror(rc));
        return rc;
    }
    object_path(ck, sha256, 1, obj, sizeof obj);
    if (have != size) {
        snprintf(msg, msglen, "object %s has %lld bytes, %lld declared", sha256, (long long)have, (long long)size);
        rc = HF_ECORRUPT;
    } else if (ck->shared) {
        if ((rc = hf_sha256_fd(fd, -1, got, &n)) == 0 && (n != size || strcmp(got, sha256) != 0)) {
            snprintf(msg, msglen, "object %s: its bytes' SHA-256 is %s", sha256, got);
            rc = HF_ECORRUPT;
        }
    }
    close(fd);
    if (rc == HF_ECORRUPT && ck->shared) {
        /* an agent's broken write: remove it so a retry can write it again */
        if (unlink(obj) == 0) hf_warn("checkpoint store: removed %s: %s", obj, msg);
    }
    if (rc) {
        if (!msg[0]) snprintf(msg, msglen, "object %s: %s", sha256, hf_strerror(rc));
        return rc;
    }
    memcpy(info->sha256, sha256, CKSTORE_HASH_LEN + 1);
    info->size = size;
    pthread_mutex_lock(&ck->mu);
    if (ck->shared && !sha_recorded(ck, sha256)) {
        ck->objects++;
        ck->bytes += size;
    }
    pthread_mutex_unlock(&ck->mu);
    return 0;
}

/*
 * standby_boot.c — making a standby's database and checkpoint store a
 * copy of the primary's (docs/scheduler.md, "Standby and failover"):
 * the snapshot download, the objects it names, and moving a database that
 * can no longer follow aside (never deleting it).
 *
 * The snapshot (GET /api/v1/replication/snapshot) is streamed into
 * DB.tmp and hashed as it arrives, checked (the whole Content-Length
 * arrived, its SHA-256 is the answer's X-Hyperfarm-Sha256, PRAGMA
 * quick_check, a repl_state row), fsynced, renamed to DB and the
 * directory fsynced, so DB exists only whole and as the primary sent it. Objects come from GET /replication/objects/# by
 * hf_xfer (size and SHA-256 verified, renamed into objects/ab/<hash>
 * only when whole): the same layout ckstore.c reads.
 */
#include "scheduler/standby/standby.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_sha256.h"
#include "hf_xfer.h"
#include "scheduler/store/backup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int standby_move_aside(const char *db, const char *tag, char *aside, size_t asidelen)
{
    char to[PATH_MAX], from[PATH_MAX];
    struct stat sb;
    if (aside && asidelen) aside[0] = 0;
    if (stat(db, &sb) != 0) return 0;
    if (snprintf(to, sizeof to, "%s.%s-%lld", db, tag, (long long)time(NULL)) >= (int)sizeof to) return HF_EINVAL;
    if (rename(db, to) != 0) return hf_err_from_errno(errno);
    static const char *const sfx[] = {"-wal", "-shm"};
    for (int i = 0; i < 2; i++) {
        char t2[PATH_MAX + 8];
        snprintf(from, sizeof from, "%s%s", db, sfx[i]);
        snprintf(t2, sizeof t2, "%s%s", to, sfx[i]);
        if (rename(from, t2) != 0 && errno != ENOENT) return hf_err_from_errno(errno);
    }
    if (aside) snprintf(aside, asidelen, "%s", to);
    hf_warn("moved the database %s aside to %s (kept, never deleted)", db, to);
    return hf_file_fsync_parent(db);
}

int standby_read_state(const char *db, int64_t *term, int64_t *lsn, char *cluster, size_t clusterlen)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    int rc = HF_ENOTFOUND;
    struct stat sb;
    if (stat(db, &sb) != 0) return HF_ENOTFOUND;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) { rc = HF_EDB; goto end; }
    sqlite3_busy_timeout(h, 5000);
    if (sqlite3_prepare_v2(h, "SELECT term, lsn, cluster FROM repl_state WHERE id = 1", -1, &q, NULL) != SQLITE_OK)
        goto end;   /* no table: not a replicated database yet */
    if (sqlite3_step(q) == SQLITE_ROW) {
        *term = sqlite3_column_int64(q, 0);
        *lsn = sqlite3_column_int64(q, 1);
        snprintf(cluster, clusterlen, "%s", (const char *)sqlite3_column_text(q, 2) ?: "");
        rc = 0;
    }
end:
    sqlite3_finalize(q);
    sqlite3_close_v2(h);
    return rc;
}

/* The snapshot download's state: the file it goes to, the hash of what
 * arrived, and the hash the answer's X-Hyperfarm-Sha256 announced. */
typedef struct snap_sink {
    int            fd;
    int64_t        bytes;
    int            rc;
    hf_sha256_ctx *h;
    char           want[HF_SHA256_HEX];   /* "" while the header has not come */
    int            retry_s;               /* the answer's Retry-After (0: none) */
} snap_sink;

static int snap_write(void *ud, const void *p, size_t n)
{
    snap_sink *k = ud;
    if ((k->rc = hf_file_write_all(k->fd, p, n))) return k->rc;
    hf_sha256_update(k->h, p, n);
    k->bytes += (int64_t)n;
    return 0;
}

/* X-Hyperfarm-Sha256 of the final answer (a status line starts over). */
static void snap_header(void *ud, const char *line)
{
    snap_sink *k = ud;
    static const char name[] = "X-Hyperfarm-Sha256:", retry[] = "Retry-After:";
    if (!strncmp(line, "HTTP/", 5)) k->want[0] = 0, k->retry_s = 0;
    if (!strncasecmp(line, retry, sizeof retry - 1)) {   /* seconds; a date is not sent by a primary */
        long v = strtol(line + sizeof retry - 1, NULL, 10);
        k->retry_s = v < 1 ? 0 : v > STANDBY_RETRY_MAX_S ? STANDBY_RETRY_MAX_S : (int)v;
        return;
    }
    if (strncasecmp(line, name, sizeof name - 1)) return;
    const char *v = line + sizeof name - 1;
    v += strspn(v, " \t");
    snprintf(k->want, sizeof k->want, "%.*s", (int)strcspn(v, " \t"), v);
}

/* PRAGMA quick_check and a repl_state row. RET 0 or HF_ECORRUPT. */
static int snap_verify(const char *path, char *err, size_t errlen)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    int rc = HF_ECORRUPT;
    if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(h, "PRAGMA quick_check", -1, &q, NULL) != SQLITE_OK || sqlite3_step(q) != SQLITE_ROW ||
        strcmp((const char *)sqlite3_column_text(q, 0) ?: "", "ok")) {
        snprintf(err, errlen, "the snapshot fails PRAGMA quick_check: %s", h ? sqlite3_errmsg(h) : "cannot open");
        goto end;
    }
    sqlite3_finalize(q);
    q = NULL;
    if (sqlite3_prepare_v2(h, "SELECT lsn FROM repl_state WHERE id = 1", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW) {
        snprintf(err, errlen, "the snapshot has no repl_state row");
        goto end;
    }
    rc = 0;
end:
    sqlite3_finalize(q);
    sqlite3_close_v2(h);
    return rc;
}

/* Remove path-wal and path-shm (left empty by a read-only open). */
static void unlink_sidecars(const char *path)
{
    char p[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

int standby_download_snapshot(hf_http *c, const char *db, int *retry_s, char *err, size_t errlen)
{
    char tmp[PATH_MAX], hex[HF_SHA256_HEX];
    struct stat sb;
    int rc, fd = -1;
    if (stat(db, &sb) == 0) { snprintf(err, errlen, "%s exists", db); return HF_EEXIST; }
    if (snprintf(tmp, sizeof tmp, "%s.tmp", db) >= (int)sizeof tmp) return HF_EINVAL;
    if ((fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        rc = hf_err_from_errno(errno);
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return rc;
    }
    snap_sink k = {.fd = fd};
    if ((rc = hf_sha256_begin(&k.h))) { snprintf(err, errlen, "out of memory"); goto end; }
    hf_http_stream s = {.method = "GET", .path = "/api/v1/replication/snapshot", .body_fd = -1, .sink = snap_write,
                        .sink_ud = &k, .header = snap_header, .header_ud = &k, .stall_bytes = 1, .stall_s = 60};
    rc = hf_http_stream_run(c, &s, err, errlen);
    if (!rc && (s.status < 200 || s.status > 299)) {
        rc = hf_xfer_status(s.status, s.answer, s.answer_len, "GET /replication/snapshot", err, errlen);
        if (s.status == 503 && k.retry_s > 0) {   /* another standby's copy runs: come back when it says */
            *retry_s = k.retry_s;
            size_t m = strlen(err);
            snprintf(err + m, errlen - m, " (Retry-After: %d s)", k.retry_s);
        }
    }
    free(s.answer);
    if (rc) goto end;
    hf_sha256_end(k.h, hex);
    k.h = NULL;
    /* The bytes that arrived are the ones the primary hashed, or nothing
     * is renamed into place: a snapshot without the header is refused too
     * (docs/protocol.md "Replication"). */
    if (!hf_sha256_hex_valid(k.want) || strcmp(k.want, hex)) {
        snprintf(err, errlen, "the snapshot from %s is refused: %lld bytes with SHA-256 %s, %s%s", hf_http_base(c),
                 (long long)k.bytes, hex, k.want[0] ? "X-Hyperfarm-Sha256 says " : "no valid X-Hyperfarm-Sha256",
                 k.want[0] ? k.want : "");
        hf_warn("standby: %s", err);
        rc = HF_ECORRUPT;
        goto end;
    }
    if (fsync(fd) != 0) { rc = hf_err_from_errno(errno); snprintf(err, errlen, "fsync %s: %s", tmp, strerror(errno)); goto end; }
    rc = snap_verify(tmp, err, errlen);
    unlink_sidecars(tmp);   /* opening it (WAL mode) made an empty -wal and -shm */
    if (rc) goto end;
    if (rename(tmp, db) != 0) { rc = hf_err_from_errno(errno); snprintf(err, errlen, "rename %s: %s", tmp, strerror(errno)); goto end; }
    rc = hf_file_fsync_parent(db);
    hf_info("standby: snapshot of %lld bytes (sha256 %.16s..., as announced) is %s", (long long)k.bytes, hex, db);
end:
    hf_sha256_end(k.h, hex);
    close(fd);
    if (rc) {
        unlink(tmp);
        unlink_sidecars(tmp);
    }
    return rc;
}

int standby_fetch_object(hf_http *c, const char *ck_dir, const standby_object *o, char *err, size_t errlen)
{
    char dir[PATH_MAX], dest[PATH_MAX], path[200];
    struct stat sb;
    int rc;
    if (!hf_sha256_hex_valid(o->sha256) || o->size < 0) return 0;
    snprintf(dir, sizeof dir, "%s/objects/%.2s", ck_dir, o->sha256);
    if (snprintf(dest, sizeof dest, "%s/%s", dir, o->sha256) >= (int)sizeof dest) return HF_EINVAL;
    if (stat(dest, &sb) == 0) return 0;
    char objects[PATH_MAX];
    snprintf(objects, sizeof objects, "%s/objects", ck_dir);
    if ((rc = hf_file_mkdir_durable(ck_dir)) || (rc = hf_file_mkdir_durable(objects)) ||
        (rc = hf_file_mkdir_durable(dir))) {
        snprintf(err, errlen, "cannot create %s: %s", dir, hf_strerror(rc));
        return rc;
    }
    snprintf(path, sizeof path, "/api/v1/replication/objects/%s", o->sha256);
    hf_xfer_opts xo = {.what = "fetching an object from the primary", .stall_bytes = 1, .stall_s = 60};
    long status = 0;
    rc = hf_xfer_get(c, path, o->sha256, o->size, dest, &xo, &status, NULL, err, errlen);
    if (rc == HF_ENOTFOUND && status == 404) {
        hf_warn("standby: the primary no longer holds object %s (retention removed it): skipped", o->sha256);
        return 0;
    }
    return rc;
}

#define REFERENCED_WITH_SIZE                                                                                \
    "SELECT r.sha256, COALESCE((SELECT size FROM checkpoints c WHERE c.sha256 = r.sha256 AND c.size IS NOT " \
    "NULL LIMIT 1), (SELECT size FROM contexts x WHERE x.sha256 = r.sha256 LIMIT 1)) FROM (" BACKUP_REFERENCED_SQL \
    ") r"

int standby_fetch_referenced(hf_http *c, const char *db, const char *ck_dir, int64_t *fetched, char *err,
                             size_t errlen)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    int rc = 0, src;
    int64_t n = 0;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(h, REFERENCED_WITH_SIZE, -1, &q, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", db, h ? sqlite3_errmsg(h) : "cannot open");
        rc = HF_EDB;
        goto end;
    }
    sqlite3_busy_timeout(h, 5000);
    while ((src = sqlite3_step(q)) == SQLITE_ROW) {
        standby_object o;
        const char *hash = (const char *)sqlite3_column_text(q, 0);
        if (!hash || !hf_sha256_hex_valid(hash)) continue;
        snprintf(o.sha256, sizeof o.sha256, "%s", hash);
        o.size = sqlite3_column_type(q, 1) == SQLITE_INTEGER ? sqlite3_column_int64(q, 1) : -1;
        char p[PATH_MAX];
        struct stat sb;
        snprintf(p, sizeof p, "%s/objects/%.2s/%s", ck_dir, hash, hash);
        if (stat(p, &sb) == 0) continue;
        if ((rc = standby_fetch_object(c, ck_dir, &o, err, errlen))) goto end;
        n++;
    }
    if (src != SQLITE_DONE) { snprintf(err, errlen, "%s: %s", db, sqlite3_errmsg(h)); rc = HF_EDB; }
end:
    sqlite3_finalize(q);
    sqlite3_close_v2(h);
    if (fetched) *fetched = n;
    return rc;
}

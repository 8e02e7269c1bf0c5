/*
 * backup.c — online snapshots of the database and the checkpoint store,
 * and their restore (see backup.h; docs/operations.md, "Backup and
 * restore").
 *
 * The database copy: a read-only connection of its own opens a read
 * transaction (a WAL snapshot) and sqlite3_backup_step copies
 * pages_per_step pages at a time into the snapshot's file, each slice
 * followed by writeback() and pace() (at most --backup-rate-mb, at least a
 * 1 ms pause), as are the object copies and the hashing. Holding the read transaction across the slices keeps
 * the copy consistent (the pager never sees another connection's commit,
 * so the backup never restarts) and blocks nobody: in WAL mode a reader
 * takes no lock the writer waits for. The price is that the WAL cannot be
 * checkpointed past the snapshot while the copy runs, so it grows by what
 * is committed meanwhile.
 *
 * The objects: the distinct SHA-256 that the copied database names
 * (checkpoints, contexts, experiments' "context"), each linked from the
 * newest earlier snapshot when that holds it, else copied from the live
 * store and verified. An object that retention removed between the
 * database copy and its turn is counted missing (the manifest lists it).
 *
 * Every file is fsynced, then its directory, and the snapshot is renamed
 * from .tmp-NAME to NAME only at the end, then DIR is fsynced.
 */
#include "scheduler/store/backup.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_sha256.h"
#include "hf_thread.h"
#include "hf_time.h"
#include "scheduler/store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <gnutls/crypto.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_SLICE (4u << 20)   /* bytes: one read/hash/write of an object copy */

static pthread_mutex_t one_backup = PTHREAD_MUTEX_INITIALIZER;
static atomic_int canceled;   /* backup_cancel: the running backup stops at its next slice or object */

static atomic_llong rate_bps;   /* backup_set_rate: bytes/s written at most, 0 = no limit */

void backup_cancel(int on) { atomic_store(&canceled, on); }
void backup_set_rate(int64_t bytes_per_s) { atomic_store(&rate_bps, bytes_per_s > 0 ? bytes_per_s : 0); }

/* Pace a copy: done bytes written since t0_us (hf_mono_us): sleep 1 ms
 * (the scheduler's threads get the CPU), and longer while the copy is
 * ahead of --backup-rate-mb. */
static void pace(int64_t t0_us, int64_t done)
{
    int64_t rate = atomic_load(&rate_bps), ahead = 0;
    if (rate > 0) ahead = done * 1000000 / rate - (hf_mono_us() - t0_us);
    usleep((useconds_t)(ahead > 1000 ? (ahead > 1000000 ? 1000000 : ahead) : 1000));
}

/* Start the writeback of what is dirty in fd and wait for what was
 * started before, so a long copy never holds more than a slice of dirty
 * pages: the final fsync stays short, and the disk never takes one long
 * burst that the heartbeats' WAL fsyncs would queue behind. */
static void writeback(int fd)
{
    if (fd < 0) return;
    (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE);
    (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

/* ---------- paths ---------- */

/* snprintf for paths and messages: a path too long is cut, and then
 * fails to open rather than naming another file (the directory was
 * checked to leave room: backup_check_dir). */
static void pathf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, len, fmt, ap);
    va_end(ap);
}

static void parent_of(const char *path, char *out, size_t len)
{
    pathf(out, len, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) pathf(out, len, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

/* Is a (a realpath) b or inside b (a realpath)? */
static int path_within(const char *a, const char *b)
{
    size_t n = strlen(b);
    if (strncmp(a, b, n) != 0) return 0;
    return a[n] == 0 || a[n] == '/' || (n == 1 && b[0] == '/');
}

int backup_check_dir(const char *dir, const char *db_path, const char *ck_dir, char *err, size_t errlen)
{
    char real[PATH_MAX], other[PATH_MAX], tmp[PATH_MAX];
    struct stat sb;
    if (!dir || dir[0] != '/' || strlen(dir) > PATH_MAX - 200) {
        pathf(err, errlen, "the backup directory must be an absolute path on the scheduler's server");
        return HF_EINVAL;
    }
    for (const char *p = dir; (p = strstr(p, "/.")) != NULL; p++)
        if (p[2] == 0 || p[2] == '/' || (p[2] == '.' && (p[3] == 0 || p[3] == '/'))) {
            pathf(err, errlen, "the backup directory %s has a '.' or '..' component", dir);
            return HF_EINVAL;
        }
    if (!realpath(dir, real) || stat(real, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        pathf(err, errlen, "the backup directory %s is not an existing directory on the scheduler's server", dir);
        return HF_ENOTFOUND;
    }
    parent_of(db_path, tmp, sizeof tmp);
    if (realpath(tmp, other) && strcmp(real, other) == 0) {
        pathf(err, errlen, "%s is the live database's own directory: choose another disk or directory", dir);
        return HF_EINVAL;
    }
    if (ck_dir && realpath(ck_dir, other) && (path_within(real, other) || path_within(other, real))) {
        pathf(err, errlen, "%s overlaps the checkpoint store %s", dir, ck_dir);
        return HF_EINVAL;
    }
    return 0;
}

/* Write all of text into path (temp + fsync + rename + directory fsync). */
static int write_file_durable(const char *path, const char *text)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    pathf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return hf_err_from_errno(errno);
    int rc = hf_file_write_all(fd, text, strlen(text));
    if (rc == 0 && fsync(fd) != 0) rc = hf_err_from_errno(errno);
    close(fd);
    if (rc == 0 && rename(tmp, path) != 0) rc = hf_err_from_errno(errno);
    parent_of(path, dir, sizeof dir);
    if (rc == 0) rc = hf_file_fsync_dir(dir);
    if (rc) unlink(tmp);
    return rc;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return hf_err_from_errno(errno);
    int rc = fsync(fd) == 0 ? 0 : hf_err_from_errno(errno);
    close(fd);
    return rc;
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static int rm_tree(const char *path) { return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* ---------- objects ---------- */

/* Copy src_fd (from where it is) into fd (-1: only hash) while hashing, a slice of
 * COPY_SLICE bytes at a time, each followed by writeback() and pace():
 * a 10 GiB object never lands on the disk as one burst. RET 0 with hex, *n. */
static int copy_hashing(int src_fd, int fd, char hex[HF_SHA256_HEX], int64_t *n)
{
    gnutls_hash_hd_t h;
    unsigned char dig[32];
    int rc = 0;
    int64_t t0 = hf_mono_us();
    *n = 0;
    unsigned char *buf = malloc(COPY_SLICE);
    if (!buf || gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0) { free(buf); return HF_ENOMEM; }
    for (;;) {
        ssize_t r = read(src_fd, buf, COPY_SLICE);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = hf_err_from_errno(errno); break; }
        if (r == 0) break;
        gnutls_hash(h, buf, (size_t)r);
        if (fd >= 0 && (rc = hf_file_write_all(fd, buf, (size_t)r))) break;
        writeback(fd);
        *n += r;
        if (atomic_load(&canceled)) { rc = HF_ESTATE; break; }
        pace(t0, *n);
    }
    gnutls_hash_deinit(h, dig);
    hf_sha256_hex(dig, hex);
    free(buf);
    return rc;
}

int backup_object_copy(int src_fd, int64_t size, const char *sha256, const char *root)
{
    char dir[PATH_MAX], tmp[PATH_MAX], obj[PATH_MAX], got[HF_SHA256_HEX];
    int64_t n = 0;
    int rc, fd = -1;
    if (!hf_sha256_hex_valid(sha256)) return HF_EINVAL;
    pathf(dir, sizeof dir, "%s/objects", root);
    if ((rc = hf_file_mkdir_durable(dir))) return rc;
    pathf(dir, sizeof dir, "%s/objects/%.2s", root, sha256);
    if ((rc = hf_file_mkdir_durable(dir))) return rc;
    pathf(obj, sizeof obj, "%s/%s", dir, sha256);
    pathf(tmp, sizeof tmp, "%s/.tmp-%s", dir, sha256);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return hf_err_from_errno(errno);
    if (lseek(src_fd, 0, SEEK_SET) < 0) rc = hf_err_from_errno(errno);
    if (rc == 0) rc = copy_hashing(src_fd, fd, got, &n);
    if (rc == 0 && (n != size || strcmp(got, sha256) != 0)) rc = HF_ECORRUPT;
    if (rc == 0 && fsync(fd) != 0) rc = hf_err_from_errno(errno);
    close(fd);
    if (rc == 0 && rename(tmp, obj) != 0) rc = hf_err_from_errno(errno);
    if (rc == 0) rc = hf_file_fsync_dir(dir);
    if (rc) unlink(tmp);
    return rc;
}

/* dst_root/objects/ab/sha as a hard link of prev_root's copy when that
 * has size bytes. RET 1 linked, 0 not (copy it), HF_E* on a failed fsync. */
static int object_link(const char *prev_root, const char *dst_root, const char *sha, int64_t size)
{
    char from[PATH_MAX], dir[PATH_MAX], to[PATH_MAX];
    struct stat sb;
    if (!prev_root) return 0;
    pathf(from, sizeof from, "%s/objects/%.2s/%s", prev_root, sha, sha);
    if (lstat(from, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size != size) return 0;
    pathf(dir, sizeof dir, "%s/objects", dst_root);
    if (hf_file_mkdir_durable(dir)) return 0;
    pathf(dir, sizeof dir, "%s/objects/%.2s", dst_root, sha);
    if (hf_file_mkdir_durable(dir)) return 0;
    pathf(to, sizeof to, "%s/%s", dir, sha);
    if (link(from, to) != 0) return errno == EEXIST ? 1 : 0;
    int rc = hf_file_fsync_dir(dir);
    return rc ? rc : 1;
}

typedef struct obj_pass {
    ckstore       *ck;
    const char    *prev, *dst;
    backup_result *res;
    json_t        *missing;    /* [sha256...] */
    char          *err;
    size_t         errlen;
} obj_pass;

static int backup_one_object(obj_pass *op, const char *sha)
{
    int fd = -1;
    int64_t size = 0;
    int rc = ckstore_open_object(op->ck, sha, &fd, &size);
    if (rc == HF_ENOTFOUND) {   /* removed by retention after the database copy */
        op->res->objects_missing++;
        json_array_append_new(op->missing, json_string(sha));
        return 0;
    }
    if (rc) { pathf(op->err, op->errlen, "object %s: %s", sha, hf_strerror(rc)); return rc; }
    int linked = object_link(op->prev, op->dst, sha, size);
    if (linked == 1) {
        op->res->objects_linked++;
    } else if (linked == 0 && (rc = backup_object_copy(fd, size, sha, op->dst)) == 0) {
        op->res->objects_copied++;
        op->res->bytes_copied += size;
    } else if (linked < 0) {
        rc = linked;
    }
    close(fd);
    if (rc) pathf(op->err, op->errlen, "object %s: %s%s", sha, hf_strerror(rc),
                     rc == HF_ECORRUPT ? " (the live store's file does not match its name)" : "");
    else op->res->objects++;
    return rc;
}

/* Every object the copied database db names, into the snapshot. */
static int backup_objects(sqlite3 *db, obj_pass *op)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(db, BACKUP_REFERENCED_SQL, -1, &st, NULL) != SQLITE_OK) {
        pathf(op->err, op->errlen, "listing objects: %s", sqlite3_errmsg(db));
        return HF_EDB;
    }
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        const char *sha = (const char *)sqlite3_column_text(st, 0);
        if (atomic_load(&canceled)) {
            pathf(op->err, op->errlen, "canceled (the scheduler is stopping)");
            rc = HF_ESTATE;
        } else if (sha && hf_sha256_hex_valid(sha)) {
            rc = backup_one_object(op, sha);
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* ---------- the database ---------- */

/* Copy db_path into dst (a new file) in slices, inside one read
 * transaction of its own connection. */
static int backup_db(const char *db_path, const char *dst, int pages, char *err, size_t errlen)
{
    sqlite3 *src = NULL, *out = NULL;
    sqlite3_backup *b = NULL;
    int rc = HF_EDB, src_rc;
    if (sqlite3_open_v2(db_path, &src, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        sqlite3_open_v2(dst, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK) {
        pathf(err, errlen, "cannot open %s: %s", src && out ? dst : db_path,
                 sqlite3_errmsg(src && out ? out : src));
        goto end;
    }
    sqlite3_busy_timeout(src, 5000);
    if (sqlite3_exec(src, "BEGIN; SELECT count(*) FROM sqlite_schema", NULL, NULL, NULL) != SQLITE_OK) {
        pathf(err, errlen, "cannot start reading %s: %s", db_path, sqlite3_errmsg(src));
        goto end;
    }
    if (!(b = sqlite3_backup_init(out, "main", src, "main"))) {
        pathf(err, errlen, "backup of %s: %s", db_path, sqlite3_errmsg(out));
        goto end;
    }
    int wfd = -1, psz = 4096;   /* the copy's file, for its writeback; the page size */
    sqlite3_stmt *ps = NULL;
    if (sqlite3_prepare_v2(src, "PRAGMA page_size", -1, &ps, NULL) == SQLITE_OK && sqlite3_step(ps) == SQLITE_ROW)
        psz = sqlite3_column_int(ps, 0);
    sqlite3_finalize(ps);
    int64_t t0 = hf_mono_us(), done = 0;
    while ((src_rc = sqlite3_backup_step(b, pages)) == SQLITE_OK || src_rc == SQLITE_BUSY || src_rc == SQLITE_LOCKED) {
        if (atomic_load(&canceled)) break;
        if (wfd < 0) wfd = open(dst, O_RDONLY | O_CLOEXEC);
        writeback(wfd);
        done += (int64_t)pages * psz;
        pace(t0, done);
    }
    if (wfd >= 0) close(wfd);
    if (atomic_load(&canceled)) {
        sqlite3_backup_finish(b);
        pathf(err, errlen, "canceled (the scheduler is stopping)");
        rc = HF_ESTATE;
        goto end;
    }
    src_rc = sqlite3_backup_finish(b);
    if (src_rc != SQLITE_OK) {
        pathf(err, errlen, "backup of %s: %s", db_path, sqlite3_errstr(src_rc));
        rc = store_rc(src_rc);
        goto end;
    }
    /* One self-contained file: no -wal beside it. */
    if (sqlite3_exec(out, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK) {
        pathf(err, errlen, "%s: %s", dst, sqlite3_errmsg(out));
        goto end;
    }
    rc = 0;
end:
    if (src) sqlite3_exec(src, "COMMIT", NULL, NULL, NULL);
    sqlite3_close_v2(src);
    sqlite3_close_v2(out);
    if (rc == 0 && (rc = fsync_path(dst)) != 0) pathf(err, errlen, "fsync %s: %s", dst, hf_strerror(rc));
    return rc;
}

static int64_t count_rows(sqlite3 *db, const char *table)
{
    char sql[96];
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    pathf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static int user_version_of(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

static const char *const counted[] = {"experiments", "trials", "metrics", "logs", "checkpoints", "events", "agents"};

/* The manifest of the snapshot in snap (its database copied, objects done). */
static json_t *manifest_new(sqlite3 *db, const char *dbfile, const backup_result *res, json_t *missing)
{
    char hex[HF_SHA256_HEX] = "", when[32];
    int64_t n = 0, now = hf_wall_ms();
    int fd = open(dbfile, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || copy_hashing(fd, -1, hex, &n) != 0) hex[0] = 0;   /* paced: a large file's hash is CPU */
    if (fd >= 0) close(fd);
    time_t t = (time_t)(now / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *counts = json_object();
    for (size_t i = 0; i < sizeof counted / sizeof counted[0]; i++)
        json_object_set_new(counts, counted[i], json_integer(count_rows(db, counted[i])));
    return json_pack("{sisIsssiso s{sssIss} s{sIsIsIsIsO}}", "format", 1, "time_ms", (json_int_t)now, "time", when,
                     "schema_version", user_version_of(db), "counts", counts, "db", "file", BACKUP_DB_FILE,
                     "size", (json_int_t)n, "sha256", hex, "objects", "count", (json_int_t)res->objects,
                     "copied", (json_int_t)res->objects_copied, "linked", (json_int_t)res->objects_linked,
                     "bytes_copied", (json_int_t)res->bytes_copied, "missing", missing);
}

/* The newest snapshot directory in dir (NULL when none) into out. */
static const char *newest_snapshot(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    char best[256] = "";
    struct dirent *e;
    if (!d) return NULL;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "hf-", 3) == 0 && strlen(e->d_name) < sizeof best && strcmp(e->d_name, best) > 0)
            pathf(best, sizeof best, "%s", e->d_name);
    closedir(d);
    if (!best[0]) return NULL;
    pathf(out, len, "%s/%s", dir, best);
    return out;
}

/* Remove the .tmp-hf-* folders of dir: snapshots a crash or a power cut
 * interrupted (this process runs one backup at a time, under one_backup). */
static void clean_partial(const char *dir)
{
    char path[PATH_MAX];
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, ".tmp-hf-", 8) == 0) {
            pathf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (rm_tree(path) == 0) hf_info("backup: removed the interrupted snapshot %s", path);
        }
    closedir(d);
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Remove the oldest hf-* snapshots of dir beyond keep. */
static void prune(const char *dir, int keep)
{
    char *names[1024], path[PATH_MAX];
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL && n < 1024)
        if (strncmp(e->d_name, "hf-", 3) == 0) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], name_cmp);
    for (int i = 0; i < n; i++) {
        if (names[i] && i < n - keep) {
            pathf(path, sizeof path, "%s/%s", dir, names[i]);
            if (rm_tree(path) == 0) hf_info("backup: removed old snapshot %s", path);
            else hf_warn("backup: cannot remove %s: %s", path, strerror(errno));
        }
        free(names[i]);
    }
    hf_file_fsync_dir(dir);
}

/* The snapshot's steps, into tmpdir (created); res filled. */
static int take_into(const char *db_path, ckstore *ck, const char *dir, const char *tmpdir, int pages,
                     backup_result *res, char *err, size_t errlen)
{
    char dbfile[PATH_MAX], prevbuf[PATH_MAX], path[PATH_MAX];
    sqlite3 *db = NULL;
    json_t *missing = json_array(), *man = NULL;
    int rc;
    pathf(dbfile, sizeof dbfile, "%s/" BACKUP_DB_FILE, tmpdir);
    if ((rc = backup_db(db_path, dbfile, pages, err, errlen))) goto end;
    if (sqlite3_open_v2(dbfile, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        pathf(err, errlen, "cannot open the copy %s", dbfile);
        rc = HF_EDB;
        goto end;
    }
    obj_pass op = {.ck = ck, .prev = newest_snapshot(dir, prevbuf, sizeof prevbuf), .dst = tmpdir, .res = res,
                   .missing = missing, .err = err, .errlen = errlen};
    if (ck && (rc = backup_objects(db, &op))) goto end;
    struct stat sb;
    res->db_bytes = stat(dbfile, &sb) == 0 ? sb.st_size : 0;
    man = manifest_new(db, dbfile, res, missing);
    char *text = man ? json_dumps(man, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    pathf(path, sizeof path, "%s/" BACKUP_MANIFEST, tmpdir);
    rc = text ? write_file_durable(path, text) : HF_ENOMEM;
    free(text);
    if (rc == 0) rc = hf_file_fsync_dir(tmpdir);
    if (rc) pathf(err, errlen, "writing %s: %s", path, hf_strerror(rc));
end:
    sqlite3_close_v2(db);
    json_decref(man);
    json_decref(missing);
    return rc;
}

int backup_take(const char *db_path, ckstore *ck, const char *dir, int keep, int pages_per_step,
                backup_result *res, char *err, size_t errlen)
{
    char name[64], tmpdir[PATH_MAX];
    int64_t t0 = hf_mono_ms(), now = hf_wall_ms();
    int rc;
    memset(res, 0, sizeof *res);
    if (pthread_mutex_trylock(&one_backup) != 0) {
        pathf(err, errlen, "a backup is already running");
        return HF_ESTATE;
    }
    if ((rc = backup_check_dir(dir, db_path, ck ? ckstore_dir(ck) : NULL, err, errlen))) goto end;
    clean_partial(dir);
    time_t t = (time_t)(now / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(name, sizeof name, "hf-%Y%m%dT%H%M%S", &tm);
    pathf(name + strlen(name), sizeof name - strlen(name), "%03dZ", (int)(now % 1000));
    pathf(tmpdir, sizeof tmpdir, "%s/.tmp-%s", dir, name);
    pathf(res->snapshot, sizeof res->snapshot, "%s/%s", dir, name);
    if (mkdir(tmpdir, 0755) != 0) {
        rc = hf_err_from_errno(errno);
        pathf(err, errlen, "cannot create %s: %s", tmpdir, strerror(errno));
        goto end;
    }
    rc = take_into(db_path, ck, dir, tmpdir, pages_per_step > 0 ? pages_per_step : 256, res, err, errlen);
    if (rc == 0 && rename(tmpdir, res->snapshot) != 0) {
        rc = hf_err_from_errno(errno);
        pathf(err, errlen, "cannot rename %s: %s", tmpdir, strerror(errno));
    }
    if (rc == 0) rc = hf_file_fsync_dir(dir);
    if (rc) {
        rm_tree(tmpdir);
        goto end;
    }
    if (keep > 0) prune(dir, keep);
    res->duration_ms = hf_mono_ms() - t0;
    hf_info("backup: %s (%lld bytes of database, %lld objects: %lld copied, %lld linked, %lld missing) in %lld ms",
            res->snapshot, (long long)res->db_bytes, (long long)res->objects, (long long)res->objects_copied,
            (long long)res->objects_linked, (long long)res->objects_missing, (long long)res->duration_ms);
end:
    pthread_mutex_unlock(&one_backup);
    return rc;
}

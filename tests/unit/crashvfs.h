/*
 * crashvfs.h — a power cut for SQLite, as SQLite's own crash tests model
 * one (test_vfs / crash tests): a shim VFS registered as the default over
 * "unix" that keeps, for every database, WAL and rollback-journal file, an
 * image of its contents as of its last xSync. At the cut (crashvfs_cut)
 * each file is put back to that image: writes after the last xSync are
 * gone, a WAL or journal that was created but never synced is gone (its
 * directory entry was never made durable: SQLite's unix VFS fsyncs the
 * directory at a new journal's or WAL's first sync; a new database file's
 * entry counts as durable, see cv_open), and the -shm file (never
 * durable) is removed.
 *
 * The cut point: crashvfs_arm(n) makes the n-th write/sync/truncate/delete
 * from now, and every one after it, fail with SQLITE_IOERR without
 * touching the file (the machine lost power in the middle of whatever was
 * running: that COMMIT is not acknowledged). Then the test closes its
 * connections (their close-time writes fail too), calls crashvfs_cut and
 * reopens. crashvfs_events counts the events so far, to choose n.
 *
 * The real files stay the machine's own: only what survives the cut is
 * modelled. One global instance; its lock makes it safe for the store's
 * threads (writer, readers, checkpointer). Used by
 * test_scheduler_powercut.c.
 */
#ifndef HF_TEST_CRASHVFS_H
#define HF_TEST_CRASHVFS_H

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cv_entry {
    char             path[512];
    unsigned char   *img;          /* contents at the last sync */
    int64_t          len, cap;
    int              durable;      /* the file exists after a cut */
    int64_t          dlo, dhi;     /* bytes written since the last sync: [dlo, dhi) */
    struct cv_entry *next;
} cv_entry;

typedef struct cv_file {
    sqlite3_file  base;
    cv_entry     *e;               /* NULL: not modelled (temp files) */
    sqlite3_file *real;            /* the unix VFS's file, allocated right after */
} cv_file;

static struct {
    sqlite3_vfs     vfs;
    sqlite3_vfs    *real;
    pthread_mutex_t mu;
    cv_entry       *files;
    long            events, cut_at;   /* cut_at 0: not armed */
    int             crashed;
} cv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void cv_grow(cv_entry *e, int64_t n)
{
    if (n <= e->cap) return;
    int64_t cap = e->cap ? e->cap : 65536;
    while (cap < n) cap *= 2;
    e->img = realloc(e->img, (size_t)cap);
    if (!e->img) abort();
    e->cap = cap;
}

/* Under cv.mu: the entry of path, created from the file as it is now (an
 * existing file counts as durable: it was there before this run). */
static cv_entry *cv_entry_get(const char *path)
{
    for (cv_entry *e = cv.files; e; e = e->next)
        if (strcmp(e->path, path) == 0) return e;
    cv_entry *e = calloc(1, sizeof *e);
    if (!e) abort();
    snprintf(e->path, sizeof e->path, "%s", path);
    e->dlo = INT64_MAX;
    FILE *f = fopen(path, "rb");
    if (f) {
        unsigned char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            cv_grow(e, e->len + (int64_t)n);
            memcpy(e->img + e->len, buf, n);
            e->len += (int64_t)n;
        }
        fclose(f);
        e->durable = 1;
    }
    e->next = cv.files;
    cv.files = e;
    return e;
}

/* Count one event; RET 1 when the power is (now) off. */
static int cv_event(void)
{
    pthread_mutex_lock(&cv.mu);
    if (!cv.crashed) {
        cv.events++;
        if (cv.cut_at > 0 && cv.events >= cv.cut_at) cv.crashed = 1;
    }
    int off = cv.crashed;
    pthread_mutex_unlock(&cv.mu);
    return off;
}

#define CV_REAL(f) (((cv_file *)(f))->real)

static int cv_close(sqlite3_file *f)
{
    int rc = CV_REAL(f)->pMethods ? CV_REAL(f)->pMethods->xClose(CV_REAL(f)) : SQLITE_OK;
    return rc;
}
static int cv_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    return CV_REAL(f)->pMethods->xRead(CV_REAL(f), p, n, off);
}
/* A write and a sync of one file are atomic with respect to each other
 * (cv.mu held across the real call): the store's flush thread syncs the
 * WAL while the writer appends to it, and a write must count as either
 * before the sync (in its image) or after (not), never half. */
static int cv_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    if (cv_event()) return SQLITE_IOERR_WRITE;
    cv_entry *e = ((cv_file *)f)->e;
    pthread_mutex_lock(&cv.mu);
    int rc = CV_REAL(f)->pMethods->xWrite(CV_REAL(f), p, n, off);
    if (rc == SQLITE_OK && e) {
        if (off < e->dlo) e->dlo = off;
        if (off + n > e->dhi) e->dhi = off + n;
    }
    pthread_mutex_unlock(&cv.mu);
    return rc;
}
static int cv_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    if (cv_event()) return SQLITE_IOERR_TRUNCATE;
    return CV_REAL(f)->pMethods->xTruncate(CV_REAL(f), size);
}
/* A sync makes the file's current contents its image. */
static int cv_sync(sqlite3_file *f, int flags)
{
    if (cv_event()) return SQLITE_IOERR_FSYNC;
    sqlite3_file *r = CV_REAL(f);
    cv_entry *e = ((cv_file *)f)->e;
    sqlite3_int64 size = 0;
    pthread_mutex_lock(&cv.mu);
    int rc = r->pMethods->xSync(r, flags);
    if (rc != SQLITE_OK || !e || (rc = r->pMethods->xFileSize(r, &size)) != SQLITE_OK) {
        pthread_mutex_unlock(&cv.mu);
        return rc;
    }
    int64_t lo = e->dlo, hi = e->dhi;
    if (size > e->len && e->len < lo) lo = e->len;   /* a hole or growth since the last sync */
    if (size > e->len && size > hi) hi = size;
    if (hi > size) hi = size;
    cv_grow(e, size);
    if (lo < hi) rc = r->pMethods->xRead(r, e->img + lo, (int)(hi - lo), lo);
    e->len = size;
    e->durable = 1;
    e->dlo = INT64_MAX;
    e->dhi = 0;
    pthread_mutex_unlock(&cv.mu);
    return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_OK : rc;
}
static int cv_size(sqlite3_file *f, sqlite3_int64 *p) { return CV_REAL(f)->pMethods->xFileSize(CV_REAL(f), p); }
static int cv_lock(sqlite3_file *f, int l) { return CV_REAL(f)->pMethods->xLock(CV_REAL(f), l); }
static int cv_unlock(sqlite3_file *f, int l) { return CV_REAL(f)->pMethods->xUnlock(CV_REAL(f), l); }
static int cv_reserved(sqlite3_file *f, int *p) { return CV_REAL(f)->pMethods->xCheckReservedLock(CV_REAL(f), p); }
static int cv_fcntl(sqlite3_file *f, int op, void *p)
{
    if (op == SQLITE_FCNTL_SIZE_HINT && cv_event()) return SQLITE_IOERR_WRITE;
    return CV_REAL(f)->pMethods->xFileControl(CV_REAL(f), op, p);
}
static int cv_sector(sqlite3_file *f) { return CV_REAL(f)->pMethods->xSectorSize(CV_REAL(f)); }
static int cv_devchar(sqlite3_file *f) { return CV_REAL(f)->pMethods->xDeviceCharacteristics(CV_REAL(f)); }
static int cv_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
    return CV_REAL(f)->pMethods->xShmMap(CV_REAL(f), pg, sz, ext, pp);
}
static int cv_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return CV_REAL(f)->pMethods->xShmLock(CV_REAL(f), off, n, flags);
}
static void cv_shm_barrier(sqlite3_file *f) { CV_REAL(f)->pMethods->xShmBarrier(CV_REAL(f)); }
static int cv_shm_unmap(sqlite3_file *f, int del) { return CV_REAL(f)->pMethods->xShmUnmap(CV_REAL(f), del); }

static const sqlite3_io_methods cv_io = {
    2, cv_close, cv_read, cv_write, cv_truncate, cv_sync, cv_size, cv_lock, cv_unlock, cv_reserved, cv_fcntl,
    cv_sector, cv_devchar, cv_shm_map, cv_shm_lock, cv_shm_barrier, cv_shm_unmap, NULL, NULL,
};

static int cv_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)v;
    cv_file *cf = (cv_file *)f;
    memset(cf, 0, sizeof *cf);
    cf->real = (sqlite3_file *)(cf + 1);
    if (name && (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL))) {
        pthread_mutex_lock(&cv.mu);
        cf->e = cv_entry_get(name);
        /* A database file's name is durable from its creation: store_open
         * fsyncs the directory of a database it creates (checked by
         * test_scheduler_ckstore_durable.c); its contents are not. */
        if (flags & SQLITE_OPEN_MAIN_DB) cf->e->durable = 1;
        pthread_mutex_unlock(&cv.mu);
    }
    int rc = cv.real->xOpen(cv.real, name, cf->real, flags, out);
    cf->base.pMethods = cf->real->pMethods ? &cv_io : NULL;
    return rc;
}

static int cv_delete(sqlite3_vfs *v, const char *name, int dirsync)
{
    (void)v;
    if (cv_event()) return SQLITE_IOERR_DELETE;
    int rc = cv.real->xDelete(cv.real, name, dirsync);
    pthread_mutex_lock(&cv.mu);
    for (cv_entry *e = cv.files; e; e = e->next)
        if (strcmp(e->path, name) == 0) {   /* treated as durable at once (dirsync) */
            e->durable = 0;
            e->len = 0;
            e->dlo = INT64_MAX;
            e->dhi = 0;
        }
    pthread_mutex_unlock(&cv.mu);
    return rc;
}

static int cv_access(sqlite3_vfs *v, const char *n, int fl, int *o) { (void)v; return cv.real->xAccess(cv.real, n, fl, o); }
static int cv_full(sqlite3_vfs *v, const char *n, int len, char *o) { (void)v; return cv.real->xFullPathname(cv.real, n, len, o); }
static void *cv_dlopen(sqlite3_vfs *v, const char *n) { (void)v; return cv.real->xDlOpen(cv.real, n); }
static void cv_dlerror(sqlite3_vfs *v, int n, char *o) { (void)v; cv.real->xDlError(cv.real, n, o); }
static void (*cv_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return cv.real->xDlSym(cv.real, h, s); }
static void cv_dlclose(sqlite3_vfs *v, void *h) { (void)v; cv.real->xDlClose(cv.real, h); }
static int cv_random(sqlite3_vfs *v, int n, char *o) { (void)v; return cv.real->xRandomness(cv.real, n, o); }
static int cv_sleep(sqlite3_vfs *v, int us) { (void)v; return cv.real->xSleep(cv.real, us); }
static int cv_time(sqlite3_vfs *v, double *o) { (void)v; return cv.real->xCurrentTime(cv.real, o); }
static int cv_lasterr(sqlite3_vfs *v, int n, char *o) { (void)v; return cv.real->xGetLastError(cv.real, n, o); }
static int cv_time64(sqlite3_vfs *v, sqlite3_int64 *o) { (void)v; return cv.real->xCurrentTimeInt64(cv.real, o); }

/* Register the shim as the default VFS (once). RET SQLITE_OK. */
static inline int crashvfs_install(void)
{
    if (cv.real) return SQLITE_OK;
    cv.real = sqlite3_vfs_find("unix");
    if (!cv.real) return SQLITE_ERROR;
    cv.vfs = (sqlite3_vfs){2, (int)sizeof(cv_file) + cv.real->szOsFile, cv.real->mxPathname, NULL, "crashvfs",
                           NULL, cv_open, cv_delete, cv_access, cv_full, cv_dlopen, cv_dlerror, cv_dlsym,
                           cv_dlclose, cv_random, cv_sleep, cv_time, cv_lasterr, cv_time64, NULL, NULL, NULL};
    return sqlite3_vfs_register(&cv.vfs, 1);
}

static inline long crashvfs_events(void)
{
    pthread_mutex_lock(&cv.mu);
    long n = cv.events;
    pthread_mutex_unlock(&cv.mu);
    return n;
}

/* The n-th event from now (n >= 1) is the power cut. */
static inline void crashvfs_arm(long n)
{
    pthread_mutex_lock(&cv.mu);
    cv.cut_at = cv.events + n;
    pthread_mutex_unlock(&cv.mu);
}

static inline int crashvfs_crashed(void)
{
    pthread_mutex_lock(&cv.mu);
    int c = cv.crashed;
    pthread_mutex_unlock(&cv.mu);
    return c;
}

/* Power off now (if the armed event did not come). */
static inline void crashvfs_power_off(void)
{
    pthread_mutex_lock(&cv.mu);
    cv.crashed = 1;
    pthread_mutex_unlock(&cv.mu);
}

/* After every connection is closed: put each file back to what was
 * synced, remove the -shm files, forget everything, power on. RET the
 * number of files that lost unsynced bytes or vanished. */
static inline int crashvfs_cut(void)
{
    int changed = 0;
    pthread_mutex_lock(&cv.mu);
    for (cv_entry *e = cv.files, *next; e; e = next) {
        next = e->next;
        struct stat sb;
        int exists = stat(e->path, &sb) == 0;
        if (!e->durable) {
            if (exists && unlink(e->path) == 0) changed++;
        } else {
            if (!exists || sb.st_size != e->len || e->dhi > 0) changed++;
            int fd = open(e->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || (e->len && write(fd, e->img, (size_t)e->len) != (ssize_t)e->len)) abort();
            close(fd);
        }
        char shm[540];
        snprintf(shm, sizeof shm, "%s-shm", e->path);
        unlink(shm);
        free(e->img);
        free(e);
    }
    cv.files = NULL;
    cv.events = 0;
    cv.cut_at = 0;
    cv.crashed = 0;
    pthread_mutex_unlock(&cv.mu);
    return changed;
}

#endif

/*
 * test_scheduler_ckstore_durable.c — an acknowledged checkpoint object
 * survives a power cut (docs/scheduler.md, "Durability"): the file-level
 * counterpart of test_scheduler_powercut.c's crash VFS.
 *
 * The model: this test binary defines write, fsync, mkdir, rename, link
 * and open/open64 (a file created by O_CREAT) itself, so every call the scheduler's code (and libsqlite3) makes
 * comes here first, is recorded, and goes on to the C library. A file's
 * bytes are durable once an fsync of it follows its last write; a name
 * (created by mkdir, rename or link) is durable once an fsync of its
 * directory follows; a path survives a power cut only if its bytes and
 * every name from the test's root down to it are durable. That is what a
 * journaling filesystem promises (ext4 data=ordered, xfs) and no more.
 *
 *   - the model itself: a rename without the directory's fsync, a file in
 *     a new directory whose parent was not fsynced, are not durable until
 *     those fsyncs come (so the checks below can fail);
 *   - a database store_open creates has a durable name when it returns
 *     (store_open fsyncs its directory; under FULL SQLite's own fsync of
 *     the directory at the WAL's first sync does too);
 *   - ckstore: after every acknowledged upload (ckstore_upload_commit
 *     returned 0: small ones written on the caller's thread, large ones
 *     through the write-behind thread, new objects/ab folders and existing
 *     ones, a duplicate), the object is durable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/store/store.h"
#include "tests/unit/ckpt_fixture.h"
#include "tests/unit/unit_fixture.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------- the model ---------- */

#define MAXN 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static ino_t dirty[MAXN];           /* inodes written since their last fsync */
static int ndirty;
static char *pending[MAXN];         /* names whose directory has not been fsynced since */
static int npending;
static char root[256];              /* durable by assumption (the test's own folder) */

static void mark_dirty(ino_t ino)
{
    for (int i = 0; i < ndirty; i++)
        if (dirty[i] == ino) return;
    if (ndirty < MAXN) dirty[ndirty++] = ino;
}

static void clear_dirty(ino_t ino)
{
    for (int i = 0; i < ndirty; i++)
        if (dirty[i] == ino) dirty[i] = dirty[--ndirty];
}

static void add_pending(const char *path)
{
    char abs[PATH_MAX];
    if (path[0] != '/') return;   /* every path under test is absolute */
    snprintf(abs, sizeof abs, "%s", path);
    pthread_mutex_lock(&mu);
    int found = 0;
    for (int i = 0; i < npending; i++) found |= strcmp(pending[i], abs) == 0;
    if (!found && npending < MAXN) pending[npending++] = strdup(abs);
    pthread_mutex_unlock(&mu);
}

/* An fsync of directory dir makes the names in it durable. */
static void dir_synced(const char *dir)
{
    size_t n = strlen(dir);
    for (int i = 0; i < npending; i++) {
        const char *slash = strrchr(pending[i], '/');
        if ((size_t)(slash - pending[i]) == n && strncmp(pending[i], dir, n) == 0) {
            free(pending[i]);
            pending[i--] = pending[--npending];
        }
    }
}

ssize_t write(int fd, const void *p, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t w = real(fd, p, n);
    struct stat sb;
    if (w > 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        pthread_mutex_lock(&mu);
        mark_dirty(sb.st_ino);
        pthread_mutex_unlock(&mu);
    }
    return w;
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int rc = real(fd);
    struct stat sb;
    if (rc == 0 && fstat(fd, &sb) == 0) {
        char link[64], path[PATH_MAX];
        pthread_mutex_lock(&mu);
        if (S_ISDIR(sb.st_mode)) {
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, path, sizeof path - 1);
            if (n > 0) {
                path[n] = 0;
                dir_synced(path);
            }
        } else {
            clear_dirty(sb.st_ino);
        }
        pthread_mutex_unlock(&mu);
    }
    return rc;
}

int mkdir(const char *path, mode_t mode)
{
    static int (*real)(const char *, mode_t);
    if (!real) real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    int rc = real(path, mode);
    if (rc == 0) add_pending(path);
    return rc;
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int rc = real(from, to);
    if (rc == 0) add_pending(to);
    return rc;
}

int link(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "link");
    int rc = real(from, to);
    if (rc == 0) add_pending(to);
    return rc;
}

/* open(2) with O_CREAT of a file that was not there makes a new name. */
static int open_hook(const char *sym, const char *path, int flags, mode_t mode)
{
    static int (*real[2])(const char *, int, ...);
    int k = strcmp(sym, "open") != 0;
    if (!real[k]) real[k] = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, sym);
    struct stat sb;
    int isnew = (flags & O_CREAT) && stat(path, &sb) != 0;
    int fd = real[k](path, flags, mode);
    if (fd >= 0 && isnew) add_pending(path);
    return fd;
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return open_hook("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return open_hook("open64", path, flags, mode);
}

/* Does path's name (and every name from root down to it) survive a cut? */
static int name_durable(const char *path)
{
    char pre[PATH_MAX];
    size_t rl = strlen(root);
    if (strncmp(path, root, rl) != 0) return 0;
    int ok = 1;
    pthread_mutex_lock(&mu);
    for (const char *p = path + rl; ok && p && *p; p = strchr(p + 1, '/')) {
        const char *end = strchr(p + 1, '/');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        snprintf(pre, sizeof pre, "%.*s", (int)n, path);
        for (int i = 0; i < npending; i++)
            if (strcmp(pending[i], pre) == 0) ok = 0;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

/* ... and its bytes too. */
static int file_durable(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || !name_durable(path)) return 0;
    pthread_mutex_lock(&mu);
    int ok = 1;
    for (int i = 0; i < ndirty; i++) ok &= dirty[i] != sb.st_ino;
    pthread_mutex_unlock(&mu);
    return ok;
}

static int setup(void **st) { (void)st; return unit_tmpdir(root, sizeof root, "ckdurable"); }
static int teardown(void **st) { (void)st; return unit_rmtree(root); }

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

/* ---------- tests ---------- */

static void test_model_catches_missing_fsyncs(void **state)
{
    (void)state;
    char a[320], b[320], sub[320], c[320];
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    snprintf(sub, sizeof sub, "%s/sub", root);
    snprintf(c, sizeof c, "%s/sub/c", root);
    int fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    assert_int_equal(rename(a, b), 0);
    assert_false(file_durable(b));            /* neither bytes nor name */
    assert_int_equal(fsync(fd), 0);
    close(fd);
    assert_false(file_durable(b));            /* bytes, not the name */
    fsync_dir(root);
    assert_true(file_durable(b));
    assert_int_equal(mkdir(sub, 0755), 0);
    fd = open(c, O_WRONLY | O_CREAT, 0644);
    assert_int_equal(write(fd, "y", 1), 1);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    fsync_dir(sub);
    assert_false(file_durable(c));            /* sub's own name is not durable */
    fsync_dir(root);
    assert_true(file_durable(c));
}

static void test_store_open_makes_new_database_name_durable(void **state)
{
    (void)state;
    char d[320], db[340], err[256];
    snprintf(d, sizeof d, "%s/dbdir", root);
    assert_int_equal(mkdir(d, 0755), 0);
    fsync_dir(root);
    snprintf(db, sizeof db, "%s/new.db", d);
    store *s = NULL;
    assert_int_equal(store_open(db, &s, err, sizeof err), 0);
    assert_true(name_durable(db));   /* created by open(O_CREAT), then its directory fsynced */
    store_close(s);
}

static void test_acknowledged_objects_are_durable(void **state)
{
    (void)state;
    char ckdir[320], err[256], msg[256], sha[65], obj[512];
    snprintf(ckdir, sizeof ckdir, "%s/ck", root);
    ckstore *ck = NULL;
    assert_int_equal(ckstore_open(ckdir, NULL, 64 << 20, &ck, err, sizeof err), 0);
    unsigned seed = 7;
    size_t cap = 3 << 20;
    char *buf = malloc(cap);
    assert_non_null(buf);
    int n = 0;
    for (int i = 0; i < 40; i++) {
        size_t len = i % 13 == 5 ? (1u << 20) + (size_t)(rand_r(&seed) % (2u << 20))
                                 : 1 + (size_t)(rand_r(&seed) % 65536);
        for (size_t k = 0; k < len; k++) buf[k] = (char)rand_r(&seed);
        if (i == 39) len = 100;                  /* the last one again: a duplicate */
        if (i == 38) memset(buf, 'd', 100), len = 100;
        unit_sha_hex(buf, len, sha);
        ckstore_upload *up = NULL;
        ckstore_info info = {.step = -1};
        assert_int_equal(ckstore_upload_begin(ck, sha, (int64_t)len, &up), 0);
        for (size_t off = 0; off < len;) {
            size_t piece = len - off < 32768 ? len - off : 32768;
            assert_int_equal(ckstore_upload_write(up, buf + off, piece), 0);
            off += piece;
        }
        assert_int_equal(ckstore_upload_commit(up, &info, msg, sizeof msg), 0);
        snprintf(obj, sizeof obj, "%s/objects/%.2s/%s", ckdir, sha, sha);
        if (!file_durable(obj)) fail_msg("upload %d (%zu bytes) acknowledged but %s would not survive a power cut",
                                         i, len, obj);
        n++;
    }
    free(buf);
    ckstore_close(ck);
    assert_int_equal(n, 40);
}

int main(void)
{
    hf_log_set_level(HF_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_model_catches_missing_fsyncs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_open_makes_new_database_name_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acknowledged_objects_are_durable, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

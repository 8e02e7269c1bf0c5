/*
 * agent_objcache.c — the agent's object cache: files and index (see
 * agent_objcache.h).
 *
 * The index (oc->ents, under oc->mu) mirrors the files under ab/: one
 * entry per object with its size, its last use (a counter, seeded from the
 * files' mtimes at open) and a pin count. Files are created outside the
 * lock (temp file, hash, fsync, rename) and entered into the index after
 * the rename; eviction unlinks under the lock. A transfer pins the entry
 * it reads so eviction skips it. The index is a plain array searched
 * linearly: a cache holds hundreds of objects, not millions.
 */
#include "agent_objcache.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_sha256.h"
#include "hf_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct oc_ent {
    char    sha[65];
    int64_t size;
    int64_t used;                     /* larger = more recent */
    int     pins;
} oc_ent;

struct agent_objcache {
    char           *root;             /* <workdir>/objects */
    int64_t         max_bytes;
    pthread_mutex_t mu;               /* guards everything below */
    oc_ent         *ents;
    size_t          n, cap;
    int64_t         bytes, clock;
    unsigned        tmpseq;
    uint64_t        version;          /* bumped when objects come or go */
};

/* ---------- files ---------- */

int agent_objcache_hash_file(const char *path, char hex[65], int64_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? HF_ENOTFOUND : hf_err_from_errno(errno);
    }
    int rc = hf_sha256_fd(fd, -1, hex, size);
    if (rc) snprintf(err, errlen, "reading %s: %s", path, hf_strerror(rc));
    close(fd);
    return rc;
}

static int mkdir1(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : hf_err_from_errno(errno);
}

/* The parent directory of path (a copy in out). */
static void dir_of(const char *path, char *out, size_t len)
{
    snprintf(out, len, "%s", path);
    char *s = strrchr(out, '/');
    if (s && s != out) *s = 0;
    else snprintf(out, len, "%s", s ? "/" : ".");
}

int agent_objcache_copy_file(const char *src, const char *dst)
{
    char tmp[PATH_MAX + 32], dir[PATH_MAX], h[65];
    int64_t n = 0;
    int in = -1, out = -1, rc;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d.%lld", dst, (int)getpid(), (long long)hf_mono_us()) >= (int)sizeof tmp)
        return HF_EINVAL;
    if ((in = open(src, O_RDONLY | O_CLOEXEC)) < 0) return errno == ENOENT ? HF_ENOTFOUND : hf_err_from_errno(errno);
    if ((out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) { rc = hf_err_from_errno(errno); goto end; }
    if ((rc = hf_sha256_fd(in, out, h, &n))) goto end;
    if (fsync(out) != 0) { rc = hf_err_from_errno(errno); goto end; }
    close(out);
    out = -1;
    if (rename(tmp, dst) != 0) { rc = hf_err_from_errno(errno); goto end; }
    dir_of(dst, dir, sizeof dir);
    hf_file_fsync_dir(dir);
end:
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (rc) unlink(tmp);
    return rc;
}

/* ---------- the index ---------- */

void agent_objcache_path(const agent_objcache *oc, const char *sha, char *out, size_t len)
{
    snprintf(out, len, "%s/%.2s/%s", oc->root, sha, sha);
}

/* Under mu. */
static oc_ent *find(agent_objcache *oc, const char *sha)
{
    for (size_t i = 0; i < oc->n; i++)
        if (strcmp(oc->ents[i].sha, sha) == 0) return &oc->ents[i];
    return NULL;
}

/* Enter an object (under mu). RET the entry or NULL (OOM). */
static oc_ent *index_add(agent_objcache *oc, const char *sha, int64_t size, int64_t used)
{
    oc_ent *e = find(oc, sha);
    if (e) return e;
    if (oc->n == oc->cap) {
        size_t cap = oc->cap ? oc->cap * 2 : 64;
        oc_ent *p = realloc(oc->ents, cap * sizeof *p);
        if (!p) return NULL;
        oc->ents = p;
        oc->cap = cap;
    }
    e = &oc->ents[oc->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->sha, sizeof e->sha, "%s", sha);
    e->size = size;
    e->used = used;
    oc->bytes += size;
    oc->version++;
    return e;
}

/* Remove least recently used, unpinned objects other than keep until the
 * cache is within its bound (under mu). */
static void evict(agent_objcache *oc, const char *keep)
{
    char path[PATH_MAX];
    while (oc->max_bytes > 0 && oc->bytes > oc->max_bytes) {
        size_t best = oc->n;
        for (size_t i = 0; i < oc->n; i++)
            if (!oc->ents[i].pins && (!keep || strcmp(oc->ents[i].sha, keep)) &&
                (best == oc->n || oc->ents[i].used < oc->ents[best].used))
                best = i;
        if (best == oc->n) return;           /* everything left is in use */
        agent_objcache_path(oc, oc->ents[best].sha, path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT)
            hf_warn("object cache: cannot remove %s: %s", path, strerror(errno));
        else hf_debug("object cache: evicted %s (%lld bytes)", oc->ents[best].sha, (long long)oc->ents[best].size);
        oc->bytes -= oc->ents[best].size;
        oc->ents[best] = oc->ents[--oc->n];
        oc->version++;
    }
}

int agent_objcache_touch(agent_objcache *oc, const char *sha, int pin, int64_t *size)
{
    char path[PATH_MAX];
    struct stat sb;
    int ok = 0;
    pthread_mutex_lock(&oc->mu);
    oc_ent *e = find(oc, sha);
    if (e) {
        agent_objcache_path(oc, sha, path, sizeof path);
        if (stat(path, &sb) != 0 || sb.st_size != e->size) {    /* removed behind our back */
            oc->bytes -= e->size;
            *e = oc->ents[--oc->n];
            oc->version++;
        } else {
            e->used = ++oc->clock;
            e->pins += pin;
            if (size) *size = e->size;
            utimensat(AT_FDCWD, path, NULL, 0);
            ok = 1;
        }
    }
    pthread_mutex_unlock(&oc->mu);
    return ok;
}

void agent_objcache_unpin(agent_objcache *oc, const char *sha)
{
    pthread_mutex_lock(&oc->mu);
    oc_ent *e = find(oc, sha);
    if (e && e->pins > 0) e->pins--;
    pthread_mutex_unlock(&oc->mu);
}

void agent_objcache_tmp_path(agent_objcache *oc, const char *tag, char *out, size_t len)
{
    pthread_mutex_lock(&oc->mu);
    unsigned seq = ++oc->tmpseq;
    pthread_mutex_unlock(&oc->mu);
    snprintf(out, len, "%s/tmp/%s-%d-%u", oc->root, tag, (int)getpid(), seq);
}

int agent_objcache_publish(agent_objcache *oc, const char *tmp, const char *sha, int64_t size, int pin)
{
    char dir[PATH_MAX], obj[PATH_MAX];
    int rc;
    snprintf(dir, sizeof dir, "%s/%.2s", oc->root, sha);
    agent_objcache_path(oc, sha, obj, sizeof obj);
    if ((rc = mkdir1(dir)) == 0 && rename(tmp, obj) != 0) rc = hf_err_from_errno(errno);
    if (rc) { unlink(tmp); return rc; }
    hf_file_fsync_dir(dir);
    pthread_mutex_lock(&oc->mu);
    oc_ent *e = index_add(oc, sha, size, 0);
    if (!e) rc = HF_ENOMEM;
    else {
        e->used = ++oc->clock;
        e->pins += pin;
        evict(oc, sha);
    }
    pthread_mutex_unlock(&oc->mu);
    return rc;
}

/* ---------- bringing files in, placing them out ---------- */

/* tmp holds a candidate for the object: hash it and publish it when it is
 * the expected one (want NULL: whatever it is). */
static int verify_publish(agent_objcache *oc, const char *tmp, const char *want, int64_t want_size, int pin,
                          char hex[65], int64_t *size, char *err, size_t errlen)
{
    char h[65];
    int64_t n = 0;
    int rc = agent_objcache_hash_file(tmp, h, &n, err, errlen);
    if (rc) { unlink(tmp); return rc; }
    if (want && (strcmp(h, want) != 0 || (want_size >= 0 && n != want_size))) {
        snprintf(err, errlen, "object %s: got %lld bytes with SHA-256 %s (expected %lld bytes)", want, (long long)n, h,
                 (long long)want_size);
        unlink(tmp);
        return HF_ECORRUPT;
    }
    if ((rc = agent_objcache_publish(oc, tmp, h, n, pin))) {
        snprintf(err, errlen, "object cache: storing %s: %s", h, hf_strerror(rc));
        return rc;
    }
    if (hex) memcpy(hex, h, 65);
    if (size) *size = n;
    return 0;
}

int agent_objcache_ingest(agent_objcache *oc, const char *src, const char *want, int64_t want_size, int pin,
                          char hex[65], int64_t *size, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    agent_objcache_tmp_path(oc, "in", tmp, sizeof tmp);
    if (link(src, tmp) != 0) {
        if (errno == ENOENT) {
            snprintf(err, errlen, "%s: %s", src, strerror(errno));
            return HF_ENOTFOUND;
        }
        int rc = agent_objcache_copy_file(src, tmp);
        if (rc) {
            snprintf(err, errlen, "copying %s into the object cache: %s", src, hf_strerror(rc));
            return rc;
        }
    }
    return verify_publish(oc, tmp, want, want_size, pin, hex, size, err, errlen);
}

int agent_objcache_place(agent_objcache *oc, const char *sha, const char *dest, char *err, size_t errlen)
{
    char obj[PATH_MAX], tmp[PATH_MAX + 64], dir[PATH_MAX];
    int rc = 0;
    agent_objcache_path(oc, sha, obj, sizeof obj);
    pthread_mutex_lock(&oc->mu);
    unsigned seq = ++oc->tmpseq;
    pthread_mutex_unlock(&oc->mu);
    snprintf(tmp, sizeof tmp, "%s.ln.%d.%u", dest, (int)getpid(), seq);
    if (link(obj, tmp) == 0) {
        if (rename(tmp, dest) != 0) {
            rc = hf_err_from_errno(errno);
            unlink(tmp);
        } else {
            dir_of(dest, dir, sizeof dir);
            hf_file_fsync_dir(dir);
        }
    } else {
        rc = agent_objcache_copy_file(obj, dest);
    }
    if (rc) snprintf(err, errlen, "placing object %.12s at %s: %s", sha, dest, hf_strerror(rc));
    return rc;
}

/* ---------- open, close, views ---------- */

/* Empty tmp/ (everything but . and ..: hf_xfer's ".NAME.part-*" too). */
static int empty_tmp(agent_objcache *oc)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tmp", oc->root);
    DIR *d = opendir(path);
    if (!d) return hf_err_from_errno(errno);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
    return 0;
}

/* Index the files of one ab/ directory. */
static void scan_sub(agent_objcache *oc, DIR *d, const char *name)
{
    int sfd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *sub = sfd >= 0 ? fdopendir(sfd) : NULL;
    struct dirent *o;
    struct stat sb;
    if (!sub) {
        if (sfd >= 0) close(sfd);
        return;
    }
    while ((o = readdir(sub)) != NULL)
        if (hf_sha256_hex_valid(o->d_name) && fstatat(dirfd(sub), o->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(sb.st_mode))
            index_add(oc, o->d_name, sb.st_size, (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000);
    closedir(sub);
}

/* Index ab/<hash> files, oldest mtime first; remove tmp/ leftovers. */
static int scan(agent_objcache *oc)
{
    int rc = empty_tmp(oc);
    if (rc) return rc;
    DIR *d = opendir(oc->root);
    if (!d) return hf_err_from_errno(errno);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strlen(de->d_name) == 2 && de->d_name[0] != '.') scan_sub(oc, d, de->d_name);
    closedir(d);
    /* re-number uses 1..n in mtime order so later uses sort after them */
    for (size_t i = 0; i < oc->n; i++) {
        int64_t rank = 1;
        for (size_t j = 0; j < oc->n; j++)
            if (oc->ents[j].used < oc->ents[i].used || (oc->ents[j].used == oc->ents[i].used && j < i)) rank++;
        oc->ents[i].pins = (int)rank;     /* temporary: the rank */
    }
    for (size_t i = 0; i < oc->n; i++) {
        oc->ents[i].used = oc->ents[i].pins;
        oc->ents[i].pins = 0;
    }
    oc->clock = (int64_t)oc->n;
    evict(oc, NULL);
    return 0;
}

int agent_objcache_open(const char *workdir, int64_t max_bytes, agent_objcache **out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    int rc = HF_ENOMEM;
    *out = NULL;
    agent_objcache *oc = calloc(1, sizeof *oc);
    if (!oc) goto oom;
    pthread_mutex_init(&oc->mu, NULL);
    oc->max_bytes = max_bytes;
    if (asprintf(&oc->root, "%s/objects", workdir) < 0) { oc->root = NULL; goto oom; }
    const char *subs[] = {"", "/tmp"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s%s", oc->root, subs[i]);
        if ((rc = mkdir1(path))) {
            snprintf(err, errlen, "object cache: cannot create %s: %s", path, hf_strerror(rc));
            goto end;
        }
    }
    if ((rc = scan(oc))) {
        snprintf(err, errlen, "object cache: cannot read %s: %s", oc->root, hf_strerror(rc));
        goto end;
    }
    *out = oc;
    return 0;
oom:
    snprintf(err, errlen, "object cache: out of memory");
    rc = HF_ENOMEM;
end:
    agent_objcache_close(oc);
    return rc;
}

void agent_objcache_close(agent_objcache *oc)
{
    if (!oc) return;
    pthread_mutex_destroy(&oc->mu);
    free(oc->root);
    free(oc->ents);
    free(oc);
}

uint64_t agent_objcache_version(agent_objcache *oc)
{
    pthread_mutex_lock(&oc->mu);
    uint64_t v = oc->version;
    pthread_mutex_unlock(&oc->mu);
    return v;
}

json_t *agent_objcache_list(agent_objcache *oc, size_t max)
{
    json_t *arr = json_array();
    if (!arr) return NULL;
    pthread_mutex_lock(&oc->mu);
    /* newest first: repeatedly the largest 'used' below the last one */
    int64_t below = INT64_MAX;
    for (size_t k = 0; k < max && k < oc->n; k++) {
        size_t best = oc->n;
        for (size_t i = 0; i < oc->n; i++)
            if (oc->ents[i].used < below && (best == oc->n || oc->ents[i].used > oc->ents[best].used)) best = i;
        if (best == oc->n) break;
        below = oc->ents[best].used;
        json_array_append_new(arr, json_string(oc->ents[best].sha));
    }
    pthread_mutex_unlock(&oc->mu);
    return arr;
}

void agent_objcache_stats(agent_objcache *oc, int64_t *objects, int64_t *bytes)
{
    pthread_mutex_lock(&oc->mu);
    *objects = (int64_t)oc->n;
    *bytes = oc->bytes;
    pthread_mutex_unlock(&oc->mu);
}

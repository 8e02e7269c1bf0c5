/*
 * agent_objects.c — the agent's object cache and transfers (see
 * agent_objects.h).
 *
 * The index (ao->ents, under ao->mu) mirrors the files under ab/: one
 * entry per object with its size, its last use (a counter, seeded from the
 * files' mtimes at open) and a pin count. Files are created outside the
 * lock (temp file, hash, fsync, rename) and entered into the index after
 * the rename; eviction unlinks under the lock. A transfer pins the entry
 * it reads so eviction skips it.
 */
#include "agent_objects.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_sha256.h"
#include "hf_time.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERR_BODY   4096               /* bytes of an error answer kept */

typedef struct ao_ent {
    char    sha[AGENT_OBJECTS_HASH_LEN + 1];
    int64_t size;
    int64_t used;                     /* larger = more recent */
    int     pins;
} ao_ent;

struct agent_objects {
    char           *root;             /* <workdir>/objects */
    char           *url;              /* scheduler base URL, no trailing '/' */
    char           *auth;             /* "Authorization: Bearer ..." or NULL */
    char           *cafile;
    int64_t         max_bytes;
    pthread_mutex_t mu;               /* guards everything below */
    char           *shared;           /* shared_fs store, NULL = scheduler mode */
    ao_ent         *ents;
    size_t          n, cap;
    int64_t         bytes, clock;
    unsigned        tmpseq;
    int64_t         agent_id;
    uint64_t        version;          /* bumped when objects come or go */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* ---------- hashing and files ---------- */

static int valid_hash(const char *s) { return hf_sha256_hex_valid(s); }

static void hash_hex(gnutls_hash_hd_t h, char hex[65])
{
    unsigned char dig[32];
    gnutls_hash_deinit(h, dig);
    hf_sha256_hex(dig, hex);
}

int agent_objects_hash_file(const char *path, char hex[65], int64_t *size, char *err, size_t errlen)
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

/* Copy src to a temp file beside dst, fsync, rename over dst, fsync the
 * directory; when hex is given, hash while copying (OUT hex, *size).
 * RET 0 or an HF_E* code (nothing left behind). */
static int copy_replace(const char *src, const char *dst, char hex[65], int64_t *size)
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
    if (hex) memcpy(hex, h, 65);
    if (size) *size = n;
end:
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (rc) unlink(tmp);
    return rc;
}

/* ---------- the index ---------- */

static void obj_path(const agent_objects *ao, const char *sha, char *out, size_t len)
{
    snprintf(out, len, "%s/%.2s/%s", ao->root, sha, sha);
}

/* Under mu. */
static ao_ent *find(agent_objects *ao, const char *sha)
{
    for (size_t i = 0; i < ao->n; i++)
        if (strcmp(ao->ents[i].sha, sha) == 0) return &ao->ents[i];
    return NULL;
}

/* Enter an object (under mu). RET the entry or NULL (OOM). */
static ao_ent *index_add(agent_objects *ao, const char *sha, int64_t size, int64_t used)
{
    ao_ent *e = find(ao, sha);
    if (e) return e;
    if (ao->n == ao->cap) {
        size_t cap = ao->cap ? ao->cap * 2 : 64;
        ao_ent *p = realloc(ao->ents, cap * sizeof *p);
        if (!p) return NULL;
        ao->ents = p;
        ao->cap = cap;
    }
    e = &ao->ents[ao->n++];
    memset(e, 0, sizeof *e);
    memcpy(e->sha, sha, sizeof e->sha);
    e->size = size;
    e->used = used;
    ao->bytes += size;
    ao->version++;
    return e;
}

/* Remove least recently used, unpinned objects other than keep until the
 * cache is within its bound (under mu). */
static void evict(agent_objects *ao, const char *keep)
{
    char path[PATH_MAX];
    while (ao->max_bytes > 0 && ao->bytes > ao->max_bytes) {
        size_t best = ao->n;
        for (size_t i = 0; i < ao->n; i++)
            if (!ao->ents[i].pins && (!keep || strcmp(ao->ents[i].sha, keep)) &&
                (best == ao->n || ao->ents[i].used < ao->ents[best].used))
                best = i;
        if (best == ao->n) return;           /* everything left is in use */
        obj_path(ao, ao->ents[best].sha, path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT)
            hf_warn("object cache: cannot remove %s: %s", path, strerror(errno));
        else hf_debug("object cache: evicted %s (%lld bytes)", ao->ents[best].sha, (long long)ao->ents[best].size);
        ao->bytes -= ao->ents[best].size;
        ao->ents[best] = ao->ents[--ao->n];
        ao->version++;
    }
}

/* Mark used (and persist the order in the file's mtime); pin if asked.
 * RET 1 when the object is indexed and its file is there. Under mu. */
static int touch_locked(agent_objects *ao, const char *sha, int pin)
{
    char path[PATH_MAX];
    struct stat sb;
    ao_ent *e = find(ao, sha);
    if (!e) return 0;
    obj_path(ao, sha, path, sizeof path);
    if (stat(path, &sb) != 0 || sb.st_size != e->size) {    /* removed behind our back */
        ao->bytes -= e->size;
        *e = ao->ents[--ao->n];
        ao->version++;
        return 0;
    }
    e->used = ++ao->clock;
    e->pins += pin;
    utimensat(AT_FDCWD, path, NULL, 0);
    return 1;
}

static void unpin(agent_objects *ao, const char *sha)
{
    pthread_mutex_lock(&ao->mu);
    ao_ent *e = find(ao, sha);
    if (e && e->pins > 0) e->pins--;
    pthread_mutex_unlock(&ao->mu);
}

/* A fresh temp path under tmp/ (name only; the caller creates it). */
static void tmp_path(agent_objects *ao, const char *tag, char *out, size_t len)
{
    pthread_mutex_lock(&ao->mu);
    unsigned seq = ++ao->tmpseq;
    pthread_mutex_unlock(&ao->mu);
    snprintf(out, len, "%s/tmp/%s-%d-%u", ao->root, tag, (int)getpid(), seq);
}

/* The verified file tmp (size bytes, hash sha) becomes the object sha;
 * pin: leave it pinned. RET 0 or an HF_E* code (tmp is gone either way). */
static int publish(agent_objects *ao, const char *tmp, const char *sha, int64_t size, int pin)
{
    char dir[PATH_MAX], obj[PATH_MAX];
    int rc;
    snprintf(dir, sizeof dir, "%s/%.2s", ao->root, sha);
    obj_path(ao, sha, obj, sizeof obj);
    if ((rc = mkdir1(dir)) == 0 && rename(tmp, obj) != 0) rc = hf_err_from_errno(errno);
    if (rc) { unlink(tmp); return rc; }
    hf_file_fsync_dir(dir);
    pthread_mutex_lock(&ao->mu);
    ao_ent *e = index_add(ao, sha, size, 0);
    if (!e) rc = HF_ENOMEM;
    else {
        e->used = ++ao->clock;
        e->pins += pin;
        evict(ao, sha);
    }
    pthread_mutex_unlock(&ao->mu);
    return rc;
}

/* Index ab/<hash> files, oldest mtime first; remove tmp/ leftovers. */
static int scan(agent_objects *ao)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tmp", ao->root);
    DIR *d = opendir(path);
    if (!d) return hf_err_from_errno(errno);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.') unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
    if (!(d = opendir(ao->root))) return hf_err_from_errno(errno);
    while ((de = readdir(d)) != NULL) {
        if (strlen(de->d_name) != 2 || de->d_name[0] == '.') continue;
        int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *sub = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!sub) { if (sfd >= 0) close(sfd); continue; }
        struct dirent *o;
        struct stat sb;
        while ((o = readdir(sub)) != NULL)
            if (valid_hash(o->d_name) && fstatat(dirfd(sub), o->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(sb.st_mode))
                index_add(ao, o->d_name, sb.st_size, (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000);
        closedir(sub);
    }
    closedir(d);
    /* re-number uses 1..n in mtime order so later uses sort after them */
    for (size_t i = 0; i < ao->n; i++) {
        int64_t rank = 1;
        for (size_t j = 0; j < ao->n; j++)
            if (ao->ents[j].used < ao->ents[i].used || (ao->ents[j].used == ao->ents[i].used && j < i)) rank++;
        ao->ents[i].pins = (int)rank;     /* temporary: the rank */
    }
    for (size_t i = 0; i < ao->n; i++) {
        ao->ents[i].used = ao->ents[i].pins;
        ao->ents[i].pins = 0;
    }
    ao->clock = (int64_t)ao->n;
    evict(ao, NULL);
    return 0;
}

/* ---------- open and close ---------- */

int agent_objects_open(const char *workdir, const char *sched_url, const char *token, int64_t cache_max_bytes,
                       agent_objects **out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    int rc = HF_ENOMEM;
    *out = NULL;
    pthread_once(&curl_once, curl_init_once);
    if (!workdir || !*workdir || strlen(workdir) > PATH_MAX - 200 || !sched_url) {
        snprintf(err, errlen, "object cache: bad work directory or scheduler URL");
        return HF_EINVAL;
    }
    agent_objects *ao = calloc(1, sizeof *ao);
    if (!ao) goto oom;
    pthread_mutex_init(&ao->mu, NULL);
    ao->max_bytes = cache_max_bytes;
    size_t ul = strlen(sched_url);
    while (ul && sched_url[ul - 1] == '/') ul--;
    if (asprintf(&ao->root, "%s/objects", workdir) < 0) { ao->root = NULL; goto oom; }
    if (!(ao->url = strndup(sched_url, ul))) goto oom;
    if (token && *token && asprintf(&ao->auth, "Authorization: Bearer %s", token) < 0) { ao->auth = NULL; goto oom; }
    const char *subs[] = {"", "/tmp"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s%s", ao->root, subs[i]);
        if ((rc = mkdir1(path))) {
            snprintf(err, errlen, "object cache: cannot create %s: %s", path, hf_strerror(rc));
            goto end;
        }
    }
    if ((rc = scan(ao))) {
        snprintf(err, errlen, "object cache: cannot read %s: %s", ao->root, hf_strerror(rc));
        goto end;
    }
    *out = ao;
    return 0;
oom:
    snprintf(err, errlen, "object cache: out of memory");
    rc = HF_ENOMEM;
end:
    agent_objects_close(ao);
    return rc;
}

void agent_objects_close(agent_objects *ao)
{
    if (!ao) return;
    pthread_mutex_destroy(&ao->mu);
    free(ao->root);
    free(ao->url);
    if (ao->auth) memset(ao->auth, 0, strlen(ao->auth));
    free(ao->auth);
    free(ao->cafile);
    free(ao->shared);
    free(ao->ents);
    free(ao);
}

void agent_objects_set_cafile(agent_objects *ao, const char *cafile)
{
    free(ao->cafile);
    ao->cafile = cafile && *cafile ? strdup(cafile) : NULL;
}

int agent_objects_set_shared(agent_objects *ao, const char *dir)
{
    char *d = NULL;
    if (dir && *dir && !(d = strdup(dir))) return HF_ENOMEM;
    pthread_mutex_lock(&ao->mu);
    free(ao->shared);
    ao->shared = d;
    pthread_mutex_unlock(&ao->mu);
    return 0;
}

/* A copy of the shared_fs directory, or NULL (scheduler mode). */
static char *shared_dir(agent_objects *ao)
{
    pthread_mutex_lock(&ao->mu);
    char *d = ao->shared ? strdup(ao->shared) : NULL;
    pthread_mutex_unlock(&ao->mu);
    return d;
}

void agent_objects_set_agent(agent_objects *ao, int64_t agent_id)
{
    pthread_mutex_lock(&ao->mu);
    ao->agent_id = agent_id;
    pthread_mutex_unlock(&ao->mu);
}

uint64_t agent_objects_version(agent_objects *ao)
{
    pthread_mutex_lock(&ao->mu);
    uint64_t v = ao->version;
    pthread_mutex_unlock(&ao->mu);
    return v;
}

int agent_objects_has(agent_objects *ao, const char *sha256)
{
    if (!valid_hash(sha256)) return 0;
    pthread_mutex_lock(&ao->mu);
    int ok = touch_locked(ao, sha256, 0);
    pthread_mutex_unlock(&ao->mu);
    return ok;
}

json_t *agent_objects_list(agent_objects *ao, size_t max)
{
    json_t *arr = json_array();
    if (!arr) return NULL;
    pthread_mutex_lock(&ao->mu);
    /* newest first: repeatedly the largest 'used' below the last one */
    int64_t below = INT64_MAX;
    for (size_t k = 0; k < max && k < ao->n; k++) {
        size_t best = ao->n;
        for (size_t i = 0; i < ao->n; i++)
            if (ao->ents[i].used < below && (best == ao->n || ao->ents[i].used > ao->ents[best].used)) best = i;
        if (best == ao->n) break;
        below = ao->ents[best].used;
        json_array_append_new(arr, json_string(ao->ents[best].sha));
    }
    pthread_mutex_unlock(&ao->mu);
    return arr;
}

void agent_objects_stats(agent_objects *ao, int64_t *objects, int64_t *bytes)
{
    pthread_mutex_lock(&ao->mu);
    *objects = (int64_t)ao->n;
    *bytes = ao->bytes;
    pthread_mutex_unlock(&ao->mu);
}

/* ---------- into the cache ---------- */

/* tmp holds a candidate for the object: hash it (when linked) and publish
 * it when it is the expected one (want NULL: whatever it is). */
static int verify_publish(agent_objects *ao, const char *tmp, const char *want, int64_t want_size, char hex[65],
                          int64_t *size, int pin, char *err, size_t errlen)
{
    char h[65];
    int64_t n = 0;
    int rc = agent_objects_hash_file(tmp, h, &n, err, errlen);
    if (rc) { unlink(tmp); return rc; }
    if (want && (strcmp(h, want) != 0 || (want_size >= 0 && n != want_size))) {
        snprintf(err, errlen, "object %s: got %lld bytes with SHA-256 %s (expected %lld bytes)", want, (long long)n, h,
                 (long long)want_size);
        unlink(tmp);
        return HF_ECORRUPT;
    }
    if ((rc = publish(ao, tmp, h, n, pin))) {
        snprintf(err, errlen, "object cache: storing %s: %s", h, hf_strerror(rc));
        return rc;
    }
    if (hex) memcpy(hex, h, 65);
    if (size) *size = n;
    return 0;
}

/* Link (same filesystem) else copy src to a fresh temp file under tmp/.
 * RET 0 with the temp path in tmp. */
static int ingest_tmp(agent_objects *ao, const char *src, char *tmp, size_t len, char *err, size_t errlen)
{
    tmp_path(ao, "in", tmp, len);
    if (link(src, tmp) == 0) return 0;
    if (errno == ENOENT) {
        snprintf(err, errlen, "%s: %s", src, strerror(errno));
        return HF_ENOTFOUND;
    }
    int rc = copy_replace(src, tmp, NULL, NULL);
    if (rc) snprintf(err, errlen, "copying %s into the object cache: %s", src, hf_strerror(rc));
    return rc;
}

int agent_objects_add(agent_objects *ao, const char *path, char hex[65], int64_t *size, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    int rc = ingest_tmp(ao, path, tmp, sizeof tmp, err, errlen);
    if (rc) return rc;
    return verify_publish(ao, tmp, NULL, -1, hex, size, 0, err, errlen);
}

/* ---------- HTTP ---------- */

typedef struct xfer {
    int               fd;             /* body source (upload) or sink (download) */
    gnutls_hash_hd_t  h;              /* download: hash of what was written */
    int64_t           n, limit;       /* bytes moved; the most accepted */
    int               ioerr;          /* HF_E* of a failed write */
    long              status;
    CURL             *curl;
    char              ebuf[ERR_BODY]; /* an answer that is not the body */
    size_t            elen;
} xfer;

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    for (;;) {
        ssize_t r = read(x->fd, buf, size * n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { x->ioerr = hf_err_from_errno(errno); return CURL_READFUNC_ABORT; }
        x->n += r;
        return (size_t)r;
    }
}

/* Keep the start of a non-body answer (error JSON) for the message. */
static size_t keep_err(xfer *x, const char *p, size_t n)
{
    size_t k = n < sizeof x->ebuf - 1 - x->elen ? n : sizeof x->ebuf - 1 - x->elen;
    memcpy(x->ebuf + x->elen, p, k);
    x->elen += k;
    x->ebuf[x->elen] = 0;
    return n;
}

static size_t on_answer(char *p, size_t size, size_t n, void *ud) { return keep_err(ud, p, size * n); }

static size_t on_download(char *p, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if (!x->status) curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status != 200) return keep_err(x, p, len);
    if (x->n + (int64_t)len > x->limit) { x->ioerr = HF_ECORRUPT; return 0; }
    if ((x->ioerr = hf_file_write_all(x->fd, p, len))) return 0;
    gnutls_hash(x->h, p, len);
    x->n += (int64_t)len;
    return len;
}

/* A handle with the common options, for method on url. */
static CURL *handle(agent_objects *ao, const char *url, struct curl_slist **hdr, xfer *x)
{
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    if (ao->auth) *hdr = curl_slist_append(*hdr, ao->auth);
    *hdr = curl_slist_append(*hdr, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    /* no total timeout (a large object takes what it takes), but a stall
     * below 1 KiB/s for 30 s ends the transfer */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
    if (ao->cafile) curl_easy_setopt(c, CURLOPT_CAINFO, ao->cafile);
    x->curl = c;
    return c;
}

/* Map a transfer's outcome to HF_E*, with a message. */
static int outcome(CURLcode cc, xfer *x, const char *what, char *err, size_t errlen)
{
    if (x->ioerr && (cc == CURLE_WRITE_ERROR || cc == CURLE_ABORTED_BY_CALLBACK || cc == CURLE_READ_ERROR)) {
        snprintf(err, errlen, "%s: %s", what, x->ioerr == HF_ECORRUPT ? "more bytes than the object's size"
                                                                      : hf_strerror(x->ioerr));
        return x->ioerr;
    }
    /* A server that refuses an upload may answer before it has read the
     * body and close: curl then reports a send (or receive) error although
     * a final status arrived; that status is the answer. */
    if ((cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR) && x->status >= 400) cc = CURLE_OK;
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", what, curl_easy_strerror(cc));
        return cc == CURLE_OPERATION_TIMEDOUT ? HF_ETIMEOUT : HF_ECONN;
    }
    if (x->status >= 200 && x->status < 300) return 0;
    json_t *j = json_loads(x->ebuf, 0, NULL);
    const char *msg = json_string_value(json_object_get(j, "error"));
    snprintf(err, errlen, "%s: HTTP %ld%s%s", what, x->status, msg ? ": " : "", msg ? msg : "");
    json_decref(j);
    switch (x->status) {
    case 400: return HF_EINVAL;
    case 401: case 403: return HF_EAUTH;
    case 404: return HF_ENOTFOUND;
    case 409: case 422: return HF_ECORRUPT;
    case 413: return HF_ETOOBIG;
    case 507: return HF_ENOSPC;
    default: return HF_EHTTP;
    }
}

/* GET /api/v1/objects/{sha} into a temp file; verified; published pinned. */
static int download(agent_objects *ao, const char *sha, int64_t size, char *err, size_t errlen)
{
    char url[PATH_MAX], tmp[PATH_MAX], what[160], hex[65];
    struct curl_slist *hdr = NULL;
    xfer x = {.fd = -1, .limit = size};
    int rc;
    snprintf(url, sizeof url, "%s/api/v1/objects/%s", ao->url, sha);
    snprintf(what, sizeof what, "fetching object %.12s from the scheduler", sha);
    tmp_path(ao, "dl", tmp, sizeof tmp);
    if ((x.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
        rc = hf_err_from_errno(errno);
        snprintf(err, errlen, "object cache: cannot create %s: %s", tmp, strerror(errno));
        return rc;
    }
    if (gnutls_hash_init(&x.h, GNUTLS_DIG_SHA256) != 0) { close(x.fd); unlink(tmp); return HF_ENOMEM; }
    CURL *c = handle(ao, url, &hdr, &x);
    if (!c) { rc = HF_ENOMEM; hash_hex(x.h, hex); goto end; }
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_download);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    CURLcode cc = curl_easy_perform(c);
    if (!x.status) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &x.status);
    hash_hex(x.h, hex);
    if ((rc = outcome(cc, &x, what, err, errlen))) goto end;
    if (x.n != size || strcmp(hex, sha) != 0) {
        snprintf(err, errlen, "%s: got %lld bytes with SHA-256 %s, expected %lld bytes", what, (long long)x.n, hex,
                 (long long)size);
        rc = HF_ECORRUPT;
        goto end;
    }
    if (fsync(x.fd) != 0) { rc = hf_err_from_errno(errno); snprintf(err, errlen, "%s: fsync: %s", what, strerror(errno)); goto end; }
    close(x.fd);
    x.fd = -1;
    if ((rc = publish(ao, tmp, sha, size, 1))) snprintf(err, errlen, "%s: %s", what, hf_strerror(rc));
end:
    if (x.fd >= 0) { close(x.fd); unlink(tmp); }
    curl_slist_free_all(hdr);
    if (c) curl_easy_cleanup(c);
    return rc;
}

/* Take sha from the shared store: linked or copied to tmp/, verified,
 * published pinned. */
static int from_shared(agent_objects *ao, const char *shared, const char *sha, int64_t size, char *err, size_t errlen)
{
    char src[PATH_MAX], tmp[PATH_MAX];
    snprintf(src, sizeof src, "%s/objects/%.2s/%s", shared, sha, sha);
    int rc = ingest_tmp(ao, src, tmp, sizeof tmp, err, errlen);
    if (rc) return rc;
    return verify_publish(ao, tmp, sha, size, NULL, NULL, 1, err, errlen);
}

int agent_objects_get(agent_objects *ao, const char *sha256, int64_t size, const char *dest_path, char *err,
                      size_t errlen)
{
    char obj[PATH_MAX], tmp[PATH_MAX + 64], dir[PATH_MAX];
    int rc = 0;
    if (!valid_hash(sha256) || size < 0) {
        snprintf(err, errlen, "not a SHA-256 object name: %.80s", sha256 ? sha256 : "(null)");
        return HF_EINVAL;
    }
    pthread_mutex_lock(&ao->mu);
    int cached = touch_locked(ao, sha256, 1);
    ao_ent *e = cached ? find(ao, sha256) : NULL;
    if (e && e->size != size) {
        e->pins--;
        pthread_mutex_unlock(&ao->mu);
        snprintf(err, errlen, "object %s: cached with %lld bytes, expected %lld", sha256, (long long)e->size, (long long)size);
        return HF_ECORRUPT;
    }
    pthread_mutex_unlock(&ao->mu);
    if (!cached) {
        char *shared = shared_dir(ao);
        rc = shared ? from_shared(ao, shared, sha256, size, err, errlen) : download(ao, sha256, size, err, errlen);
        free(shared);
        if (rc) return rc;
    }
    /* pinned from here */
    obj_path(ao, sha256, obj, sizeof obj);
    pthread_mutex_lock(&ao->mu);
    unsigned seq = ++ao->tmpseq;
    pthread_mutex_unlock(&ao->mu);
    snprintf(tmp, sizeof tmp, "%s.ln.%d.%u", dest_path, (int)getpid(), seq);
    if (link(obj, tmp) == 0) {
        if (rename(tmp, dest_path) != 0) {
            rc = hf_err_from_errno(errno);
            unlink(tmp);
        } else {
            dir_of(dest_path, dir, sizeof dir);
            hf_file_fsync_dir(dir);
        }
    } else {
        rc = copy_replace(obj, dest_path, NULL, NULL);
    }
    if (rc) snprintf(err, errlen, "placing object %.12s at %s: %s", sha256, dest_path, hf_strerror(rc));
    unpin(ao, sha256);
    return rc;
}

/* ---------- uploads ---------- */

/* shared_fs: copy the cached object into <shared>/objects (unless there),
 * temp + fsync + link (never overwriting an existing object). */
static int put_shared(agent_objects *ao, const char *shared, const char *sha, const char *obj, char *err, size_t errlen)
{
    char dst[PATH_MAX + 80], dir[PATH_MAX], tmp[PATH_MAX + 64];
    struct stat sb;
    int rc;
    snprintf(dir, sizeof dir, "%s/objects/%.2s", shared, sha);
    snprintf(dst, sizeof dst, "%s/%s", dir, sha);
    if (stat(dst, &sb) == 0) return 0;             /* the scheduler verifies it anyway */
    snprintf(tmp, sizeof tmp, "%s/tmp/agent-%.12s-%d-%lld", shared, sha, (int)getpid(), (long long)hf_mono_us());
    (void)ao;
    if ((rc = copy_replace(obj, tmp, NULL, NULL)) == 0 && (rc = mkdir1(dir)) == 0) {
        if (link(tmp, dst) != 0 && errno != EEXIST) rc = hf_err_from_errno(errno);
        else hf_file_fsync_dir(dir);
    }
    unlink(tmp);
    if (rc) snprintf(err, errlen, "writing object %.12s into the shared store %s: %s", sha, shared, hf_strerror(rc));
    return rc;
}

/* POST /api/v1/trials/{id}/checkpoints {sha256,size,step,attempt,name}. */
static int register_shared(agent_objects *ao, const char *sha, int64_t size, int64_t trial_id, int64_t step,
                           int64_t attempt, const char *name, const char *what, char *err, size_t errlen)
{
    char url[PATH_MAX];
    struct curl_slist *hdr = NULL;
    xfer x = {.fd = -1};
    pthread_mutex_lock(&ao->mu);
    int64_t aid = ao->agent_id;
    pthread_mutex_unlock(&ao->mu);
    json_t *b = json_pack("{sssIsIsIsssI}", "sha256", sha, "size", (json_int_t)size, "step", (json_int_t)step,
                          "attempt", (json_int_t)attempt, "name", name ? name : "", "agent_id", (json_int_t)aid);
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body) return HF_ENOMEM;
    snprintf(url, sizeof url, "%s/api/v1/trials/%lld/checkpoints", ao->url, (long long)trial_id);
    CURL *c = handle(ao, url, &hdr, &x);
    int rc = HF_ENOMEM;
    if (c) {
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_answer);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 300000L);   /* the scheduler hashes the file */
        CURLcode cc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &x.status);
        rc = outcome(cc, &x, what, err, errlen);
        curl_easy_cleanup(c);
    }
    curl_slist_free_all(hdr);
    free(body);
    return rc;
}

/* Percent-encode s (a file basename) for a query value. */
static void url_escape(const char *s, char *out, size_t len)
{
    static const char hexd[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("-._~", ch))
            out[o++] = (char)ch;
        else {
            out[o++] = '%';
            out[o++] = hexd[ch >> 4];
            out[o++] = hexd[ch & 15];
        }
    }
    out[o] = 0;
}

int agent_objects_upload(agent_objects *ao, const char *sha256, int64_t trial_id, int64_t step, int64_t attempt,
                         const char *name, char *err, size_t errlen)
{
    char obj[PATH_MAX], url[PATH_MAX + 512], what[160], hdrsha[128], ename[768];
    struct curl_slist *hdr = NULL;
    xfer x = {.fd = -1};
    int64_t size = 0;
    int rc;
    CURL *c = NULL;
    if (!valid_hash(sha256)) {
        snprintf(err, errlen, "not a SHA-256 object name");
        return HF_EINVAL;
    }
    snprintf(what, sizeof what, "uploading checkpoint %.12s of trial %lld", sha256, (long long)trial_id);
    pthread_mutex_lock(&ao->mu);
    int cached = touch_locked(ao, sha256, 1);
    if (cached) size = find(ao, sha256)->size;
    pthread_mutex_unlock(&ao->mu);
    if (!cached) {
        snprintf(err, errlen, "%s: the object is no longer in the cache", what);
        return HF_ENOTFOUND;
    }
    obj_path(ao, sha256, obj, sizeof obj);
    char *shared = shared_dir(ao);
    if (shared) {
        rc = put_shared(ao, shared, sha256, obj, err, errlen);
        if (rc == 0) rc = register_shared(ao, sha256, size, trial_id, step, attempt, name, what, err, errlen);
        free(shared);
        goto end;
    }
    if ((x.fd = open(obj, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = errno == ENOENT ? HF_ENOTFOUND : hf_err_from_errno(errno);
        snprintf(err, errlen, "%s: %s", what, strerror(errno));
        goto end;
    }
    url_escape(name ? name : "", ename, sizeof ename);
    pthread_mutex_lock(&ao->mu);
    int64_t aid = ao->agent_id;
    pthread_mutex_unlock(&ao->mu);
    snprintf(url, sizeof url, "%s/api/v1/trials/%lld/checkpoints?step=%lld&attempt=%lld&agent=%lld%s%s", ao->url,
             (long long)trial_id, (long long)step, (long long)attempt, (long long)aid, ename[0] ? "&name=" : "", ename);
    snprintf(hdrsha, sizeof hdrsha, "X-Hyperfarm-Sha256: %s", sha256);
    if (!(c = handle(ao, url, &hdr, &x))) { rc = HF_ENOMEM; goto end; }
    hdr = curl_slist_append(hdr, hdrsha);
    hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_answer);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &x.status);
    rc = outcome(cc, &x, what, err, errlen);
end:
    if (x.fd >= 0) close(x.fd);
    curl_slist_free_all(hdr);
    if (c) curl_easy_cleanup(c);
    unpin(ao, sha256);
    return rc;
}

/*
 * agent_objects.c — the object cache's face and its transfers to and from
 * the scheduler (see agent_objects.h): the files and their index are
 * agent_objcache.c, the shared_fs mode agent_objshared.c, the bytes move
 * through common/hf_xfer.h (streamed, SHA-256-verified). This file only
 * chooses between the modes, names the URLs and words the errors.
 *
 * Each transfer opens its own hf_http client (one curl handle, closed
 * after the call), so every function is thread-safe: the agent's uploader
 * thread and its worker pool (restores, code contexts) share one
 * agent_objects. The mutex guards the settings that change while the
 * agent runs (the shared directory, the agent id).
 */
#include "agent_objects.h"

#include "agent_objcache.h"
#include "agent_objshared.h"
#include "hf_err.h"
#include "hf_http.h"
#include "hf_sha256.h"
#include "hf_xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XFER_STALL_BYTES 1024         /* a transfer below 1 KiB/s ... */
#define XFER_STALL_S     30           /* ... for 30 s is given up */
#define REGISTER_TIMEOUT_MS 300000    /* shared_fs: the scheduler hashes the file */

struct agent_objects {
    agent_objcache *cache;
    char           *url;              /* scheduler base URL */
    char           *token;            /* NULL = none */
    char           *cafile;
    pthread_mutex_t mu;               /* guards shared and agent_id */
    char           *shared;           /* shared_fs store, NULL = scheduler mode */
    int64_t         agent_id;
};

/* ---------- open, close, settings ---------- */

int agent_objects_open(const char *workdir, const char *sched_url, const char *token, int64_t cache_max_bytes,
                       agent_objects **out, char *err, size_t errlen)
{
    int rc;
    *out = NULL;
    if (!workdir || !*workdir || strlen(workdir) > PATH_MAX - 200 || !sched_url) {
        snprintf(err, errlen, "object cache: bad work directory or scheduler URL");
        return HF_EINVAL;
    }
    agent_objects *ao = calloc(1, sizeof *ao);
    if (!ao) goto oom;
    pthread_mutex_init(&ao->mu, NULL);
    if (!(ao->url = strdup(sched_url)) || (token && *token && !(ao->token = strdup(token)))) goto oom;
    if ((rc = agent_objcache_open(workdir, cache_max_bytes, &ao->cache, err, errlen))) goto end;
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
    agent_objcache_close(ao->cache);
    pthread_mutex_destroy(&ao->mu);
    free(ao->url);
    if (ao->token) memset(ao->token, 0, strlen(ao->token));
    free(ao->token);
    free(ao->cafile);
    free(ao->shared);
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

static int64_t agent_id(agent_objects *ao)
{
    pthread_mutex_lock(&ao->mu);
    int64_t id = ao->agent_id;
    pthread_mutex_unlock(&ao->mu);
    return id;
}

/* ---------- the cache's views ---------- */

int agent_objects_hash_file(const char *path, char hex[65], int64_t *size, char *err, size_t errlen)
{
    return agent_objcache_hash_file(path, hex, size, err, errlen);
}

uint64_t agent_objects_version(agent_objects *ao) { return agent_objcache_version(ao->cache); }
json_t *agent_objects_list(agent_objects *ao, size_t max) { return agent_objcache_list(ao->cache, max); }

void agent_objects_stats(agent_objects *ao, int64_t *objects, int64_t *bytes)
{
    agent_objcache_stats(ao->cache, objects, bytes);
}

int agent_objects_has(agent_objects *ao, const char *sha256)
{
    return hf_sha256_hex_valid(sha256) && agent_objcache_touch(ao->cache, sha256, 0, NULL);
}

int agent_objects_add(agent_objects *ao, const char *path, char hex[65], int64_t *size, char *err, size_t errlen)
{
    return agent_objcache_ingest(ao->cache, path, NULL, -1, 0, hex, size, err, errlen);
}

/* ---------- transfers ---------- */

/* A client of its own for one transfer (NULL on OOM). */
static hf_http *client(agent_objects *ao, long timeout_ms)
{
    hf_http *c = hf_http_new(ao->url, ao->token, timeout_ms, 0);
    if (c && ao->cafile) hf_http_set_cafile(c, ao->cafile);
    return c;
}

/* GET /api/v1/objects/{sha} into tmp/, verified (hf_xfer), published
 * pinned. */
static int download(agent_objects *ao, const char *sha, int64_t size, char *err, size_t errlen)
{
    char path[128], tmp[PATH_MAX], what[160];
    long status = 0;
    snprintf(path, sizeof path, "/api/v1/objects/%s", sha);
    snprintf(what, sizeof what, "fetching object %.12s from the scheduler", sha);
    agent_objcache_tmp_path(ao->cache, "dl", tmp, sizeof tmp);
    hf_http *c = client(ao, 10000);
    if (!c) {
        snprintf(err, errlen, "%s: out of memory", what);
        return HF_ENOMEM;
    }
    hf_xfer_opts o = {.what = what, .stall_bytes = XFER_STALL_BYTES, .stall_s = XFER_STALL_S};
    int rc = hf_xfer_get(c, path, sha, size, tmp, &o, &status, NULL, err, errlen);
    hf_http_free(c);
    if (rc) return rc;
    if ((rc = agent_objcache_publish(ao->cache, tmp, sha, size, 1))) snprintf(err, errlen, "%s: %s", what, hf_strerror(rc));
    return rc;
}

int agent_objects_get(agent_objects *ao, const char *sha256, int64_t size, const char *dest_path, char *err,
                      size_t errlen)
{
    int64_t have = 0;
    int rc = 0;
    if (!hf_sha256_hex_valid(sha256) || size < 0) {
        snprintf(err, errlen, "not a SHA-256 object name: %.80s", sha256 ? sha256 : "(null)");
        return HF_EINVAL;
    }
    int cached = agent_objcache_touch(ao->cache, sha256, 1, &have);
    if (cached && have != size) {
        agent_objcache_unpin(ao->cache, sha256);
        snprintf(err, errlen, "object %s: cached with %lld bytes, expected %lld", sha256, (long long)have, (long long)size);
        return HF_ECORRUPT;
    }
    if (!cached) {
        char *shared = shared_dir(ao);
        rc = shared ? agent_objshared_fetch(ao->cache, shared, sha256, size, err, errlen)
                    : download(ao, sha256, size, err, errlen);
        free(shared);
        if (rc) return rc;
    }
    /* pinned from here */
    rc = agent_objcache_place(ao->cache, sha256, dest_path, err, errlen);
    agent_objcache_unpin(ao->cache, sha256);
    return rc;
}

/* shared_fs: POST /api/v1/trials/{id}/checkpoints {sha256,size,step,attempt,name,agent_id}. */
static int register_shared(agent_objects *ao, const char *sha, int64_t size, int64_t trial_id, int64_t step,
                           int64_t attempt, const char *name, const char *what, char *err, size_t errlen)
{
    char path[96], *answer = NULL;
    size_t alen = 0;
    long status = 0;
    json_t *b = json_pack("{sssIsIsIsssI}", "sha256", sha, "size", (json_int_t)size, "step", (json_int_t)step,
                          "attempt", (json_int_t)attempt, "name", name ? name : "", "agent_id",
                          (json_int_t)agent_id(ao));
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    hf_http *c = body ? client(ao, REGISTER_TIMEOUT_MS) : NULL;
    json_decref(b);
    int rc = HF_ENOMEM;
    snprintf(err, errlen, "%s: out of memory", what);
    snprintf(path, sizeof path, "/api/v1/trials/%lld/checkpoints", (long long)trial_id);
    if (c && (rc = hf_http_request_raw(c, "POST", path, body, &status, &answer, &alen, err, errlen)) == 0)
        rc = hf_xfer_status(status, answer, alen, what, err, errlen);
    else if (c) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "%s: %s", what, tmp);
    }
    hf_http_free(c);
    free(answer);
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

/* PUT /api/v1/trials/{id}/checkpoints?... the cache file obj (hf_xfer). */
static int put_object(agent_objects *ao, const char *sha, const char *obj, int64_t size, int64_t trial_id,
                      int64_t step, int64_t attempt, const char *name, const char *what, char *err, size_t errlen)
{
    char path[1024], ename[768];
    long status = 0;
    int fd = open(obj, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", what, strerror(errno));
        return errno == ENOENT ? HF_ENOTFOUND : hf_err_from_errno(errno);
    }
    url_escape(name ? name : "", ename, sizeof ename);
    snprintf(path, sizeof path, "/api/v1/trials/%lld/checkpoints?step=%lld&attempt=%lld&agent=%lld%s%s",
             (long long)trial_id, (long long)step, (long long)attempt, (long long)agent_id(ao),
             ename[0] ? "&name=" : "", ename);
    hf_http *c = client(ao, 10000);
    int rc = HF_ENOMEM;
    if (!c) snprintf(err, errlen, "%s: out of memory", what);
    else {
        hf_xfer_opts o = {.what = what, .stall_bytes = XFER_STALL_BYTES, .stall_s = XFER_STALL_S};
        rc = hf_xfer_put(c, "PUT", path, fd, size, sha, &o, &status, NULL, err, errlen);
    }
    hf_http_free(c);
    close(fd);
    return rc;
}

int agent_objects_upload(agent_objects *ao, const char *sha256, int64_t trial_id, int64_t step, int64_t attempt,
                         const char *name, char *err, size_t errlen)
{
    char obj[PATH_MAX], what[160];
    int64_t size = 0;
    int rc;
    if (!hf_sha256_hex_valid(sha256)) {
        snprintf(err, errlen, "not a SHA-256 object name");
        return HF_EINVAL;
    }
    snprintf(what, sizeof what, "uploading checkpoint %.12s of trial %lld", sha256, (long long)trial_id);
    if (!agent_objcache_touch(ao->cache, sha256, 1, &size)) {
        snprintf(err, errlen, "%s: the object is no longer in the cache", what);
        return HF_ENOTFOUND;
    }
    agent_objcache_path(ao->cache, sha256, obj, sizeof obj);
    char *shared = shared_dir(ao);
    if (shared) {
        rc = agent_objshared_put(shared, sha256, obj, err, errlen);
        if (rc == 0) rc = register_shared(ao, sha256, size, trial_id, step, attempt, name, what, err, errlen);
        free(shared);
    } else {
        rc = put_object(ao, sha256, obj, size, trial_id, step, attempt, name, what, err, errlen);
    }
    agent_objcache_unpin(ao->cache, sha256);
    return rc;
}

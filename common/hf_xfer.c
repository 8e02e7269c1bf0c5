/*
 * hf_xfer.c — streamed, SHA-256-verified file transfers on hf_http (see
 * hf_xfer.h).
 *
 * A download's sink (dl_sink) runs on libcurl's write callback: it refuses
 * a chunk that would take the file past its expected size (so a server
 * cannot fill the disk), writes it whole and feeds the hash. The checks of
 * the end (size, hash), the fsync and the rename happen after the transfer
 * in one place (dl_finish); every error path unlinks the temp file.
 */
#include "hf_xfer.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int hf_xfer_status(long status, const char *body, size_t len, const char *what, char *err, size_t errlen)
{
    if (status >= 200 && status < 300) return 0;
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "error"));
    snprintf(err, errlen, "%s: HTTP %ld%s%.400s", what, status, msg ? ": " : "", msg ? msg : "");
    json_decref(j);
    switch (status) {
    case 400: return HF_EINVAL;
    case 401: case 403: return HF_EAUTH;
    case 404: case 410: return HF_ENOTFOUND;
    case 409: case 422: return HF_ECORRUPT;
    case 413: return HF_ETOOBIG;
    case 507: return HF_ENOSPC;
    default: return HF_EHTTP;
    }
}

/* The prefix of the messages: o->what, else "METHOD URL". */
static void what_of(hf_http *c, const char *method, const char *path, const hf_xfer_opts *o, char *out, size_t len)
{
    if (o->what) snprintf(out, len, "%s", o->what);
    else snprintf(out, len, "%s %s%.400s", method, hf_http_base(c), path);
}

/* An error of the transfer itself (err from hf_http_stream_run, or a
 * sink's): prefixed with o->what when there is one. */
static void prefix_err(const hf_xfer_opts *o, char *err, size_t errlen)
{
    char tmp[1024];
    if (!o->what || !errlen) return;
    snprintf(tmp, sizeof tmp, "%s", err);
    snprintf(err, errlen, "%s: %s", o->what, tmp);
}

/* The JSON of an answer body, or NULL (also when the caller wants none). */
static void answer_json(const hf_http_stream *s, json_t **resp)
{
    if (resp) *resp = s->answer_len ? json_loadb(s->answer, s->answer_len, JSON_DECODE_ANY, NULL) : NULL;
}

int hf_xfer_put(hf_http *c, const char *method, const char *path, int fd, int64_t size, const char *sha256,
                const hf_xfer_opts *o, long *status, json_t **resp, char *err, size_t errlen)
{
    static const hf_xfer_opts none = {0};
    char hsha[128], what[600];
    const char *hdrs[34];
    size_t n = 0;
    if (!o) o = &none;
    if (resp) *resp = NULL;
    *status = 0;
    if (sha256) {
        snprintf(hsha, sizeof hsha, "X-Hyperfarm-Sha256: %.64s", sha256);
        hdrs[n++] = hsha;
    }
    for (const char *const *p = o->headers; p && *p && n < 33; p++) hdrs[n++] = *p;
    hdrs[n] = NULL;
    hf_http_stream s = {.method = method, .path = path, .headers = hdrs, .body_fd = fd, .body_size = size,
                        .progress = o->progress, .progress_ud = o->progress_ud, .stall_bytes = o->stall_bytes,
                        .stall_s = o->stall_s};
    int rc = hf_http_stream_run(c, &s, err, errlen);
    *status = s.status;
    if (rc == 0) {
        what_of(c, method, path, o, what, sizeof what);
        rc = hf_xfer_status(s.status, s.answer, s.answer_len, what, err, errlen);
        answer_json(&s, resp);
    } else {
        prefix_err(o, err, errlen);
    }
    free(s.answer);
    return rc;
}

/* ---------- download ---------- */

typedef struct dl {
    int                  fd;
    gnutls_hash_hd_t     h;
    int64_t              got, want;
    hf_http_progress_fn *progress;
    void                *progress_ud;
    char                *err;
    size_t               errlen;
} dl;

static int dl_sink(void *ud, const void *p, size_t n)
{
    dl *d = ud;
    if ((int64_t)n > d->want - d->got) {
        snprintf(d->err, d->errlen, "the server sent more than the expected %lld bytes", (long long)d->want);
        return HF_ECORRUPT;
    }
    int rc = hf_file_write_all(d->fd, p, n);
    if (rc) {
        snprintf(d->err, d->errlen, "writing the download: %s", hf_strerror(rc));
        return rc;
    }
    gnutls_hash(d->h, p, n);
    d->got += (int64_t)n;
    if (d->progress) d->progress(d->progress_ud, d->got, d->want);
    return 0;
}

/* The directory of path (a copy in dir) and its basename (in path). */
static void split_path(const char *path, char *dir, size_t dirlen, const char **base)
{
    const char *s = strrchr(path, '/');
    if (!s) snprintf(dir, dirlen, ".");
    else if (s == path) snprintf(dir, dirlen, "/");
    else snprintf(dir, dirlen, "%.*s", (int)(s - path), path);
    *base = s ? s + 1 : path;
}

/* After a complete 2xx transfer: size and hash, fsync, rename, fsync the
 * directory. RET 0 or HF_E* with err. */
static int dl_finish(dl *d, const char *sha256, const char *tmp, const char *dest, const char *dir, char *err,
                     size_t errlen)
{
    unsigned char dig[32];
    char hex[HF_SHA256_HEX];
    gnutls_hash_output(d->h, dig);
    hf_sha256_hex(dig, hex);
    if (d->got != d->want || strcmp(hex, sha256) != 0) {
        snprintf(err, errlen, "got %lld bytes with SHA-256 %s, expected %lld bytes with SHA-256 %s",
                 (long long)d->got, hex, (long long)d->want, sha256);
        return HF_ECORRUPT;
    }
    if (fsync(d->fd) != 0 || rename(tmp, dest) != 0) {
        int e = errno;
        snprintf(err, errlen, "storing %s: %s", dest, strerror(e));
        return hf_err_from_errno(e);
    }
    hf_file_fsync_dir(dir);
    return 0;
}

int hf_xfer_get(hf_http *c, const char *path, const char *sha256, int64_t size, const char *dest,
                const hf_xfer_opts *o, long *status, json_t **resp, char *err, size_t errlen)
{
    static const hf_xfer_opts none = {0};
    char dir[PATH_MAX], tmp[PATH_MAX + 32], what[600];
    const char *base;
    dl d = {.fd = -1, .want = size, .err = err, .errlen = errlen};
    int rc;
    if (!o) o = &none;
    if (resp) *resp = NULL;
    *status = 0;
    if (!hf_sha256_hex_valid(sha256) || size < 0) {
        snprintf(err, errlen, "not an object: %.80s (%lld bytes)", sha256 ? sha256 : "(null)", (long long)size);
        return HF_EINVAL;
    }
    split_path(dest, dir, sizeof dir, &base);
    if (snprintf(tmp, sizeof tmp, "%s/.%s.part-XXXXXX", dir, base) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", dest);
        return HF_EINVAL;
    }
    if ((d.fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
        rc = hf_err_from_errno(errno);
        snprintf(err, errlen, "cannot create a file in %s: %s", dir, strerror(errno));
        return rc;
    }
    if (gnutls_hash_init(&d.h, GNUTLS_DIG_SHA256) != 0) {
        close(d.fd);
        unlink(tmp);
        snprintf(err, errlen, "out of memory");
        return HF_ENOMEM;
    }
    d.progress = o->progress;
    d.progress_ud = o->progress_ud;
    hf_http_stream s = {.method = "GET", .path = path, .headers = o->headers, .body_fd = -1, .sink = dl_sink,
                        .sink_ud = &d, .stall_bytes = o->stall_bytes, .stall_s = o->stall_s};
    rc = hf_http_stream_run(c, &s, err, errlen);
    *status = s.status;
    what_of(c, "GET", path, o, what, sizeof what);
    if (rc == 0) {
        rc = hf_xfer_status(s.status, s.answer, s.answer_len, what, err, errlen);
        if (rc) answer_json(&s, resp);
        else if ((rc = dl_finish(&d, sha256, tmp, dest, dir, err, errlen))) prefix_err(o, err, errlen);
    } else {
        prefix_err(o, err, errlen);
    }
    free(s.answer);
    gnutls_hash_deinit(d.h, NULL);
    close(d.fd);
    if (rc) unlink(tmp);
    return rc;
}

/*
 * hf_http.c — JSON HTTP client on libcurl (see hf_http.h).
 */
#include "hf_http.h"
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_json.h"
#include "hf_time.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct hf_http {
    CURL *curl;
    char *base;
    char *auth;      /* "Authorization: Bearer ..." or NULL */
    char *cafile;
    long  timeout_ms;
    int   retries;
    const atomic_int *cancel;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

hf_http *hf_http_new(const char *base_url, const char *token, long timeout_ms, int retries)
{
    pthread_once(&curl_once, curl_init_once);
    hf_http *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->curl = curl_easy_init();
    size_t n = strlen(base_url);
    while (n > 0 && base_url[n - 1] == '/') n--;
    c->base = strndup(base_url, n);
    if (token && *token) {
        size_t alen = strlen(token) + 32;
        c->auth = malloc(alen);
        if (c->auth) snprintf(c->auth, alen, "Authorization: Bearer %s", token);
    }
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    c->retries = retries < 0 ? 0 : retries;
    if (!c->curl || !c->base || (token && *token && !c->auth)) {
        hf_http_free(c);
        return NULL;
    }
    return c;
}

void hf_http_free(hf_http *c)
{
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->base);
    free(c->auth);
    free(c->cafile);
    free(c);
}

void hf_http_set_cafile(hf_http *c, const char *cafile)
{
    free(c->cafile);
    c->cafile = cafile ? strdup(cafile) : NULL;
}

void hf_http_set_retries(hf_http *c, int retries) { c->retries = retries < 0 ? 0 : retries; }
void hf_http_set_cancel(hf_http *c, const atomic_int *flag) { c->cancel = flag; }

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt; (void)dn; (void)ut; (void)un;
    const atomic_int *flag = ud;
    return atomic_load(flag) ? 1 : 0;
}
const char *hf_http_base(const hf_http *c) { return c->base; }

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    hf_buf *b = ud;
    if (hf_buf_add(b, p, size * n)) return 0;   /* over the bound: abort transfer */
    return size * n;
}

static int attempt(hf_http *c, const char *method, const char *url, const char *body,
                   long *status, hf_buf *out, CURLcode *cc)
{
    struct curl_slist *hdr = NULL;
    CURL *h = c->curl;

    curl_easy_reset(h);
    hdr = curl_slist_append(hdr, "Accept: application/json");
    if (body) hdr = curl_slist_append(hdr, "Content-Type: application/json");
    if (c->auth) hdr = curl_slist_append(hdr, c->auth);
    hdr = curl_slist_append(hdr, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < 5000 ? c->timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->cafile) curl_easy_setopt(h, CURLOPT_CAINFO, c->cafile);
    if (c->cancel) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)c->cancel);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);   /* no body will follow the headers */
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (strcmp(method, "GET") == 0) curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    *cc = curl_easy_perform(h);
    curl_slist_free_all(hdr);
    if (*cc != CURLE_OK) return -1;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    return 0;
}

int hf_http_request_raw(hf_http *c, const char *method, const char *path, const char *body,
                        long *status, char **body_out, size_t *len_out, char *err, size_t errlen)
{
    char url[4096];
    hf_buf out;
    CURLcode cc = CURLE_OK;
    int64_t backoff = 100;
    int is_get = strcmp(method, "GET") == 0;

    *status = 0;
    *body_out = NULL;
    if (len_out) *len_out = 0;
    if (snprintf(url, sizeof url, "%s%s", c->base, path) >= (int)sizeof url) {
        snprintf(err, errlen, "URL too long");
        return HF_EINVAL;
    }
    hf_buf_init(&out, HF_HTTP_MAX_BODY);
    for (int i = 0;; i++) {
        hf_buf_reset(&out);
        int rc = attempt(c, method, url, body, status, &out, &cc);
        int retriable = 0;
        if (rc) retriable = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST
                            || (is_get && cc != CURLE_WRITE_ERROR && cc != CURLE_PEER_FAILED_VERIFICATION);
        else retriable = is_get && (*status == 502 || *status == 503 || *status == 504);
        if (!retriable || i >= c->retries) break;
        hf_sleep_ms(backoff + (int64_t)(rand() % (int)(backoff / 4 + 1)));
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
    if (cc != CURLE_OK) {
        hf_buf_free(&out);
        if (cc == CURLE_WRITE_ERROR) {
            snprintf(err, errlen, "%s %s: response larger than %u bytes", method, url, HF_HTTP_MAX_BODY);
            return HF_ETOOBIG;
        }
        snprintf(err, errlen, "%s %s: %s", method, url, curl_easy_strerror(cc));
        return cc == CURLE_OPERATION_TIMEDOUT ? HF_ETIMEOUT : HF_ECONN;
    }
    *body_out = hf_buf_take(&out, len_out);
    return HF_OK;
}

int hf_http_request(hf_http *c, const char *method, const char *path, const json_t *body,
                    long *status, json_t **resp, char *err, size_t errlen)
{
    char *text = NULL, *rbody = NULL;
    size_t rlen = 0;
    *resp = NULL;
    if (body && !(text = hf_json_dump(body))) {
        snprintf(err, errlen, "cannot serialise request body");
        return HF_ENOMEM;
    }
    int rc = hf_http_request_raw(c, method, path, text, status, &rbody, &rlen, err, errlen);
    free(text);
    if (rc) return rc;
    if (rlen > 0) *resp = json_loadb(rbody, rlen, JSON_DECODE_ANY, NULL);
    free(rbody);
    return HF_OK;
}

/* ---------- streamed upload ---------- */

typedef struct upload_src {
    int                 fd;
    int64_t             size, sent;
    int                 read_errno;
    hf_http_progress_fn *progress;
    void               *ud;
    const atomic_int   *cancel;
} upload_src;

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
    upload_src *u = ud;
    size_t want = size * n;
    if ((int64_t)want > u->size - u->sent) want = (size_t)(u->size - u->sent);
    for (;;) {
        ssize_t r = read(u->fd, buf, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { u->read_errno = errno; return CURL_READFUNC_ABORT; }
        u->sent += r;
        return (size_t)r;
    }
}

static int on_upload_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    upload_src *u = ud;
    (void)dt; (void)dn; (void)ut;
    if (u->progress) u->progress(u->ud, (int64_t)un, u->size);
    return u->cancel && atomic_load(u->cancel) ? 1 : 0;
}

int hf_http_upload(hf_http *c, const char *method, const char *path, int fd, int64_t size,
                   const char *const *headers, hf_http_progress_fn *progress, void *ud,
                   long *status, json_t **resp, char *err, size_t errlen)
{
    char url[4096];
    struct curl_slist *hdr = NULL;
    upload_src u = {.fd = fd, .size = size, .progress = progress, .ud = ud, .cancel = c->cancel};
    hf_buf out;
    CURL *h = c->curl;
    int rc = HF_OK;

    *status = 0;
    *resp = NULL;
    if (snprintf(url, sizeof url, "%s%s", c->base, path) >= (int)sizeof url) {
        snprintf(err, errlen, "URL too long");
        return HF_EINVAL;
    }
    hf_buf_init(&out, HF_HTTP_MAX_BODY);
    curl_easy_reset(h);
    hdr = curl_slist_append(hdr, "Accept: application/json");
    hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
    if (c->auth) hdr = curl_slist_append(hdr, c->auth);
    hdr = curl_slist_append(hdr, "Expect:");
    for (const char *const *p = headers; p && *p; p++) hdr = curl_slist_append(hdr, *p);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &u);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* No total timeout (a large body takes its time): a stall of the
     * request timeout aborts instead. */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < 5000 ? c->timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)(c->timeout_ms + 999) / 1000);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_upload_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &u);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    if (c->cafile) curl_easy_setopt(h, CURLOPT_CAINFO, c->cafile);
    CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(hdr);
    if (cc != CURLE_OK) {
        if (u.read_errno) {
            snprintf(err, errlen, "%s %s: reading the body: %s", method, url, strerror(u.read_errno));
            rc = HF_EIO;
        } else {
            snprintf(err, errlen, "%s %s: %s", method, url, curl_easy_strerror(cc));
            rc = cc == CURLE_OPERATION_TIMEDOUT ? HF_ETIMEOUT : HF_ECONN;
        }
        goto end;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    if (out.len > 0) *resp = json_loadb(out.data, out.len, JSON_DECODE_ANY, NULL);
end:
    hf_buf_free(&out);
    return rc;
}
